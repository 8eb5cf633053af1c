"""avg@k / pass@k / maj@k: the estimator against brute-force enumeration, reductions on worked examples."""

import itertools
import math

import pytest

from evaluation.metrics import (
    avg_at_k,
    bootstrap_ci,
    by_task_type,
    flatten,
    maj_at_k,
    majority_answer,
    paired_difference,
    pass_at_k,
    sample_metrics,
)


def _brute_pass_at_k(n: int, c: int, k: int) -> float:
    """Fraction of all k-subsets of n samples (the first c correct) that contain a correct sample."""
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(i < c for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", range(1, 9))
def test_pass_at_k_equals_enumeration_over_all_k_subsets(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(_brute_pass_at_k(n, c, k), abs=1e-12), (n, c, k)


def test_pass_at_k_is_stable_where_binomials_overflow_floats():
    # C(1000, 500) ~ 2.7e299 and C(2000, 1000) overflows a float; the product form never builds them.
    # n=200, c=1, k=100: 1 - C(199,100)/C(200,100) = 1 - 100/200 = 0.5.
    assert pass_at_k(200, 1, 100) == pytest.approx(0.5, abs=1e-12)
    # n=2000, c=2, k=1000: 1 - (1000·999)/(2000·1999) = 1 - 999/3998.
    assert pass_at_k(2000, 2, 1000) == pytest.approx(1 - 999 / 3998, abs=1e-12)
    assert pass_at_k(2000, 0, 1000) == 0.0 and pass_at_k(2000, 1001, 1000) == 1.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)  # pass@1 is the plain success rate


@pytest.mark.parametrize("n,c,k", [(4, 5, 1), (4, -1, 1), (4, 2, 0), (4, 2, 5)])
def test_pass_at_k_rejects_impossible_counts(n, c, k):
    with pytest.raises(ValueError, match="pass_at_k"):
        pass_at_k(n, c, k)


def _records():
    """Two problems × 4 samples; problem 0 right 3/4, problem 1 right 1/4, with extracted answers."""
    rows = [(0, "add", [1, 0, 1, 1], ["5", "7", "5", "5"]),
            (1, "multiply", [0, 0, 0, 1], ["2", "2", None, "3"])]
    return [{"index": i, "task_type": t, "won": bool(w), "answer": a}
            for i, t, wins, answers in rows for w, a in zip(wins, answers, strict=True)]


def test_worked_example_avg_pass_maj():
    m = sample_metrics(_records(), ks=(1, 2, 4))
    assert m["problems"] == 2
    assert m["avg@4"] == pytest.approx((0.75 + 0.25) / 2)
    assert m["pass@1"] == pytest.approx(0.5)
    # problem 0: n-c = 1 < 2 → 1; problem 1: 1 - C(3,2)/C(4,2) = 1 - 3/6 = 0.5 → mean 0.75
    assert m["pass@2"] == pytest.approx(0.75)
    assert m["pass@4"] == pytest.approx(1.0)
    # maj@4: problem 0 votes 5,7,5,5 → "5" (correct); problem 1 votes 2,2,3 → "2" (wrong) → 0.5
    assert m["maj@4"] == pytest.approx(0.5)
    # maj@1 = the first sample's verdict: problem 0 right, problem 1 wrong
    assert m["maj@1"] == pytest.approx(0.5)
    # maj@2: problem 0 votes 5,7 (tie → first seen "5", correct); problem 1 votes 2,2 (wrong)
    assert m["maj@2"] == pytest.approx(0.5)


def test_majority_vote_ties_empty_answers_and_no_answers():
    assert majority_answer(["a", "b", "b", "a"]) == 0  # tie → the answer seen first
    assert majority_answer([None, "", "x"]) == 2  # empty answers do not vote
    assert maj_at_k([None, ""], [True, True]) == 0.0  # nobody answered → not solved
    assert maj_at_k(["4", "4", "9"], [False, False, True]) == 0.0
    with pytest.raises(ValueError, match="verdicts"):
        maj_at_k(["1"], [True, False])


def test_avg_at_k_counts_bools_and_partial_scores():
    assert avg_at_k([True, False, False, True]) == 0.5
    assert avg_at_k([0.25, 0.75]) == 0.5
    with pytest.raises(ValueError):
        avg_at_k([])


def test_per_task_type_reduction_and_logger_keys():
    per_type = by_task_type(_records(), lambda recs: sample_metrics(recs, ks=(2,)))
    assert set(per_type) == {"all", "add", "multiply"}
    assert per_type["add"]["pass@2"] == 1.0 and per_type["multiply"]["pass@2"] == pytest.approx(0.5)
    assert per_type["all"]["avg@4"] == pytest.approx(0.5)
    flat = flatten(per_type, prefix="eval")
    assert flat["eval/pass@2"] == pytest.approx(0.75) and flat["eval/maj@2/multiply"] == 0.0


def test_k_larger_than_the_samples_of_a_problem_is_an_error():
    with pytest.raises(ValueError, match="k=\\[8\\]"):
        sample_metrics(_records(), ks=(8,))
    with pytest.raises(KeyError, match="problem_key"):
        sample_metrics([{"won": True}])


def test_bootstrap_interval_brackets_the_mean_and_is_seeded():
    values = [0.0, 1.0] * 20
    lo, hi = bootstrap_ci(values, n_boot=500, seed=3)
    assert lo < 0.5 < hi and hi - lo < 0.5
    assert bootstrap_ci(values, n_boot=500, seed=3) == (lo, hi)
    assert bootstrap_ci([0.7] * 5) == (0.7, 0.7)
    m = sample_metrics(_records(), ks=(1,), ci=True)
    assert m["avg@4_ci_lo"] <= m["avg@4"] <= m["avg@4_ci_hi"]
    assert math.isfinite(m["avg@4_ci_lo"])


def test_paired_difference_over_shared_problems():
    # 40 problems, 2 samples each; `after` solves 4 more problems fully; problem 99 exists only in `after`
    before = [{"index": p, "won": p < 10} for p in range(40) for _ in range(2)]
    after = [{"index": p, "won": p < 14} for p in range(40) for _ in range(2)] + [{"index": 99, "won": True}]
    d = paired_difference(before, after)
    assert d["problems"] == 40 and d["before"] == 0.25 and d["after"] == 0.35
    assert d["diff"] == pytest.approx(0.1) and 0 < d["diff_ci_lo"] <= d["diff"] <= d["diff_ci_hi"]
    # the same success rate on other problems: no mean change, and the interval says so
    shuffled = [{"index": p, "won": 30 <= p} for p in range(40) for _ in range(2)]
    d = paired_difference(before, shuffled)
    assert d["diff"] == 0 and d["diff_ci_lo"] < 0 < d["diff_ci_hi"]
    with pytest.raises(ValueError, match="share no problem"):
        paired_difference(before, [{"index": 99, "won": True}])
