"""Sample-based evaluation metrics over per-example records: avg@k, pass@k, maj@k, bootstrap intervals.

Records are dicts, one per (problem, sample), as `evaluation.evaluate.evaluation_records` yields them:
`index` (problem id), `won` (success, bool or 0/1 score), `task_type`, and optionally `answer` (the
extracted final answer, for maj@k). Reductions group the samples of a problem, score each problem, then
average over problems (every problem weighs the same, however many samples it has).

- avg@n: mean success over all n samples of a problem, averaged over problems (the ALP paper's
  "average@32" with n = 32).
- pass@k: probability that at least one of k samples drawn without replacement from the n is correct,
  by the unbiased estimator of Chen et al. 2021 (arXiv 2107.03374, §2.1): 1 − C(n−c, k)/C(n, k).
- maj@k: majority vote over the extracted answers of a problem's first k samples; the problem counts as
  solved if the winning answer's samples are correct. Empty answers do not vote; ties go to the answer
  seen first.
- paired difference: two evaluations of the same problems (e.g. the SFT start and a later step): the mean of
  the per-problem change in avg@n, with a bootstrap interval over problems; pairing cancels how hard each
  problem is, so it resolves smaller changes than two independent intervals.
"""

from __future__ import annotations

import math
import random
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

Record = Mapping[str, Any]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem with n samples of which c are correct.

    Computed as 1 − Π_{i=n−c+1}^{n} (1 − k/i), the product form of 1 − C(n−c, k)/C(n, k): no huge binomials,
    no cancellation (each factor is in [0, 1)).
    """
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k: need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k: need 1 <= k <= n, got k={k} with n={n} samples; lower k or sample more")
    if n - c < k:  # every k-subset contains a correct sample
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def avg_at_k(scores: Sequence[float]) -> float:
    """Mean score of one problem's k samples (bools count as 0/1)."""
    if not scores:
        raise ValueError("avg_at_k: no samples")
    return statistics.fmean(float(s) for s in scores)


def majority_answer(answers: Sequence[Hashable | None]) -> int | None:
    """Position (in `answers`) of the first sample carrying the most frequent non-empty answer; None if no
    sample has an answer. Ties go to the answer that appears first."""
    votes = Counter(a for a in answers if a not in (None, ""))
    if not votes:
        return None
    top = max(votes.values())
    return next(i for i, a in enumerate(answers) if a not in (None, "") and votes[a] == top)


def maj_at_k(answers: Sequence[Hashable | None], correct: Sequence[bool]) -> float:
    """1.0 if the majority answer among these k samples is correct, else 0.0 (also when nobody answered).

    `correct[i]` is the grader's verdict on sample i; equal answers are assumed to get equal verdicts.
    """
    if len(answers) != len(correct):
        raise ValueError(f"maj_at_k: {len(answers)} answers but {len(correct)} verdicts")
    winner = majority_answer(answers)
    return 0.0 if winner is None else float(bool(correct[winner]))


def group_by_problem(records: Sequence[Record], problem_key: str = "index") -> dict[Hashable, list[Record]]:
    """Samples of each problem, in record order (record order = sample order for maj@k's 'first k')."""
    groups: dict[Hashable, list[Record]] = defaultdict(list)
    for i, r in enumerate(records):
        if problem_key not in r:
            raise KeyError(f"record {i} has no {problem_key!r} field (keys: {sorted(r)}); pass problem_key=")
        groups[r[problem_key]].append(r)
    return dict(groups)


