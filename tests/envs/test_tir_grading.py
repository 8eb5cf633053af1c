"""Boxed-answer extraction and math-verify grading, on the main thread and from worker threads."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from envs.tir import grading
from envs.tir.grading import MAX_ANSWER_CHARS, extract_boxed, grade, has_boxed


@pytest.mark.parametrize("text,expected", [
    ("The answer is \\boxed{42}.", "42"),
    ("\\boxed{1} then \\boxed{2}", "2"),                              # the last one counts
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),                        # nested braces
    ("\\boxed{{a}{b{c}}}", "{a}{b{c}}"),
    ("so \\fbox{7}", "7"),                                           # \fbox accepted
    ("\\boxed {5}", "5"),                                            # space before the brace
    ("\\boxed{3} and an unfinished \\boxed{4", "3"),                 # last *complete* box
    ("\\boxed{}", ""),
    ("no box here", None),
    ("\\boxed", None),
    ("\\boxed{unbalanced", None),
    ("}}{{\\boxed{x}}}", "x"),
])
def test_extract_boxed(text, expected):
    assert extract_boxed(text) == expected


def test_has_boxed_counts_incomplete_boxes_like_simpletir():
    assert has_boxed("\\boxed{12") and has_boxed("\\fbox{") and not has_boxed("boxed{1}")


def test_extraction_is_linear_on_adversarial_text():
    # 50k unclosed boxes: a per-box brace scan would be quadratic (~10^9 steps); one pass is instant.
    text = "\\boxed{" * 50_000 + "\\boxed{9}"
    assert extract_boxed(text) == "9"


@pytest.mark.parametrize("pred,gold", [
    ("0.5", "1/2"), ("\\frac{1}{2}", "1/2"), ("1/2", "1/2"), ("\\dfrac{1}{2}", "1/2"),
    ("-45/7", "-45/7"), ("-\\frac{45}{7}", "-45/7"), ("1.5", "3/2"),
    ("4517277", "4517277"), ("4,517,277", "4517277"), ("4517277.0", "4517277"), ("x = 7", "7"),
    ("12345678901234", "12345678901234"),
])
def test_equivalent_forms_are_correct(pred, gold):
    assert grade(pred, gold)


@pytest.mark.parametrize("pred,gold", [
    ("15", "-15"), ("6.43", "45/7"), ("12345678901235", "12345678901234"), ("4517377", "4517277"),
    ("", "5"), ("   ", "5"), (None, "5"), ("5 mod 7", "5"), ("x" * (MAX_ANSWER_CHARS + 1), "5"),
])
def test_wrong_answers_are_wrong(pred, gold):
    assert not grade(pred, gold)


def test_math_verify_timeouts_need_the_main_thread_and_none_works_anywhere():
    # Why `grade` routes worker threads elsewhere: with timeouts, math-verify refuses to run off the main thread.
    with ThreadPoolExecutor(max_workers=1) as pool:
        assert pool.submit(grading.verify_answer, "0.5", "1/2", timeout_s=None).result()
        with pytest.raises(ValueError, match="threaded"):
            pool.submit(grading.verify_answer, "0.5", "1/2", timeout_s=5).result()


def test_grading_from_worker_threads_matches_the_main_thread():
    cases = [("0.5", "1/2"), ("6.43", "45/7"), ("-227/3", "-227/3"), ("7", "8")] * 5
    expected = [grade(p, g) for p, g in cases]
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(lambda c: grade(*c), cases))
    assert got == expected == [True, False, True, False] * 5


def test_adversarial_answer_cannot_hang_a_worker_thread():
    # 9^(9^(9^9)) makes sympy run forever; off the main thread the grading subprocess's own timeouts end it.
    with ThreadPoolExecutor(max_workers=1) as pool:
        assert pool.submit(grade, "9^{9^{9^9}}", "5", timeout_s=1).result() is False
        assert pool.submit(grade, "5", "5").result() is True  # and the worker still answers afterwards


def test_adversarial_answer_on_the_main_thread_times_out_to_wrong():
    assert grade("10^{10^{10}}", "5", timeout_s=1) is False


def test_a_killed_grading_process_is_replaced():
    with ThreadPoolExecutor(max_workers=1) as pool:
        assert pool.submit(grade, "2", "2").result()
        grading._WORKER._proc.kill()
        grading._WORKER._proc.wait()
        assert pool.submit(grade, "3", "3").result()


@pytest.mark.parametrize("pred,gold", [
    ("7", "7"), ("007", "7"), ("+5", "5"), ("-0", "0"), ("-12", "12"), ("4517277", "4517278"),
    ("123456789012345678901234567890", "123456789012345678901234567890"), (" 42 ", "42"),
])
def test_integer_fast_path_agrees_with_math_verify(pred, gold):
    from envs.tir.grading import PLAIN_INTEGER, verify_answer

    assert PLAIN_INTEGER.fullmatch(pred.strip()) and PLAIN_INTEGER.fullmatch(gold.strip())
    assert grade(pred, gold) == verify_answer(pred.strip(), gold)
