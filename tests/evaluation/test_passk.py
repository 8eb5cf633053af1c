"""evaluation.passk: pass@k against hand-computed values and against brute force over all k-subsets; avg@k,
maj@k (ties, empty and equivalent answers) and the Average column on hand-made records."""

from __future__ import annotations

import itertools
import statistics

import pytest

from evaluation.passk import average_scores, benchmark_scores, k_values, majority_vote, pass_at_k, vote_key


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


@pytest.mark.parametrize("n", [1, 3, 6])
def test_pass_at_k_is_the_share_of_k_subsets_with_a_correct_sample(n):
    for c in range(n + 1):
        samples = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(samples, k))
            assert pass_at_k(n, c, k) == pytest.approx(statistics.fmean(any(s) for s in subsets), abs=1e-12)


def test_pass_at_1_is_the_mean_success():
    assert pass_at_k(7, 3, 1) == pytest.approx(3 / 7)


def test_pass_at_k_rejects_impossible_counts():
    for n, c, k in ((4, 5, 1), (4, 1, 5), (4, 1, 0), (4, -1, 1)):
        with pytest.raises(ValueError, match="pass_at_k needs"):
            pass_at_k(n, c, k)


def test_k_values_are_powers_of_two_and_n():
    assert k_values(1) == [1]
    assert k_values(4) == [1, 2, 4]
    assert k_values(6) == [1, 2, 4, 6]
    assert k_values(32) == [1, 2, 4, 8, 16, 32]


def test_majority_vote_counts_normalized_answers_and_breaks_ties_by_first_sample():
    # "033", " 33" and "$33$" are one answer; the first of them (sample 1) was graded correct
    assert majority_vote(["5", "033", " 33", "$33$"], [False, True, True, True]) == ("33", True)
    # 2 votes each: the answer sampled first wins, whatever its correctness
    assert majority_vote(["3", "33", "33", "3"], [False, True, True, False]) == ("3", False)
    assert majority_vote(["33", "3", "3", "33"], [True, False, False, True]) == ("33", True)
    # empty answers (no box) do not vote, even when they are the most common "answer"
    assert majority_vote(["", "", "7", ""], [False, False, False, False]) == ("7", False)
    assert majority_vote(["", ""], [False, False]) == ("", False)
    # written differently, the same value is two votes (no pairwise grading): "1/2" and "\frac{1}{2}" split
    assert majority_vote(["1/2", "\\frac{1}{2}", "0.7"], [True, True, False]) == ("1/2", True)
    assert vote_key("\\boxed{ 4 2 }") == "42"


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
