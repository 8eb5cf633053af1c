"""envs.datasets: every published layout written small to tmp_path, detected, normalized; every bad file one error."""

from __future__ import annotations

import json
import sys

import pytest

from envs.datasets import DatasetError, MathProblem, detect_layout, fingerprint, load_dataset
from envs.datasets.answers import normalize_answer
from envs.datasets.layouts import LAYOUT_NAMES
from envs.datasets.loader import DAPO_PREFIX, DAPO_SUFFIX


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def chat(text, system=None):
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]


# One row per layout, in the columns the published files use (layouts.py names the sources).
LAYOUT_ROWS = {
    "math500": {"problem": "What is $1+1$?", "solution": "So \\boxed{2}.", "answer": "2", "subject": "Algebra",
                "level": 1, "unique_id": "test/algebra/1.json"},
    "aime2024": {"ID": "2024-I-1", "Problem": "Find n.", "Solution": "...", "Answer": 33},
    "minerva": {"problem": "Compute x.", "solution": "Thus $x = \\boxed{\\frac{1}{2}}$.", "type": "Physics"},
    "olympiadbench": {"id": 7, "question": "Find all (a, b).", "final_answer": ["$3$", "$\\frac{1}{2}$"],
                      "is_multiple_answer": True},
    "verl": {"data_source": "openai/gsm8k", "prompt": chat("How many eggs?", system="Be brief."), "ability": "math",
             "reward_model": {"style": "rule", "ground_truth": "18"}, "extra_info": {"index": 4, "split": "test"}},
    "qa": {"question": "Find k.", "answer": "070"},
}


@pytest.mark.parametrize("name", list(LAYOUT_ROWS))
def test_each_layout_is_detected_from_its_columns(name):
    assert detect_layout(set(LAYOUT_ROWS[name])).name == name


def test_each_layout_loads_to_plain_question_and_normalized_answer(tmp_path):
    got = {name: load_dataset(write_jsonl(tmp_path / f"{name}.jsonl", [row]))[0] for name, row in LAYOUT_ROWS.items()}
    assert got["math500"] == MathProblem("test/algebra/1.json", "What is $1+1$?", "2", "math500")
    assert got["math500"].extra == {"solution": "So \\boxed{2}.", "subject": "Algebra", "level": 1}
    assert (got["aime2024"].id, got["aime2024"].answer, got["aime2024"].source) == ("2024-I-1", "33", "aime2024")
    assert (got["minerva"].id, got["minerva"].answer) == ("minerva:1", "\\frac{1}{2}")  # no id column: stem:row
    assert (got["olympiadbench"].id, got["olympiadbench"].answer) == ("7", "3, \\frac{1}{2}")
    verl = got["verl"]
    assert (verl.id, verl.question, verl.answer, verl.source) == ("4", "How many eggs?", "18", "openai/gsm8k")
    assert verl.extra == {"ability": "math", "extra_info": {"index": 4, "split": "test"}}  # no gold in extra
    assert got["qa"].answer == "70"


def test_a_list_answer_is_graded_as_a_set_of_answers(tmp_path):
    from envs.tir.grading import grade

    (p,) = load_dataset(write_jsonl(tmp_path / "ob.jsonl", [LAYOUT_ROWS["olympiadbench"]]))
    assert grade("\\frac{1}{2}, 3", p.answer) and grade("3, 0.5", p.answer)
    assert not grade("3", p.answer) and not grade("3, 4", p.answer)


def test_dapo_rows_lose_their_instruction_wrapper(tmp_path):
    row = {"data_source": "math_dapo", "prompt": chat(f"{DAPO_PREFIX}\n\nLet $x$ be 3. Find $x^2$.\n\n{DAPO_SUFFIX}"),
           "ability": "MATH", "reward_model": {"ground_truth": "9", "style": "rule-lighteval/MATH_v2"},
           "extra_info": {"index": "a1b2"}}
    path = write_jsonl(tmp_path / "dapo.jsonl", [row])
    for fmt in (None, "dapo"):
        (p,) = load_dataset(path, format=fmt)
        assert (p.id, p.question, p.answer, p.source) == ("a1b2", "Let $x$ be 3. Find $x^2$.", "9", "math_dapo")


def test_math500_wins_over_the_plain_problem_answer_layout():
    # {problem, answer} alone is "qa"; MATH500's extra unique_id makes the more specific layout win.
    assert detect_layout({"problem", "answer"}).name == "qa"
    assert detect_layout({"problem", "answer", "unique_id"}).name == "math500"


