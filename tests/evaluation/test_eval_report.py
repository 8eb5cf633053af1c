"""evaluation.reports.eval_report: summary, terminal table and HTML page from per-sample records (written here, by hand)."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from evaluation.reports.eval_report import (
    metric_rows,
    score_table,
    summarize_eval,
    ungradable_lines,
    write_eval_report,
)


def eval_records() -> dict[str, list[dict]]:
    """Two benchmarks, 4 samples per problem: 'a' has 2 problems (1 and 3 correct), 'b' one (none correct)."""
    wins = {"a": [[True, False, False, False], [True, True, True, False]], "b": [[False] * 4]}
    return {name: [{"index": i, "sample": j, "won": w, "extracted_answer": "1" if w else "2", "reward": float(w),
                    "response_tokens": 12, "turns": 2, "tool_calls": 1, "truncated": False}
                   for i, problem in enumerate(problems) for j, w in enumerate(problem)]
            for name, problems in wins.items()}


def test_summary_table_and_page(tmp_path):
    summary = summarize_eval(eval_records(), {"label": "step_30", "mode": "tir", "k": 4},
                             {"a": "/data/a.jsonl", "b": "tir test split"})
    a, b = summary["benchmarks"]["a"], summary["benchmarks"]["b"]
    assert a["avg"] == pytest.approx((1 / 4 + 3 / 4) / 2) and b["avg"] == 0.0
    # maj@4: a's first problem votes "2" (3 of 4, wrong), its second "1" (correct); b votes "2", wrong
    assert (a["maj"], b["maj"]) == (pytest.approx(0.5), 0.0)
    assert summary["average"]["avg"] == pytest.approx(0.25) and a["source"] == "/data/a.jsonl"
    rows = dict(metric_rows(summary))
    assert list(rows) == ["avg@4", "maj@4", "pass@1", "pass@2", "pass@4"]
    assert rows["pass@4"] == pytest.approx([1.0, 0.0, 0.5])  # a, b, Average
    console = Console(width=100, record=True)
    console.print(score_table(summary))
    text = console.export_text()
    assert "Average" in text and "avg@4" in text and "50.0" in text  # a's avg@4 in percent

    page = write_eval_report(tmp_path, summary)
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    body = page.read_text()
    assert body.count("src='data:image/png;base64,") == 2  # one pass@k curve per benchmark
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["passk_0_a.png", "passk_1_b.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in (tmp_path / "plots").iterdir())
    for metric in rows:
        assert f"<h2>{metric} (%)</h2>" in body
    assert "<th>Model</th><th>a</th><th>b</th><th>Average</th>" in body and "<td>step_30</td>" in body


def test_ungradable_rows_are_counted_and_named_in_summary_lines_and_page(tmp_path):
    rows = {"a": [{"file": "/data/a.jsonl", "row": 2, "index": 1, "reason": "unbalanced braces (1 '{' never closed)"}]}
    summary = summarize_eval(eval_records(), {"label": "x"}, {"a": "/data/a.jsonl", "b": "tir test split"}, rows)
    a, b = summary["benchmarks"]["a"], summary["benchmarks"]["b"]
    assert (a["ungradable"], a["ungradable_rows"], b["ungradable"], b["ungradable_rows"]) == (1, rows["a"], 0, [])
    assert ungradable_lines(summary) == ["a: 1 gold answer(s) graded as strings (math-verify cannot grade them): "
                                         "a.jsonl row 2 (index 1): unbalanced braces (1 '{' never closed)"]
    body = write_eval_report(tmp_path, summary).read_text()
    assert "Ungradable rows (graded as strings)" in body and "never closed" in body
    plain = write_eval_report(tmp_path / "plain", summarize_eval(eval_records(), {"label": "x"}, {}))
    assert "Ungradable rows" not in plain.read_text()  # no section when every gold is gradable
