"""Scores of sampled evaluations: avg@k, pass@k and maj@k per problem, their means over problems, bootstrap
intervals. Every figure alprl reports from per-sample records (`alprl eval`, the training report, `alprl
experiment`, robustness sweeps) is computed here, so each is defined once.

Records are dicts, one per (problem, sample), as `evaluation.evaluate.evaluation_records` yields them: `index`
(problem), `sample`, `won` (graded success), `extracted_answer` (math envs only), episode facts. Reductions group the
samples of a problem, score each problem, then average over problems (every problem weighs the same).

With n samples of a problem, c of them correct:
- avg@n: c / n, the mean success of the samples (the ALP paper's average@32), averaged over problems.
- pass@k for k ≤ n: the unbiased estimator 1 − C(n−c, k) / C(n, k) of "at least one of k samples is correct",
  averaged over problems; the curve is reported at k = 1, 2, 4, ... and n. pass@1 equals avg@n.
- maj@n: the majority vote over the n extracted answers is correct. Answers are counted in the form `vote_key`
  gives them (the gold normalization of `envs.datasets.answers`, whitespace removed), so "033" and "33" are one
  vote but "1/2" and "\\frac{1}{2}" are two: grading every pair of answers against each other would cost one
  time-bounded grade per pair. Empty answers (no box) do not vote; a tie goes to the answer sampled first; with no
  answer at all the vote is wrong. The winner's correctness is the `won` flag of its first sample (already graded
  against the gold; nothing is graded again here). Envs that report no answers (household, webshop: records
  without `extracted_answer`) have no maj@n (None).
- intervals: percentile bootstrap of a mean over problems; a paired difference (two evaluations of the same
  problems) bootstraps the per-problem change, which cancels how hard each problem is and so resolves smaller
  changes than two independent intervals.
The Average column of `alprl eval` is the unweighted mean of the benchmarks' figures, as the papers' tables lay it
out (None when a benchmark lacks the figure).
"""

from __future__ import annotations

import math
import random
import statistics
from collections import defaultdict
from collections.abc import Hashable, Iterator, Mapping, Sequence
from typing import Any

from envs.datasets.answers import normalize_text

Record = Mapping[str, Any]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem with `n` samples, `c` correct.

    Computed as 1 − Π_{i=n−c+1}^{n} (1 − k/i), the product form of 1 − C(n−c, k)/C(n, k): no huge binomials (a
    float overflows at C(2000, 1000)) and no cancellation, since each factor is in [0, 1).
    """
    # Chen et al. 2021, "Evaluating Large Language Models Trained on Code" (arXiv 2107.03374), §2.1, eq. 1
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}; "
                         "lower k or sample more")
    if n - c < k:  # every k-subset holds a correct sample
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def k_values(n: int) -> list[int]:
    """The pass@k curve's points for n samples: 1, 2, 4, ... up to n, and n itself."""
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return ks + [n] if n >= 1 else []


def avg_at_k(scores: Sequence[float]) -> float:
    """Mean score of one problem's samples (bools count as 0/1)."""
    if not scores:
        raise ValueError("avg_at_k: no samples")
    return statistics.fmean(float(s) for s in scores)


def vote_key(answer: str | None) -> str:
    """The form an extracted answer votes in ("" for no answer)."""
    return "".join(normalize_text(answer or "").split())


def majority_vote(answers: Sequence[str | None], wins: Sequence[bool]) -> tuple[str, bool]:
    """(winning answer key, whether it is correct) over one problem's samples, in sample order; ("", False) when no
    sample answered. See the module docstring for ties and empty answers."""
    if len(answers) != len(wins):
        raise ValueError(f"majority_vote: {len(answers)} answers but {len(wins)} verdicts")
    counts: dict[str, int] = {}
    first: dict[str, int] = {}
    for i, answer in enumerate(answers):
        key = vote_key(answer)
        if key:
            counts[key] = counts.get(key, 0) + 1
            first.setdefault(key, i)
    if not counts:
        return "", False
    winner = max(counts, key=lambda key: (counts[key], -first[key]))  # ties: the answer sampled first
    return winner, bool(wins[first[winner]])


def group_by_problem(records: Sequence[Record], problem_key: str = "index", *,
                     sample_key: str | None = None) -> dict[Hashable, list[Record]]:
    """Samples of each problem, problems in order of first appearance; each problem's samples in record order, or
    sorted by `sample_key` when given (records written by resumed or parallel chunks may be out of order)."""
    groups: dict[Hashable, list[Record]] = defaultdict(list)
    for i, r in enumerate(records):
        if problem_key not in r:
            raise KeyError(f"record {i} has no {problem_key!r} field (keys: {sorted(r)}); pass problem_key=")
        groups[r[problem_key]].append(r)
    if sample_key is not None:
        return {p: sorted(g, key=lambda r: r[sample_key]) for p, g in groups.items()}
    return dict(groups)