def test_unknown_and_ambiguous_layouts_name_the_columns_and_the_known_layouts(tmp_path):
    path = write_jsonl(tmp_path / "odd.jsonl", [{"text": "hi", "label": "1"}])
    with pytest.raises(DatasetError) as info:
        load_dataset(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message and "columns seen: label, text" in message
    assert all(name in message for name in ("math500", "aime2024", "olympiadbench", "verl", "qa"))
    both = write_jsonl(tmp_path / "both.jsonl", [{"question": "q", "answer": "1", "final_answer": ["1"]}])
    with pytest.raises(DatasetError, match=r"ambiguous layout \(olympiadbench, qa all fit\)"):
        load_dataset(both)


def test_format_names_a_layout_and_applies_its_checks(tmp_path):
    path = write_jsonl(tmp_path / "aime25.jsonl", [{"question": "Find n.", "answer": "007"}])
    assert load_dataset(path)[0].source == "qa"
    (p,) = load_dataset(path, format="aime2025")
    assert (p.answer, p.source) == ("7", "aime2025")
    bad = write_jsonl(tmp_path / "aime_bad.jsonl", [{"problem": "Find n.", "answer": "x+1"}])
    with pytest.raises(DatasetError, match=r"row 1: field 'answer': expected an integer answer, got 'x\+1'"):
        load_dataset(bad, format="AIME2025")
    with pytest.raises(DatasetError, match="unknown format 'gsm9k'; known layouts: " + ", ".join(LAYOUT_NAMES)):
        load_dataset(path, format="gsm9k")


def test_minerva_question_answer_form_by_name(tmp_path):
    path = write_jsonl(tmp_path / "minerva.jsonl", [{"question": "Speed?", "answer": "$3 \\times 10^8$"}])
    assert load_dataset(path, format="minerva")[0].answer == "3 \\times 10^8"


def test_field_mapping_overrides_columns(tmp_path):
    path = write_jsonl(tmp_path / "mine.jsonl", [{"my_q": "Q?", "my_a": "$5$", "key": "k1", "origin": "hand"}])
    (p,) = load_dataset(path, fields={"question": "my_q", "answer": "my_a", "id": "key", "source": "origin"})
    assert p == MathProblem("k1", "Q?", "5", "hand")
    # A partial override on a detected layout: MATH500 whose answer lives in another column.
    row = {**LAYOUT_ROWS["math500"], "answer": "", "gold": "\\boxed{2}"}
    (p,) = load_dataset(write_jsonl(tmp_path / "m.jsonl", [row]), fields={"answer": "gold"})
    assert (p.answer, p.source, p.extra["answer"]) == ("2", "math500", "")
    with pytest.raises(DatasetError, match="unknown field role"):
        load_dataset(path, fields={"question": "my_q", "answer": "my_a", "gold": "x"})


@pytest.mark.parametrize("value,expected", [
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("so \\boxed{\\sqrt{\\frac{a}{b}}} and done", "\\sqrt{\\frac{a}{b}}"),    # nested braces
    ("\\fbox{7}", "7"),
    ("\\boxed{1} then \\boxed{2}", "2"),                                        # the last box, as graded
    ("$\\pi$", "\\pi"), ("$$x^2$$", "x^2"), ("\\(3\\)", "3"), ("\\[ 4 \\]", "4"),
    ("$1$ or $2$", "$1$ or $2$"),                                               # two formulas: left as they are
    ("007", "7"), ("+5", "5"), ("-03", "-3"), ("0", "0"), (33, "33"), (33.0, "33"), (0.5, "0.5"),
    (["$3$", "\\boxed{4}", 5], "3, 4, 5"),
    ("  12  ", "12"),
])
def test_answer_normalization(value, expected):
    assert normalize_answer(value) == expected


def test_aime_answers_must_be_integers():
    assert normalize_answer("033", integer=True) == "33"
    for bad in ("3.5", 3.5, ["1"], "\\frac{1}{2}"):
        with pytest.raises(ValueError, match="expected an integer answer"):
            normalize_answer(bad, integer=True)


def one_line_error(path, **kw) -> str:
    with pytest.raises(DatasetError) as info:
        load_dataset(path, **kw)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(path)), message
    return message


def test_missing_and_empty_files(tmp_path):
    assert one_line_error(tmp_path / "nope.jsonl") == f"{tmp_path / 'nope.jsonl'}: no such file"
    (tmp_path / "empty.jsonl").write_text("")
    assert one_line_error(tmp_path / "empty.jsonl").endswith("empty file (no rows)")
    (tmp_path / "blank.jsonl").write_text("\n\n")
    assert one_line_error(tmp_path / "blank.jsonl").endswith("empty file (no rows)")
    (tmp_path / "empty.json").write_text("[]")
    assert one_line_error(tmp_path / "empty.json").endswith("empty file (no rows)")


def test_truncated_jsonl_line_names_its_line_number(tmp_path):
    path = tmp_path / "cut.jsonl"
    path.write_text('{"question": "a", "answer": "1"}\n\n{"question": "b", "answer": "2"}\n{"question": "c", "ans')
    assert ": row 4: invalid JSON line (Unterminated string" in one_line_error(path)  # line 2 is blank, counted


