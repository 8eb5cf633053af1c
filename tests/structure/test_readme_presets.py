"""README's preset table names every file of configs/algorithms/, and nothing else."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_preset_has_a_row_in_the_readme_table():
    text = (ROOT / "README.md").read_text()
    section = text.split("## Algorithms (presets)", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    named = {name for row in rows for name in re.findall(r"`([a-z_0-9]+)`", row.split("|")[1])}
    presets = {p.stem for p in (ROOT / "configs" / "algorithms").glob("*.yaml")}
    assert named == presets, f"missing from README: {sorted(presets - named)}; not presets: {sorted(named - presets)}"
