"""Inference for experiment reports: intervals that count run-to-run noise, Holm's correction over a suite's declared
comparisons, the smallest effect a design can detect, and whether that is small enough to test the paper's claim.

A cell's held-out success has two sources of noise: which tasks the evaluation drew and sampled (evaluation noise),
and which training run the seed produced (run-to-run noise; in these suites the spread of per-seed differences is
1.1-2.3× what evaluation noise alone predicts). A comparison's intervals (`comparison_summary`):
- **over runs** (the verdict's): the few-cluster t over seeds (`cluster_summary`): the CR1 cluster-robust SE of a
  mean of S equal clusters, sd(seed means) / √S, read with t_{S−1} (Cameron & Miller 2015, J. Human Resources
  50(2), §VI), floored at the evaluation-only SE (two seeds whose differences happen to agree would leave CR1 at 0).
  Each seed's mean already carries its tasks' noise, so the spread of seed means counts run and task noise once.
  Planted nulls and effects (tests/evaluation/test_experiment_inference.py: 4,000 replicates at the data's run sd
  0.02) hold its false positives within 5% and give it several times the power of the interval below.
- **previous** (shown beside it for one release, decides nothing): the two-stage interval the reports used before,
  the hierarchical bootstrap's variance (seeds with replacement, then tasks within each; Davison & Hinkley 1997,
  *Bootstrap Methods and their Application*, §3.8), exact where every seed has the same tasks
  (`two_stage_variance`), scaled by S/(S − 1), read with t_{S−1}. It counts the tasks' noise twice, (2S − 1)/(S − 1)
  times in all. Neither interval uses the bootstrap's percentiles: with a few seeds those cannot reach past the
  per-seed extremes, so whenever every seed's difference has one sign they exclude 0 (a test plants such a null).
- **sign-flip p-value over seeds** (a second reading, decides nothing): Fisher's exact randomization test of the
  per-seed differences; never below 2^(1−S), so under six seeds it cannot reach 0.05.
- **evaluation only**: seeds held fixed, tasks resampled within each seed (95% percentile interval): how much of
  the interval is the evaluation's alone, for these particular trained runs.
With one seed no run-to-run noise is measured and no verdict is given. An arm's own success is read the same way
(its interval over runs the few-cluster t, the two-stage one beside it), though no verdict rests on it.

Verdicts: a suite declares its primary comparisons (the paper's claim, app/experiments/suites.py) before it runs; Holm's
step-down correction (Holm 1979, Scand. J. Statist. 6:65-70) runs over that family at α = 0.05 with each
comparison's two-sided few-cluster t p-value, and a primary comparison is "better" / "worse" only when Holm rejects
it, which is when its interval over runs at Holm's level for it (1 − α/(m − rank)) excludes 0. Every other
comparison is exploratory: its verdict is read from the uncorrected 95% interval and says so. The detectable effect
is (t_{S−1, 1−α'/2} + t_{S−1, 0.8}) · SE with α' the strictest level the comparison could be read at (α/m for a
primary one): the difference this design finds about 80% of the time. A comparison that finds nothing reads
"no power" instead of "inside the noise" when its design could not have found the effect in question: a primary
comparison whose detectable effect exceeds the one its paper reports (evaluation/reports/paper_effects.py), or any
comparison that detects nothing under 1 (a difference of success rates cannot exceed it: two seeds, mostly).

The evaluation-only interval is drawn: `N_BOOT` resamples keep its bounds within 0.001 across bootstrap RNG seeds
(a test checks committed suites); it never decides a verdict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from scipy.stats import t as student_t

ALPHA = 0.05
POWER = 0.8
N_BOOT = 100_000
ONE_SEED = "one seed: no verdict"
NO_POWER = "no power"
INSIDE = "inside the noise"


def by_seed(per_problem: Mapping[str, float]) -> dict[int, np.ndarray]:
    """Per-problem values keyed "<seed>:<task>" → one array of task values per seed, seeds in ascending order."""
    grouped: dict[int, list[float]] = {}
    for problem, value in per_problem.items():
        grouped.setdefault(int(str(problem).split(":", 1)[0]), []).append(float(value))
    return {seed: np.asarray(grouped[seed]) for seed in sorted(grouped)}


def resampled_means(seeds: Sequence[np.ndarray], *, hierarchical: bool, n_boot: int = N_BOOT,
                    rng_seed: int = 0) -> np.ndarray:
    """(n_boot,) bootstrap means over problems: seeds resampled with replacement and then tasks within each
    (hierarchical), or seeds held fixed and tasks resampled within each (evaluation only). Every problem weighs
    the same, as in the point estimate."""
    rng = np.random.default_rng(rng_seed)
    count = len(seeds)
    picks = rng.integers(0, count, (n_boot, count)) if hierarchical else np.tile(np.arange(count), (n_boot, 1))
    sums, sizes = np.zeros(n_boot), np.zeros(n_boot)
    for slot in range(count):  # a seed drawn twice gets two independent task resamples
        for k, values in enumerate(seeds):
            rows = np.flatnonzero(picks[:, slot] == k)  # (R,)
            if rows.size:
                draws = rng.integers(0, values.size, (rows.size, values.size))  # (R, T_k)
                sums[rows] += values[draws].sum(axis=1)
                sizes[rows] += values.size
    return sums / sizes


def two_stage_variance(seeds: Sequence[np.ndarray], *, rng_seed: int = 0) -> float:
    """The variance of `resampled_means(seeds, hierarchical=True)`: exact when every seed has the same number of
    tasks T (the suites' design: the same held-out tasks per seed), where it is
    (1/S) · (mean_k (m_k − M)² + mean_k σ²_k / T) over the seed means m_k and their plug-in task variances σ²_k;
    drawn (N_BOOT resamples) otherwise, where the mean over problems is a ratio with no closed form."""
    sizes = {v.size for v in seeds}
    if len(sizes) > 1:
        return float(resampled_means(seeds, hierarchical=True, rng_seed=rng_seed).var())
    means = np.array([v.mean() for v in seeds])
    within = np.array([v.var() for v in seeds])
    return float((((means - means.mean()) ** 2).mean() + within.mean() / sizes.pop()) / len(seeds))


def percentile_interval(means: np.ndarray, level_alpha: float = ALPHA) -> tuple[float, float]:
    lo, hi = np.quantile(means, [level_alpha / 2, 1 - level_alpha / 2])
    return float(lo), float(hi)


def t_interval(mean: float, se: float, df: int, level_alpha: float = ALPHA,
               bounds: tuple[float, float] = (-1.0, 1.0)) -> tuple[float, float]:
    """mean ± t · se, cut to what the quantity can be (a success rate's difference lies in [−1, 1]): with one or
    two degrees of freedom the t quantile alone reaches far past it."""
    half = float(student_t.ppf(1 - level_alpha / 2, df)) * se
    return max(bounds[0], mean - half), min(bounds[1], mean + half)


def t_p_value(mean: float, se: float, df: int) -> float:
    """Two-sided p-value of "no difference" (1 when the SE is 0 and the mean is 0)."""
    if se == 0:
        return 1.0 if mean == 0 else 0.0
    return float(2 * student_t.sf(abs(mean) / se, df))


def detectable_effect(se: float, df: int, alpha: float) -> float:
    """The smallest true difference found with probability POWER by a two-sided t test at `alpha` with `df`
    degrees of freedom."""
    return float(student_t.ppf(1 - alpha / 2, df) + student_t.ppf(POWER, df)) * se


def holm_levels(p_values: Sequence[float], alpha: float = ALPHA) -> list[tuple[bool, float]]:
    """Holm's step-down over one family: per hypothesis (rejected, the level it was tested at, α/(m − rank))."""
    m = len(p_values)
    out: list[tuple[bool, float]] = [(False, alpha)] * m
    rejecting = True
    for rank, i in enumerate(sorted(range(m), key=lambda j: p_values[j])):
        level = alpha / (m - rank)
        rejecting = rejecting and p_values[i] <= level  # once one is kept, every larger p is kept too
        out[i] = (rejecting, level)
    return out


def interval_summary(per_problem: Mapping[str, float], *, rng_seed: int = 0,
                     n_boot: int = N_BOOT) -> dict[str, object]:
    """A mean over problems ("<seed>:<task>" → value: an arm's success, or a paired difference) with its interval
    over runs (None with one seed), its evaluation-only interval, per-seed means, SE, degrees of freedom and
    p-value."""
    seeds = by_seed(per_problem)
    arrays = list(seeds.values())
    count = len(arrays)
    mean = float(np.concatenate(arrays).mean())
    evaluation = resampled_means(arrays, hierarchical=False, n_boot=n_boot, rng_seed=rng_seed + 1)
    out = {"mean": mean, "eval_ci": percentile_interval(evaluation), "seeds": count, "df": count - 1,
           "per_seed": {str(s): float(v.mean()) for s, v in seeds.items()}, "ci": None, "se": None, "p": None}
    if count > 1:
        se = (two_stage_variance(arrays, rng_seed=rng_seed) * count / (count - 1)) ** 0.5
        out |= {"se": se, "ci": t_interval(mean, se, count - 1), "p": t_p_value(mean, se, count - 1)}
    return out


def cluster_se(seed_means: np.ndarray, within_var: np.ndarray, tasks: int) -> np.ndarray:
    """The few-cluster SE over seeds, floored at the evaluation-only SE, for a mean over S seeds of T tasks each
    (..., S) → (...): CR1's cluster-robust SE of a mean of equal clusters, sd(seed means, unbiased) / √S (Cameron &
    Miller 2015, J. Human Resources 50(2), §VI: with t_{S−1}), but never below the SE that the tasks' own noise
    implies, √(mean_k σ²_k / T / S): two seeds whose differences happen to agree leave CR1 at 0.

    Unlike `two_stage_variance`, it does not count the tasks' noise twice: each seed's mean already carries its
    evaluation noise, so the spread of seed means measures run and task noise together (the two-stage form adds the
    within-seed part again, (2S − 1)/(S − 1) times in all). `within_var`: each seed's plug-in variance of its
    per-problem values (..., S)."""
    count = seed_means.shape[-1]
    cr1 = seed_means.std(axis=-1, ddof=1) / np.sqrt(count)
    floor = np.sqrt(within_var.mean(axis=-1) / tasks / count)
    return np.maximum(cr1, floor)


def sign_flip_p(seed_differences: Sequence[float]) -> float:
    """Two-sided randomization p-value of "no difference" over seeds: the share of the 2^S sign flips of the per-seed
    differences whose mean is at least as far from 0 as the observed (exact; Fisher's sign-flip test). With S seeds it
    is never below 2^(1−S): two seeds give at least 0.5, five at least 0.0625, so fewer than six cannot reach 0.05."""
    d = np.asarray(seed_differences, dtype=float)
    signs = np.array(np.meshgrid(*[[-1.0, 1.0]] * d.size)).reshape(d.size, -1).T  # (2^S, S)
    observed = abs(d.mean())
    return float((np.abs((signs * d).mean(axis=1)) >= observed - 1e-12).mean())


def cluster_summary(per_problem: Mapping[str, float]) -> dict[str, object]:
    """A mean over problems ("<seed>:<task>" → value) read with `cluster_se`: SE, t interval and p-value with S − 1
    degrees of freedom, and the sign-flip p-value over seeds as a second reading (None with one seed). Seeds must
    hold the same number of tasks (the suites' design)."""
    arrays = list(by_seed(per_problem).values())
    mean = float(np.concatenate(arrays).mean())
    out: dict[str, object] = {"mean": mean, "seeds": len(arrays), "df": len(arrays) - 1, "se": None, "ci": None,
                              "p": None, "p_sign_flip": None}
    if len(arrays) < 2:
        return out
    if len({a.size for a in arrays}) > 1:
        raise ValueError("cluster_summary: every seed must hold the same tasks (the suites' design)")
    means = np.array([a.mean() for a in arrays])
    se = float(cluster_se(means, np.array([a.var() for a in arrays]), arrays[0].size))
    return out | {"se": se, "ci": t_interval(mean, se, len(arrays) - 1), "p": t_p_value(mean, se, len(arrays) - 1),
                  "p_sign_flip": sign_flip_p(means)}


def comparison_summary(per_problem: Mapping[str, float], *, rng_seed: int = 0,
                       n_boot: int = N_BOOT) -> dict[str, object]:
    """A paired difference over problems ("<seed>:<task>" → arm − baseline) read as the module docstring says: the
    few-cluster t's SE, 95% interval, degrees of freedom and p-value (the verdict's; None with one seed), the
    sign-flip p-value over seeds, the previous two-stage interval, the evaluation-only interval and per-seed
    means."""
    previous = interval_summary(per_problem, rng_seed=rng_seed, n_boot=n_boot)
    cluster = cluster_summary(per_problem)
    return cluster | {"eval_ci": previous["eval_ci"], "per_seed": previous["per_seed"], "previous_ci": previous["ci"],
                      "previous_se": previous["se"]}


def _direction(lo: float, hi: float) -> str:
    return "better" if lo > 0 else "worse" if hi < 0 else INSIDE


def lacks_power(detectable: float, paper_effect: float | None) -> bool:
    """Whether a design that finds nothing could not have found the effect in question: its detectable effect
    exceeds the paper's (when the paper reports one), or nothing under 1, the largest difference of two success
    rates, is detectable."""
    return detectable > 1 or (paper_effect is not None and detectable > abs(paper_effect))


def corrected_verdicts(comparisons: list[dict], alpha: float = ALPHA) -> list[dict]:
    """Fill each comparison's family-wise fields: Holm over the `primary` ones (their corrected interval, level
    and verdict), the uncorrected reading for the exploratory ones, everyone's detectable effect, and "no power"
    for a comparison that found nothing it could have found (`lacks_power`). Each comparison holds `mean`, `ci_lo`,
    `ci_hi`, `seeds`, `df`, `se`, `p` and `family`, and may hold `paper_effect` (a primary one's, or None)."""
    primary = [c for c in comparisons if c["family"] == "primary" and c["seeds"] > 1]
    m = max(1, len(primary))
    for c, (rejected, level) in zip(primary, holm_levels([c["p"] for c in primary], alpha), strict=True):
        c.update(holm_level=level, corrected_ci=t_interval(c["mean"], c["se"], c["df"], level),
                 verdict=("better" if c["mean"] > 0 else "worse") if rejected else INSIDE)
    for c in comparisons:
        if c["seeds"] < 2:
            c.update(holm_level=None, corrected_ci=None, verdict=ONE_SEED, detectable=None)
            continue
        if c["family"] != "primary":
            direction = _direction(c["ci_lo"], c["ci_hi"])
            c.update(holm_level=None, corrected_ci=None,
                     verdict=direction if direction == INSIDE else f"{direction} (exploratory)")
        c["detectable"] = detectable_effect(c["se"], c["df"], alpha / m if c["family"] == "primary" else alpha)
        if c["verdict"] == INSIDE and lacks_power(c["detectable"], c.get("paper_effect")):
            c["verdict"] = NO_POWER
    return comparisons