def test_missing_and_empty_answers_name_row_and_field(tmp_path):
    rows = [{"question": "a", "answer": "1"}, {"question": "b", "answer": "2"}, {"question": "c"}]
    assert one_line_error(write_jsonl(tmp_path / "m.jsonl", rows)).endswith(
        ": row 3: field 'answer': missing (qa layout)")
    rows[2] = {"question": "c", "answer": "  $ $ "}
    assert one_line_error(write_jsonl(tmp_path / "e.jsonl", rows)).endswith(": row 3: field 'answer': empty answer")
    verl = {**LAYOUT_ROWS["verl"], "reward_model": {"style": "rule"}}
    assert one_line_error(write_jsonl(tmp_path / "v.jsonl", [verl])).endswith(
        ": row 1: field 'reward_model.ground_truth': missing (verl layout)")
    no_box = {"problem": "p", "solution": "no box here"}
    assert "row 1: field 'solution': no complete \\boxed{...} answer" in one_line_error(
        write_jsonl(tmp_path / "s.jsonl", [no_box]))
    no_user = {**LAYOUT_ROWS["verl"], "prompt": [{"role": "system", "content": "x"}]}
    assert one_line_error(write_jsonl(tmp_path / "u.jsonl", [no_user])).endswith(
        ": row 1: field 'prompt': no user message in the chat prompt")


def test_json_files_as_lists_and_data_objects(tmp_path):
    rows = [LAYOUT_ROWS["aime2024"], {**LAYOUT_ROWS["aime2024"], "ID": "2024-I-2", "Answer": "045"}]
    (tmp_path / "list.json").write_text(json.dumps(rows))
    (tmp_path / "obj.json").write_text(json.dumps({"data": rows, "version": 1}))
    write_jsonl(tmp_path / "lines.json", rows)  # JSON Lines under a .json name
    for name in ("list.json", "obj.json", "lines.json"):
        assert [p.answer for p in load_dataset(tmp_path / name)] == ["33", "45"]
    (tmp_path / "bad.json").write_text(json.dumps([rows[0], {**rows[1], "Answer": None}]))
    assert one_line_error(tmp_path / "bad.json").endswith(": row 2: field 'Answer': expected an answer, got None")
    (tmp_path / "cut.json").write_text(json.dumps(rows)[:-5])
    assert ": invalid JSON (" in one_line_error(tmp_path / "cut.json")


def test_split_field_filters_rows(tmp_path):
    rows = [{**LAYOUT_ROWS["verl"], "extra_info": {"index": i, "split": s}} for i, s in enumerate("ttvt")]
    path = write_jsonl(tmp_path / "verl.jsonl", rows)
    assert [p.id for p in load_dataset(path, split_field="extra_info.split", split="t")] == ["0", "1", "3"]
    assert one_line_error(path, split_field="extra_info.split", split="x").endswith(
        "no rows with extra_info.split == 'x' (values seen: t, v)")
    flat = write_jsonl(tmp_path / "flat.jsonl", [{"question": "a", "answer": "1", "level": 1},
                                                 {"question": "b", "answer": "2"}])
    assert one_line_error(flat, split_field="level", split="1").endswith(
        ": row 2: field 'level': missing (the split field)")
    assert "split_field and split go together" in one_line_error(flat, split_field="level")


def test_a_tuple_of_split_values_keeps_rows_of_any_of_them(tmp_path):
    rows = [{"question": q, "answer": "1", "split": s} for q, s in zip("abcd", ["valid", "train", "validation", "x"], strict=True)]
    path = write_jsonl(tmp_path / "s.jsonl", rows)
    assert [p.question for p in load_dataset(path, split_field="split", split=("valid", "validation"))] == ["a", "c"]
    assert one_line_error(path, split_field="split", split=("dev",)).endswith(
        "no rows with split in ('dev',) (values seen: train, valid, validation, x)")


def test_fingerprint_is_stable_and_follows_the_bytes(tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [LAYOUT_ROWS["qa"]])
    first = fingerprint(path)
    assert first == fingerprint(str(path)) and len(first) == 16 and int(first, 16) >= 0
    copy = tmp_path / "b.jsonl"
    copy.write_bytes(path.read_bytes())
    assert fingerprint(copy) == first
    path.write_text(path.read_text() + "\n")
    assert fingerprint(path) != first
    with pytest.raises(DatasetError, match="no such file"):
        fingerprint(tmp_path / "gone.jsonl")


def test_parquet_in_verl_layout(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = [{**LAYOUT_ROWS["verl"], "extra_info": {"index": i, "split": "train"}} for i in range(3)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train.parquet")
    problems = load_dataset(tmp_path / "train.parquet")
    assert [(p.id, p.question, p.answer) for p in problems] == [(str(i), "How many eggs?", "18") for i in range(3)]
    rows[1]["reward_model"] = {"style": "rule", "ground_truth": ""}
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "bad.parquet")
    assert one_line_error(tmp_path / "bad.parquet").endswith(
        ": row 2: field 'reward_model.ground_truth': empty answer")
    (tmp_path / "junk.parquet").write_bytes(b"not a parquet file")
    assert ": unreadable parquet (" in one_line_error(tmp_path / "junk.parquet")


def test_parquet_without_pyarrow_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # makes `import pyarrow...` raise ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    (tmp_path / "d.parquet").write_bytes(b"PAR1")
    assert one_line_error(tmp_path / "d.parquet").endswith(": reading parquet needs pyarrow (pip install pyarrow)")