def bootstrap_indices(n: int, *, n_boot: int, seed: int) -> Iterator[list[int]]:
    """`n_boot` resamples of positions 0..n−1, each n draws with replacement, from `random.Random(seed)`: the same
    draws for every caller with the same n and seed, so paired series resampled by them stay paired."""
    rng = random.Random(seed)
    positions = range(n)
    for _ in range(n_boot):
        yield rng.choices(positions, k=n)


def _percentile_bounds(ordered: Sequence[float], alpha: float) -> tuple[float, float]:
    """The alpha/2 and 1 − alpha/2 points of sorted bootstrap statistics (the percentile interval)."""
    last = len(ordered) - 1
    return ordered[int(math.floor(alpha / 2 * last))], ordered[int(math.ceil((1 - alpha / 2) * last))]


def bootstrap_ci(values: Sequence[float], *, n_boot: int = 1000, alpha: float = 0.05,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap (1 − alpha) interval of the mean of `values` (resampled with replacement)."""
    if not values:
        raise ValueError("bootstrap_ci: no values")
    means = sorted(statistics.fmean([values[i] for i in idx])
                   for idx in bootstrap_indices(len(values), n_boot=n_boot, seed=seed))
    return _percentile_bounds(means, alpha)


def bootstrap_ratio_ci(num: Sequence[float], den: Sequence[float], *, n_boot: int = 1000, alpha: float = 0.05,
                       seed: int = 0) -> tuple[float, float | None]:
    """Percentile bootstrap (1 − alpha) interval of mean(num) / mean(den), the pairs (num[i], den[i]) resampled
    together; num and den ≥ 0 (success rates). A resample with mean(den) = 0 has no finite ratio: it counts as +∞,
    or, when mean(num) is 0 too, as the lowest possible ratio (0) for the lower bound and +∞ for the upper, so an
    undefined ratio can only widen the interval. The upper bound is None when it is +∞ (unbounded)."""
    if not num or len(num) != len(den):
        raise ValueError(f"bootstrap_ratio_ci: needs as many numerators as denominators, at least one "
                         f"(got {len(num)} and {len(den)})")
    low_end, high_end = [], []
    for idx in bootstrap_indices(len(num), n_boot=n_boot, seed=seed):
        top, bottom = statistics.fmean([num[i] for i in idx]), statistics.fmean([den[i] for i in idx])
        ratio = top / bottom if bottom > 0 else math.inf
        low_end.append(0.0 if bottom <= 0 and top <= 0 else ratio)
        high_end.append(ratio)
    lo = _percentile_bounds(sorted(low_end), alpha)[0]
    hi = _percentile_bounds(sorted(high_end), alpha)[1]
    return lo, hi if math.isfinite(hi) else None


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


def benchmark_scores(records: Sequence[Record]) -> dict[str, Any]:
    """avg@n, maj@n, pass@k (k = 1, 2, 4, ..., n) and mean episode facts of one benchmark's records.

    Every problem must have the same number of samples n (what one `alprl eval` run gives)."""
    groups = group_by_problem(records, sample_key="sample")
    if not groups:
        raise ValueError("benchmark_scores: no records")
    sizes = {len(g) for g in groups.values()}
    if len(sizes) != 1:
        raise ValueError(f"benchmark_scores: problems have different sample counts {sorted(sizes)}")
    (n,) = sizes
    correct = [sum(bool(r["won"]) for r in g) for g in groups.values()]
    votes = [majority_vote([r.get("extracted_answer", "") for r in g], [bool(r["won"]) for r in g])[1]
             for g in groups.values()] if any("extracted_answer" in r for r in records) else None
    return {"problems": len(groups), "samples": n,
            "avg": statistics.fmean(c / n for c in correct),
            "maj": None if votes is None else statistics.fmean(float(v) for v in votes),
            "pass": {str(k): statistics.fmean(pass_at_k(n, c, k) for c in correct) for k in k_values(n)},
            "reward": statistics.fmean(float(r["reward"]) for r in records),
            "response_tokens": statistics.fmean(float(r["response_tokens"]) for r in records),
            "turns": statistics.fmean(float(r["turns"]) for r in records),
            "tool_calls": statistics.fmean(float(r["tool_calls"]) for r in records),
            "answered": statistics.fmean(float(bool(vote_key(r.get("extracted_answer", "")))) for r in records),
            "truncated": statistics.fmean(float(bool(r.get("truncated"))) for r in records)}


def average_scores(per_bench: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The Average column: each figure's unweighted mean over benchmarks (pass@k at the k every one has)."""
    rows = list(per_bench.values())
    if not rows:
        return {}
    shared = [k for k in rows[0]["pass"] if all(k in r["pass"] for r in rows)]
    majority = [r["maj"] for r in rows]
    return {"avg": statistics.fmean(r["avg"] for r in rows),
            "maj": None if None in majority else statistics.fmean(majority),
            "pass": {k: statistics.fmean(r["pass"][k] for r in rows) for k in shared}}
