"""evaluation.scores: pass@k against hand-computed values and brute force over all k-subsets, its stability where
binomials overflow; avg@k; maj@k (ties, empty and equivalent answers); grouping; bootstrap intervals; paired
differences; the per-benchmark scores and the Average column on hand-made records."""

from __future__ import annotations

import itertools
import statistics

import pytest

from evaluation.scores import (
    average_scores,
    avg_at_k,
    benchmark_scores,
    bootstrap_ci,
    group_by_problem,
    k_values,
    majority_vote,
    paired_difference,
    pass_at_k,
    vote_key,
)


@pytest.mark.parametrize("n,c,k,expected", [
    (5, 2, 2, 0.7),              # 1 - C(3,2)/C(5,2) = 1 - 3/10
    (4, 1, 1, 0.25),             # 1 - C(3,1)/C(4,1) = 1 - 3/4
    (4, 1, 2, 0.5),              # 1 - C(3,2)/C(4,2) = 1 - 3/6
    (4, 1, 4, 1.0),              # C(3,4) = 0: every 4-subset holds the correct sample
    (4, 3, 2, 1.0),              # C(1,2) = 0
    (4, 0, 3, 0.0),              # 1 - C(4,3)/C(4,3)
    (32, 4, 8, 1 - 3108105 / 10518300),  # 1 - C(28,8)/C(32,8) = 0.70450...
])
def test_pass_at_k_hand_computed(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("n", range(1, 9))
def test_pass_at_k_is_the_share_of_k_subsets_with_a_correct_sample(n):
    for c in range(n + 1):
        samples = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(samples, k))
            assert pass_at_k(n, c, k) == pytest.approx(statistics.fmean(any(s) for s in subsets), abs=1e-12)


def test_pass_at_k_is_stable_where_binomials_overflow_floats():
    # C(2000, 1000) overflows a float; the product form never builds it.
    # n=200, c=1, k=100: 1 - C(199,100)/C(200,100) = 1 - 100/200 = 0.5.
    assert pass_at_k(200, 1, 100) == pytest.approx(0.5, abs=1e-12)
    # n=2000, c=2, k=1000: 1 - (1000·999)/(2000·1999) = 1 - 999/3998.
    assert pass_at_k(2000, 2, 1000) == pytest.approx(1 - 999 / 3998, abs=1e-12)
    assert pass_at_k(2000, 0, 1000) == 0.0 and pass_at_k(2000, 1001, 1000) == 1.0


def test_pass_at_1_is_the_mean_success():
    assert pass_at_k(7, 3, 1) == pytest.approx(3 / 7)
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)


@pytest.mark.parametrize("n,c,k", [(4, 5, 1), (4, -1, 1), (4, 1, 0), (4, 1, 5)])
def test_pass_at_k_rejects_impossible_counts(n, c, k):
    with pytest.raises(ValueError, match="pass_at_k needs"):
        pass_at_k(n, c, k)


def test_k_values_are_powers_of_two_and_n():
    assert k_values(1) == [1]
    assert k_values(4) == [1, 2, 4]
    assert k_values(6) == [1, 2, 4, 6]
    assert k_values(32) == [1, 2, 4, 8, 16, 32]


def test_avg_at_k_counts_bools_and_partial_scores():
    assert avg_at_k([True, False, False, True]) == 0.5
    assert avg_at_k([0.25, 0.75]) == 0.5
    with pytest.raises(ValueError):
        avg_at_k([])


def test_majority_vote_counts_normalized_answers_and_breaks_ties_by_first_sample():
    # "033", " 33" and "$33$" are one answer; the first of them (sample 1) was graded correct
    assert majority_vote(["5", "033", " 33", "$33$"], [False, True, True, True]) == ("33", True)
    # 2 votes each: the answer sampled first wins, whatever its correctness
    assert majority_vote(["3", "33", "33", "3"], [False, True, True, False]) == ("3", False)
    assert majority_vote(["33", "3", "3", "33"], [True, False, False, True]) == ("33", True)
    # empty answers (no box, or None) do not vote, even when they are the most common "answer"
    assert majority_vote(["", "", "7", ""], [False, False, False, False]) == ("7", False)
    assert majority_vote([None, "", "8"], [True, True, False]) == ("8", False)
    assert majority_vote(["", ""], [True, True]) == ("", False)  # nobody answered: the vote is wrong
    # written differently, the same value is two votes (no pairwise grading): "1/2" and "\frac{1}{2}" split
    assert majority_vote(["1/2", "\\frac{1}{2}", "0.7"], [True, True, False]) == ("1/2", True)
    assert vote_key("\\boxed{ 4 2 }") == "42"
    with pytest.raises(ValueError, match="verdicts"):
        majority_vote(["1"], [True, False])


