"""Five hostile dataset rows, written in any file format (shared by tests/envs and tests/trainer)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

HOSTILE = {  # gold answer → the words its ungradable reason must contain
    "\\frac{1}{": "unbalanced braces",
    "9" * 5000: "a 5000-digit integer",
    "^".join(["x"] * 200): "an exponent tower 199 high",
    "\\sqrt{" * 200 + "2" + "}" * 200: "nested 200 deep",
    "10^{10^{10^{10}}}": "an exponent tower 3 high",
}
FORMATS = ("jsonl", "json", "parquet")


def math500_rows(answers) -> list[dict]:
    """MATH500-layout rows (HuggingFaceH4/MATH-500's columns), one per gold answer."""
    return [{"problem": f"Question {i}?", "solution": "", "answer": a, "subject": "Algebra", "level": 1,
             "unique_id": f"test/{i}.json"} for i, a in enumerate(answers)]


def write_rows(path: Path, rows: list[dict]) -> Path:
    """`rows` in the format `path`'s suffix names (JSON Lines, a JSON list, parquet)."""
    if path.suffix == ".parquet":
        pa = pytest.importorskip("pyarrow")
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    elif path.suffix == ".json":
        path.write_text(json.dumps(rows))
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
