"""Benchmark scores from per-sample records: avg@k, maj@k and pass@k, per benchmark and averaged over benchmarks.

With n samples of a problem, c of them correct:
- avg@n: c / n, the mean success of the samples (the ALP paper's average@32), averaged over problems.
- pass@k for k ≤ n: the unbiased estimator 1 − C(n−c, k) / C(n, k) of "at least one of k samples is correct"
  (Chen et al. 2021, "Evaluating Large Language Models Trained on Code", eq. 1), averaged over problems; the
  curve is reported at k = 1, 2, 4, ... and n. pass@1 equals avg@n.
- maj@n: the majority vote over the n extracted answers is correct. Answers are counted in the form
  `vote_key` gives them (the gold normalization of `envs.datasets.answers`, whitespace removed), so "033" and
  "33" are one vote but "1/2" and "\\frac{1}{2}" are two: grading every pair of answers against each other would
  cost one time-bounded grade per pair. Empty answers (no box) do not vote; a tie goes to the answer sampled
  first; with no answer at all the vote is wrong. The winner's correctness is the `won` flag of its first sample
  (already graded against the gold; nothing is graded again here). Envs that report no answers (household,
  webshop: records without `extracted_answer`) have no maj@n (None).
The Average column is the unweighted mean of the benchmarks' figures, as the papers' tables lay it out (None when a
benchmark lacks the figure).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from envs.datasets.answers import normalize_text


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem with `n` samples, `c` correct (Chen et al. 2021, eq. 1)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def k_values(n: int) -> list[int]:
    """The pass@k curve's points for n samples: 1, 2, 4, ... up to n, and n itself."""
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return ks + [n] if n >= 1 else []


def vote_key(answer: str) -> str:
    """The form an extracted answer votes in ("" for no answer)."""
    return "".join(normalize_text(answer or "").split())


def majority_vote(answers: Sequence[str], wins: Sequence[bool]) -> tuple[str, bool]:
    """(winning answer key, whether it is correct) over one problem's samples, in sample order."""
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


def problem_samples(records: Sequence[Mapping[str, Any]]) -> dict[int, list[Mapping[str, Any]]]:
    """A benchmark's records grouped by task index, each group in sample order."""
    groups: dict[int, list[Mapping[str, Any]]] = defaultdict(list)
    for r in records:
        groups[int(r["index"])].append(r)
    return {i: sorted(g, key=lambda r: r["sample"]) for i, g in sorted(groups.items())}


def benchmark_scores(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """avg@n, maj@n, pass@k (k = 1, 2, 4, ..., n) and mean episode facts of one benchmark's records.

    Every problem must have the same number of samples n (what one `alprl eval` run gives)."""
    groups = problem_samples(records)
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