def test_group_by_problem_keeps_first_appearance_and_orders_samples_on_request():
    records = [{"index": 1, "sample": 1}, {"index": 0, "sample": 0}, {"index": 1, "sample": 0}]
    groups = group_by_problem(records)
    assert list(groups) == [1, 0] and [r["sample"] for r in groups[1]] == [1, 0]  # record order
    assert [r["sample"] for r in group_by_problem(records, sample_key="sample")[1]] == [0, 1]
    assert list(group_by_problem([{"problem": "3:7"}], "problem")) == ["3:7"]
    with pytest.raises(KeyError, match="problem_key"):
        group_by_problem([{"won": True}])


def test_bootstrap_interval_brackets_the_mean_and_is_seeded():
    values = [0.0, 1.0] * 20
    lo, hi = bootstrap_ci(values, n_boot=500, seed=3)
    assert lo < 0.5 < hi and hi - lo < 0.5
    assert bootstrap_ci(values, n_boot=500, seed=3) == (lo, hi)
    assert bootstrap_ci([0.7] * 5) == (0.7, 0.7)
    with pytest.raises(ValueError, match="no values"):
        bootstrap_ci([])


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


def _records(problem_samples):
    """problem_samples: per problem, a list of (extracted answer, won)."""
    return [{"index": i, "sample": j, "won": won, "extracted_answer": answer, "reward": float(won),
             "response_tokens": 10 * (j + 1), "turns": 1, "tool_calls": 0, "truncated": answer == ""}
            for i, samples in enumerate(problem_samples) for j, (answer, won) in enumerate(samples)]


def test_benchmark_scores_by_hand():
    records = _records([
        [("7", True), ("8", False), ("8", False), ("", False)],   # c = 1; "8" wins the vote, wrong
        [("5", False), ("033", True), ("33", True), ("4", False)],  # c = 2; "33" wins, correct
    ])
    s = benchmark_scores(list(reversed(records)))  # order of records does not matter
    assert (s["problems"], s["samples"]) == (2, 4)
    assert s["avg"] == pytest.approx((1 / 4 + 2 / 4) / 2)  # 0.375
    assert s["maj"] == pytest.approx((0 + 1) / 2)
    # pass@2: problem 0: 1 - C(3,2)/C(4,2) = 1/2; problem 1: 1 - C(2,2)/C(4,2) = 5/6; mean 2/3
    assert s["pass"] == pytest.approx({"1": 0.375, "2": (0.5 + 5 / 6) / 2, "4": 1.0})
    assert s["response_tokens"] == pytest.approx(25.0)  # (10 + 20 + 30 + 40) / 4 for each problem
    assert s["answered"] == pytest.approx(7 / 8) and s["truncated"] == pytest.approx(1 / 8)


def test_majority_ties_follow_sample_order_not_record_order():
    # "1" (sample 0, correct) and "2" (sample 1, wrong) tie; records arrive with sample 1 first
    records = _records([[("1", True), ("2", False)]])
    assert benchmark_scores(list(reversed(records)))["maj"] == 1.0


def test_benchmark_scores_need_equal_sample_counts():
    records = _records([[("1", True), ("1", True)], [("2", False)]])
    with pytest.raises(ValueError, match="different sample counts"):
        benchmark_scores(records)


def test_average_column_is_the_unweighted_mean_over_benchmarks():
    a = benchmark_scores(_records([[("1", True), ("2", False)]]))                     # 1 problem: avg 0.5
    b = benchmark_scores(_records([[("1", False), ("1", False)]] * 3))                # 3 problems: avg 0
    avg = average_scores({"a": a, "b": b})
    assert avg["avg"] == pytest.approx(0.25)  # (0.5 + 0) / 2, not weighted by the 1 vs 3 problems
    assert avg["maj"] == pytest.approx(0.5)   # a's vote "1" (sampled first, correct) + b's wrong vote, / 2
    assert avg["pass"] == pytest.approx({"1": 0.25, "2": 0.5})


def test_envs_without_answers_have_no_majority_vote():
    household = [{"index": 0, "sample": j, "won": j == 0, "reward": float(j == 0), "response_tokens": 5, "turns": 3,
                  "tool_calls": 0} for j in range(2)]  # no extracted_answer: the env reports none
    s = benchmark_scores(household)
    assert s["maj"] is None and s["avg"] == 0.5 and s["pass"]["2"] == 1.0
    math = benchmark_scores(_records([[("1", True), ("1", True)]]))
    assert average_scores({"math": math, "household": s})["maj"] is None
