"""The rooms of `trainer/` and `evaluation/` (docs/architecture.md): small folders, each saying what it holds.

A newcomer finds a module by its concern: no folder of a package holds more than 12 modules, every room opens with a
docstring naming its concern, and `trainer/`'s top level keeps only the step's own modules (a new module goes into
the room of its concern).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_MODULES = 12
STEP_MODULES = {"__init__", "loop", "update", "components", "reference", "tasks"}
ROOMS = ["trainer/objective", "trainer/config", "trainer/diagnostics", "trainer/runtime", "trainer/sft",
         "trainer/algorithms", "evaluation/reports"]


def folders(package: str) -> list[Path]:
    return [d for d in [ROOT / package, *(ROOT / package).rglob("*")] if d.is_dir() and (d / "__init__.py").exists()]


# sandbox/ (25 flat modules, a service of its own with its own image) is not split yet
@pytest.mark.parametrize("package", ["envs", "agents", "evaluation", "trainer", "app"])
def test_no_folder_holds_more_than_twelve_modules(package):
    big = {str(d.relative_to(ROOT)): n for d in folders(package)
           if (n := len([p for p in d.glob("*.py") if p.name != "__init__.py"])) > MAX_MODULES}
    assert not big, f"folders over {MAX_MODULES} modules (split them by concern): {big}"


@pytest.mark.parametrize("room", ROOMS)
def test_each_room_says_what_it_holds(room):
    init = ROOT / room / "__init__.py"
    assert init.exists(), f"{room} is not a package"
    doc = ast.get_docstring(ast.parse(init.read_text()))
    assert doc and len(doc.split()) >= 5, f"{room}/__init__.py needs a docstring naming the room's concern"


def test_trainer_top_level_keeps_only_the_step():
    top = {p.stem for p in (ROOT / "trainer").glob("*.py")}
    assert top - STEP_MODULES == set(), (
        f"trainer/ top-level modules outside the step: {sorted(top - STEP_MODULES)}; move them into a room")
    rooms_here = {str(d.relative_to(ROOT)) for d in folders("trainer") if d != ROOT / "trainer"}
    rooms_here |= {str(d.relative_to(ROOT)) for d in folders("evaluation") if d != ROOT / "evaluation"}
    assert rooms_here == set(ROOMS), f"rooms on disk {sorted(rooms_here)} differ from docs/architecture.md's list"
