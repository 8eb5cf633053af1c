"""Hostile dataset rows: judged one by one, in every file format, and graded within bounds.

The five adversarial gold answers of the issue (an unclosed `\\frac{1}{`, a 5,000-digit integer, `x^x^…` 200 deep,
`\\sqrt{` nested 200 deep, `10^{10^{10^{10}}}`) load as ungradable rows graded as strings; structural problems
(missing field, wrong type, empty answer) are one error naming file, row and field; a model's hostile answer
(a 5,000-digit number) is graded and voted on without `int()` and without a grading child's timeout.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hostile_rows import FORMATS, HOSTILE, math500_rows, write_rows

from envs.datasets import DatasetError, load_dataset, ungradable_reason
from envs.datasets.answers import canonical_integer, normalize_text
from envs.tir import grading
from envs.tir.grading import grade
from envs.tir.problems import load_split
from envs.tir.single_turn import MathEnv
from evaluation.scores import benchmark_scores, vote_key


def one_line_error(path: Path) -> str:
    with pytest.raises(DatasetError) as info:
        load_dataset(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(path))
    return message


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_five_hostile_golds_load_as_ungradable_rows_naming_their_reason(tmp_path, fmt):
    path = write_rows(tmp_path / f"math500.{fmt}", math500_rows(["7", *HOSTILE]))
    problems = load_dataset(path)
    assert [p.row for p in problems] == [1, 2, 3, 4, 5, 6]
    assert problems[0].ungradable == "" and problems[0].answer == "7"
    for problem, (gold, words) in zip(problems[1:], HOSTILE.items(), strict=True):
        assert problem.answer == gold and words in problem.ungradable, problem.ungradable


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_a_5000_digit_json_number_is_kept_as_its_digits(tmp_path, suffix):
    # json's int() refuses more than 4,300 digits; the loader keeps the digits instead of ending the file
    row = '{"question": "q", "answer": ' + "9" * 5000 + "}"
    path = tmp_path / f"big{suffix}"
    path.write_text(f"[{row}]" if suffix == ".json" else row + "\n")
    (problem,) = load_dataset(path)
    assert problem.answer == "9" * 5000 and "5000-digit integer" in problem.ungradable


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("bad,expected", [
    ({"problem": "Q?", "solution": "", "subject": "A", "level": 1, "unique_id": "u"}, "field 'answer': missing"),
    ({"answer": {"value": 3}}, "field 'answer': expected a string, number or list, got dict"),
    ({"answer": " $ $ "}, "field 'answer': empty answer"),
], ids=["missing", "wrong type", "empty"])
def test_a_structural_problem_is_refused_in_one_line_naming_file_row_and_field(tmp_path, fmt, bad, expected):
    rows = math500_rows(["7", "8", "9"])
    rows[2] = bad if "problem" in bad else {**rows[2], **bad}
    if fmt == "parquet" and "value" in str(bad):  # parquet columns hold one type: the odd row goes in its own file
        rows = [rows[2]]
    if fmt == "parquet" and "problem" in bad:  # a column missing from one row is null there
        expected = "field 'answer': expected an answer, got None"
    path = write_rows(tmp_path / f"bad.{fmt}", rows)
    row = 1 if len(rows) == 1 else 3
    assert f": row {row}: {expected}" in one_line_error(path)


def test_real_answers_stay_gradable():
    for gold in ("\\frac{\\sqrt{3}}{2}", "2^{2^{n}}", "x^2+y^2", "\\left\\{ x \\right.", "\\{1, 2\\}", "[0, 1)",
                 "e^{i\\pi}", "3, \\frac{1}{2}", "9" * 1000, "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"):
        assert ungradable_reason(gold) == "", gold


def test_integers_are_canonical_without_int():
    for text in ("-007", "+0", "-0", "033", "0", "+12", "-120", "5"):
        assert canonical_integer(text) == str(int(text)), text
    assert normalize_text("000" + "9" * 5000) == "9" * 5000  # int() would raise past 4,300 digits


def test_an_ungradable_gold_is_graded_as_a_string_without_a_grading_child(monkeypatch):
    def no_child(*args):
        raise AssertionError("an ungradable gold must not reach a grading child")

    monkeypatch.setattr(grading._POOL, "grade", no_child)
    start = time.monotonic()
    for gold in HOSTILE:
        assert grade(gold, gold) is True
        assert grade(" ".join(gold), gold) is True  # whitespace does not count
        assert grade("7", gold) is False
    assert grade("$9" + "9" * 4999 + "$", "9" * 5000) is True  # normalized as golds are
    assert time.monotonic() - start < 1.0


def test_a_models_5000_digit_answer_is_bounded_everywhere():
    huge = "9" * 5000
    start = time.monotonic()
    assert grade(huge, "7") is False  # over MAX_ANSWER_CHARS: wrong without parsing
    assert time.monotonic() - start < 0.5
    env = MathEnv(split="test")
    env.reset(seed=0, options={"index": 0})
    _, reward, terminated, _, info = env.step(f"So \\boxed{{{huge}}}.")
    assert (reward, terminated, info["extracted_answer"]) == (0.0, True, huge)
    # maj@k votes on the normalized answer: no int() on 5,000 digits
    assert vote_key("0" + huge) == huge
    records = [{"index": 0, "sample": s, "won": False, "extracted_answer": huge, "reward": 0.0,
                "response_tokens": 9, "turns": 1, "tool_calls": 0, "truncated": False} for s in range(2)]
    assert benchmark_scores(records)["maj"] == 0.0


def test_a_models_tower_answer_is_bounded_from_a_worker_thread():
    limit = 1.0
    with ThreadPoolExecutor(max_workers=1) as pool:
        assert pool.submit(grade, "0.5", "1/2").result()  # a ready child: start-up is not in the timing
        start = time.monotonic()
        assert pool.submit(grade, "^".join(["9"] * 100), "5", timeout_s=limit).result() is False
        assert time.monotonic() - start < limit + grading.KILL_GRACE_S + 1.0


def test_grading_children_have_their_memory_capped():
    assert grade("0.5", "1/2")
    pids = [g.proc.pid for g in grading._POOL._idle]
    assert pids
    for pid in pids:
        limits = Path(f"/proc/{pid}/limits").read_text().splitlines()
        (line,) = [x for x in limits if x.startswith("Max address space")]
        assert line.split()[3] == str(grading.GRADER_MEMORY_BYTES), line


def test_a_split_lists_its_ungradable_rows_and_warns_once(tmp_path, caplog):
    path = write_rows(tmp_path / "math500.jsonl", math500_rows(["7", *HOSTILE, "8"]))
    with caplog.at_level(logging.WARNING, logger="envs.tir.problems"):
        served = load_split(str(path))
        assert load_split(str(path)) is served  # cached: one load, one warning
    assert [(r.index, r.row) for r in served.ungradable] == [(1, 2), (2, 3), (3, 4), (4, 5), (5, 6)]
    assert "unbalanced braces" in served.ungradable[0].reason
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "5 gold answer(s) math-verify cannot grade" in warning and "row 2: unbalanced braces" in warning
    assert len(served.tasks) == 7  # every row is played
