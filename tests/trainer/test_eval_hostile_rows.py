"""`alprl eval` on benchmark files holding five hostile gold answers, in JSONL, JSON and parquet.

Before: the run ended at the second row (`int()` on 5,000 digits) with exit 2 and no row named. Now every row is
played, the five are graded as strings, and the terminal, summary.json and report.html name them (file, row,
index, reason). A structural problem is still refused before the model loads, in one line naming file, row and
field. The model is the tiny random one (transformers engine): what it writes does not matter here.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest

from app.cli import main
from tests.envs.hostile_rows import FORMATS, HOSTILE, math500_rows, write_rows

pytestmark = pytest.mark.smoke


def eval_argv(model: Path, benches: str, out: Path) -> list[str]:
    return ["eval", "--model", str(model), "--bench", benches, "--mode", "single", "--k", "1", "--max-tokens", "8",
            "--engine", "hf", "--batch", "6", "--out", str(out), "--no-progress"]


def test_a_benchmark_with_the_five_hostile_golds_evaluates_to_the_end_naming_them(tiny_model_dir, tmp_path, capsys):
    files = {fmt: write_rows(tmp_path / f"hostile.{fmt}", math500_rows(["7", *HOSTILE])) for fmt in FORMATS}
    out = tmp_path / "out"
    assert main(eval_argv(tiny_model_dir, ",".join(f"{fmt}={path}" for fmt, path in files.items()), out)) == 0
    stdout = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    page = (out / "report.html").read_text()
    assert "Ungradable rows (graded as strings)" in page
    for fmt, path in files.items():
        bench = summary["benchmarks"][fmt]
        assert bench["problems"] == 6 and bench["ungradable"] == 5  # every row played
        rows = bench["ungradable_rows"]
        assert [(r["file"], r["row"], r["index"]) for r in rows] == [(str(path), i + 2, i + 1) for i in range(5)]
        for row, words in zip(rows, HOSTILE.values(), strict=True):
            assert words in row["reason"] and html.escape(row["reason"]) in page
        (line,) = [x for x in stdout.splitlines() if x.startswith(f"{fmt}: 5 gold answer(s) graded as strings")]
        assert f"{path.name} row 2 (index 1): unbalanced braces" in line and "row 6 (index 5)" in line
    records = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    assert len(records) == 3 * 6


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_structural_problem_is_one_line_before_the_model_loads(tiny_model_dir, tmp_path, capsys, fmt):
    rows = math500_rows(["7", "8", "9"])
    rows[1]["answer"] = "  "
    path = write_rows(tmp_path / f"empty.{fmt}", rows)
    out = tmp_path / "out"
    assert main(eval_argv(tiny_model_dir, f"bad={path}", out)) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("alprl eval: error: --bench bad: ") and f"{path}: row 2: field 'answer': empty answer" in line
    assert not out.exists()
