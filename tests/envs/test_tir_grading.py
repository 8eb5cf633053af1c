"""Boxed-answer extraction and math-verify grading, on the main thread and from worker threads."""

from __future__ import annotations

import time
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


# Each attacks one way to make grading slow: deep nesting (parser recursion), a power tower (sympy evaluates
# 9^387420489 inside one C call, which no signal interrupts), unclosed braces, and the same on the gold side.
ADVERSARIAL = [
    ("(" * 2000 + "1" + ")" * 2000, "1"),
    ("{" * 2000 + "1" + "}" * 2000, "1"),
    ("\\sqrt{" * 400 + "2" + "}" * 400, "2"),
    ("9**9**9**9", "5"),
    ("9^{9^{9^9}}", "5"),
    ("10^{10^{10}}", "5"),
    ("\\frac{1}{" * 300, "1"),
    ("5", "9^{9^{9^9}}"),
    ("1", "{" * 2000 + "1" + "}" * 2000),
]


@pytest.mark.parametrize("pred,gold", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
def test_adversarial_answer_scores_zero_within_its_limit_from_a_worker_thread(pred, gold):
    limit = 1.0
    with ThreadPoolExecutor(max_workers=1) as pool:
        assert pool.submit(grade, "0.5", "1/2").result()  # a ready child, so start-up is not in the timing
        start = time.monotonic()
        assert pool.submit(grade, pred, gold, timeout_s=limit).result() is False
        elapsed = time.monotonic() - start
        # The bound: the child's own timer (limit), else the parent's kill at limit + KILL_GRACE_S; 1 s of slack
        # for a loaded test machine.
        assert elapsed < limit + grading.KILL_GRACE_S + 1.0, elapsed
        assert pool.submit(grade, "\\frac{1}{2}", "1/2").result() is True  # the pool still grades afterwards


def test_adversarial_answer_on_the_main_thread_times_out_to_wrong():
    start = time.monotonic()
    assert grade("10^{10^{10}}", "5", timeout_s=1) is False
    assert time.monotonic() - start < 1 + grading.KILL_GRACE_S + grading.STARTUP_TIMEOUT_S


@pytest.fixture
def fresh_pool(monkeypatch):
    """A grader pool of this test's own (earlier tests leave idle children in the shared one)."""
    pool = grading._GraderPool()
    monkeypatch.setattr(grading, "_POOL", pool)
    yield pool
    pool.close()


def test_a_child_that_misses_the_deadline_is_killed_and_replaced(fresh_pool, monkeypatch):
    # The backstop for C code no signal interrupts: a negative grace makes the parent stop waiting 0.7 s before
    # the child's own 1 s timer, so this slow answer (over 1 s untimed) reaches the kill path.
    assert grade("0.5", "1/2")
    (child,) = fresh_pool._idle
    monkeypatch.setattr(grading, "KILL_GRACE_S", -0.7)
    start = time.monotonic()
    assert fresh_pool.grade("9^{9^{9^9}}", "5", 1.0) is False
    assert time.monotonic() - start < 0.3 + 0.5 and child.proc.poll() is not None  # waited 0.3 s, then killed
    assert fresh_pool._idle == []
    monkeypatch.setattr(grading, "KILL_GRACE_S", 1.0)
    assert grade("0.25", "1/4")
    (replacement,) = fresh_pool._idle
    assert replacement is not child and replacement.proc.poll() is None


def test_concurrent_graders_answer_in_parallel(fresh_pool):
    # MAX_GRADERS ready children: slow answers from as many threads take one limit (~1 s) in all, not one each.
    n = grading.MAX_GRADERS
    fresh_pool._idle = [grading._Grader() for _ in range(n)]
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=n) as pool:
        got = list(pool.map(lambda _: grade("9^{9^{9^9}}", "5", timeout_s=1.0), range(n)))
    elapsed = time.monotonic() - start
    assert got == [False] * n and len(fresh_pool._idle) == n
    assert elapsed < 1.8 if n > 1 else elapsed < 1.0 + grading.KILL_GRACE_S + 1.0  # serial would take n seconds


def test_a_killed_grading_process_is_replaced(fresh_pool):
    with ThreadPoolExecutor(max_workers=1) as pool:
        assert pool.submit(grade, "0.5", "1/2").result()
        for child in fresh_pool._idle:
            child.proc.kill()
            child.proc.wait()
        assert pool.submit(grade, "0.75", "3/4").result()


@pytest.mark.parametrize("pred,gold", [
    ("7", "7"), ("007", "7"), ("+5", "5"), ("-0", "0"), ("-12", "12"), ("4517277", "4517278"),
    ("123456789012345678901234567890", "123456789012345678901234567890"), (" 42 ", "42"),
])
def test_integer_fast_path_agrees_with_math_verify(pred, gold):
    from envs.tir.grading import PLAIN_INTEGER, verify_answer

    assert PLAIN_INTEGER.fullmatch(pred.strip()) and PLAIN_INTEGER.fullmatch(gold.strip())
    assert grade(pred, gold) == verify_answer(pred.strip(), gold)


@pytest.mark.parametrize("pred", ["\x1f24392", "24392\x1c", "\x1e24392\x1d"])
def test_an_integer_wrapped_in_control_characters_is_graded_not_an_exception(pred):
    # str.strip() drops these separators while int() refuses them; a policy printed one inside its box
    assert pred.strip() == "24392"
    assert grade(pred, "24392") is True and grade(pred, "24393") is False


def test_grade_is_false_not_an_exception_when_no_child_can_start(fresh_pool, monkeypatch):
    def refuse():
        raise OSError("fork: resource temporarily unavailable")

    monkeypatch.setattr(grading, "_Grader", refuse)
    assert grade("0.5", "1/2") is False
    assert grade("7", "7") is True  # the integer fast path needs no child
