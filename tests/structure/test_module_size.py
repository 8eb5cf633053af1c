"""No Python file of the project over 500 lines (shared reference/style.md: modules ≤ 400 lines, over ~500 split by
concern). A file that grows past the cap is split where its concerns part, not trimmed of comments.

Every tracked or new (not ignored) `.py` file counts: library, commands, benches and tests alike.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 500


def python_files() -> list[Path]:
    """The repository's own .py files: tracked ones and new ones git does not ignore (never .venv or runs/)."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    return [ROOT / name for name in listed if (ROOT / name).is_file()]


def test_the_file_list_is_the_projects():
    names = {p.relative_to(ROOT).as_posix() for p in python_files()}
    assert "trainer/loop.py" in names and "tests/structure/test_module_size.py" in names
    assert not any(name.startswith((".venv/", "runs/")) for name in names)


def test_no_python_file_over_the_cap():
    over = {p.relative_to(ROOT).as_posix(): n for p in python_files()
            if (n := len(p.read_text(errors="replace").splitlines())) > MAX_LINES}
    assert not over, f"files over {MAX_LINES} lines (split each by concern): {over}"