def bootstrap_ci(values: Sequence[float], *, n_boot: int = 1000, alpha: float = 0.05,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap (1 − alpha) interval of the mean of `values` (resampled with replacement)."""
    if not values:
        raise ValueError("bootstrap_ci: no values")
    rng = random.Random(seed)
    n = len(values)
    means = sorted(statistics.fmean(rng.choices(values, k=n)) for _ in range(n_boot))
    lo = means[int(math.floor(alpha / 2 * (n_boot - 1)))]
    hi = means[int(math.ceil((1 - alpha / 2) * (n_boot - 1)))]
    return lo, hi


def paired_difference(before: Sequence[Record], after: Sequence[Record], *, success_key: str = "won",
                      problem_key: str = "index", n_boot: int = 2000, seed: int = 0) -> dict[str, float]:
    """Change of per-problem mean success from `before` to `after` over the problems both evaluated: keys
    `before`, `after`, `diff` (= after − before) and its 95% bootstrap interval `diff_ci_lo/_hi`, `problems`."""
    mean_before = {p: avg_at_k([float(r[success_key]) for r in g])
                   for p, g in group_by_problem(before, problem_key).items()}
    mean_after = {p: avg_at_k([float(r[success_key]) for r in g])
                  for p, g in group_by_problem(after, problem_key).items()}
    shared = sorted(mean_before.keys() & mean_after.keys(), key=str)
    if not shared:
        raise ValueError("paired_difference: the two evaluations share no problem; evaluate the same tasks "
                         "(same seed and eval_tasks)")
    diffs = [mean_after[p] - mean_before[p] for p in shared]
    lo, hi = bootstrap_ci(diffs, n_boot=n_boot, seed=seed)
    return {"before": statistics.fmean(mean_before[p] for p in shared),
            "after": statistics.fmean(mean_after[p] for p in shared),
            "diff": statistics.fmean(diffs), "diff_ci_lo": lo, "diff_ci_hi": hi, "problems": float(len(shared))}


def sample_metrics(records: Sequence[Record], ks: Sequence[int] = (1,), *, success_key: str = "won",
                   answer_key: str = "answer", problem_key: str = "index",
                   ci: bool = False) -> dict[str, float]:
    """avg@n, pass@k (each k in ks), maj@k (when records carry answers) over problems; keys `avg@8`,
    `pass@4`, `maj@4`, plus `avg@8_ci_lo/_hi` with `ci=True`, and `problems`.

    `n` in avg@n is the samples per problem (the smallest count if problems differ). Every k must be
    ≤ that count.
    """
    groups = group_by_problem(records, problem_key)
    if not groups:
        return {}
    n_min = min(len(g) for g in groups.values())
    bad = [k for k in ks if not 1 <= k <= n_min]
    if bad:
        raise ValueError(f"sample_metrics: k={bad} out of range; every problem needs >= k samples "
                         f"(smallest problem has {n_min})")
    wins = {p: [float(r[success_key]) for r in g] for p, g in groups.items()}
    per_problem_avg = [avg_at_k(w) for w in wins.values()]
    out = {f"avg@{n_min}": statistics.fmean(per_problem_avg), "problems": float(len(groups))}
    if ci:
        out[f"avg@{n_min}_ci_lo"], out[f"avg@{n_min}_ci_hi"] = bootstrap_ci(per_problem_avg)
    for k in ks:
        # pass@k is for binary success; a partial score counts as correct only when it is 1.
        out[f"pass@{k}"] = statistics.fmean(pass_at_k(len(w), sum(x >= 1.0 for x in w), k)
                                            for w in wins.values())
    if any(answer_key in r for r in records):
        for k in ks:
            out[f"maj@{k}"] = statistics.fmean(
                maj_at_k([r.get(answer_key) for r in g[:k]], [float(r[success_key]) >= 1.0 for r in g[:k]])
                for g in groups.values())
    return out


def by_task_type(records: Sequence[Record], reducer: Callable[[Sequence[Record]], Mapping[str, float]],
                 type_key: str = "task_type") -> dict[str, dict[str, float]]:
    """`reducer` applied to all records (key "all") and to each task type's records separately."""
    out = {"all": dict(reducer(records))}
    groups: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        groups[str(r.get(type_key, ""))].append(r)
    for task_type in sorted(groups):
        if task_type:
            out[task_type] = dict(reducer(groups[task_type]))
    return out


def flatten(per_type: Mapping[str, Mapping[str, float]], prefix: str = "eval") -> dict[str, float]:
    """`{"all": {"pass@4": x}, "add": {...}}` → `{"eval/pass@4": x, "eval/pass@4/add": ...}` (logger keys)."""
    out = {}
    for task_type, metrics in per_type.items():
        suffix = "" if task_type == "all" else f"/{task_type}"
        out |= {f"{prefix}/{name}{suffix}": value for name, value in metrics.items()}
    return out
