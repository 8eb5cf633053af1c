"""The rooms of `trainer/` and `evaluation/` (docs/architecture.md) and of `sandbox/` (docs/sandbox.md): small
folders, each saying what it holds.

A newcomer finds a module by its concern: no folder of a package holds more than 12 modules, every room opens with a
docstring naming its concern, and `trainer/`'s top level keeps only the step's own modules (a new module goes into
the room of its concern). `sandbox/`'s top level keeps only what every room shares (the result type, the settings),
and its rooms import one way: a room imports only that top level and the rooms listed before it. `trainer/`'s rooms
and top-level modules import one way too (docs/architecture.md names the order): the graph of which imports which
has no circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.structure.test_import_direction import import_graph

ROOT = Path(__file__).resolve().parents[2]
MAX_MODULES = 12
STEP_MODULES = {"__init__", "loop", "update", "components", "reference", "tasks"}
ROOMS = ["trainer/objective", "trainer/config", "trainer/setup", "trainer/diagnostics", "trainer/runtime",
         "trainer/sft", "trainer/algorithms", "evaluation/reports", "app/experiments"]
# sandbox/'s rooms in import order (docs/sandbox.md); its top level holds only what they all share
SANDBOX_ROOMS = ["sandbox/isolation", "sandbox/execution", "sandbox/service", "sandbox/client", "sandbox/deploy"]
SANDBOX_SHARED = {"__init__", "types", "settings"}


def folders(package: str) -> list[Path]:
    return [d for d in [ROOT / package, *(ROOT / package).rglob("*")] if d.is_dir() and (d / "__init__.py").exists()]


@pytest.mark.parametrize("package", ["sandbox", "envs", "agents", "evaluation", "trainer", "app"])
def test_no_folder_holds_more_than_twelve_modules(package):
    big = {str(d.relative_to(ROOT)): n for d in folders(package)
           if (n := len([p for p in d.glob("*.py") if p.name != "__init__.py"])) > MAX_MODULES}
    assert not big, f"folders over {MAX_MODULES} modules (split them by concern): {big}"


@pytest.mark.parametrize("room", ROOMS + SANDBOX_ROOMS)
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
    rooms_here |= {str(d.relative_to(ROOT)) for d in folders("app") if d != ROOT / "app"}
    assert rooms_here == set(ROOMS), f"rooms on disk {sorted(rooms_here)} differ from docs/architecture.md's list"


def test_sandbox_top_level_keeps_only_what_the_rooms_share():
    top = {p.stem for p in (ROOT / "sandbox").glob("*.py")}
    assert top - SANDBOX_SHARED == set(), (
        f"sandbox/ top-level modules outside the shared ones: {sorted(top - SANDBOX_SHARED)}; move them into a room")
    rooms_here = {str(d.relative_to(ROOT)) for d in folders("sandbox") if d != ROOT / "sandbox"}
    assert rooms_here == set(SANDBOX_ROOMS), f"rooms on disk {sorted(rooms_here)} differ from docs/sandbox.md's list"


def room_of(module: str) -> str | None:
    """'sandbox.execution.pool' → 'sandbox/execution'; None for sandbox's shared top-level modules."""
    parts = module.split(".")
    return "/".join(parts[:2]) if len(parts) > 2 or f"sandbox/{parts[-1]}" in SANDBOX_ROOMS else None


def upward_imports(root: Path) -> list[str]:
    """Imports of a sandbox room (or of the shared top level) from a room listed after it; every import counts
    (module level or deferred), as in test_import_direction."""
    rank = {room: i for i, room in enumerate(SANDBOX_ROOMS)}

    def above(dep: str, module: str) -> bool:
        return room_of(dep) is not None and (room_of(module) is None or rank[room_of(dep)] > rank[room_of(module)])

    return sorted(f"{module} imports {dep}" for module, deps in import_graph(root, ["sandbox"]).items()
                  for dep in deps if above(dep, module))


def test_sandbox_rooms_import_only_the_rooms_before_them():
    upward = upward_imports(ROOT)
    assert not upward, f"sandbox rooms import only the rooms before them ({' ← '.join(SANDBOX_ROOMS)}): {upward}"


def test_the_rooms_check_catches_an_upward_import(tmp_path):
    files = {"sandbox/__init__.py": "", "sandbox/types.py": "from sandbox.client import x\n",
             "sandbox/isolation/__init__.py": "",
             "sandbox/isolation/linux.py": "def f():\n    import sandbox.execution.pool\n",
             "sandbox/execution/__init__.py": "", "sandbox/execution/pool.py": "from sandbox.isolation import linux\n",
             "sandbox/client/__init__.py": "x = 1\n"}
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert upward_imports(tmp_path) == ["sandbox.isolation.linux imports sandbox.execution",
                                        "sandbox.isolation.linux imports sandbox.execution.pool",
                                        "sandbox.types imports sandbox.client"]


def room_graph(root: Path) -> dict[str, set[str]]:
    """`trainer/`'s rooms ('trainer/setup') and top-level modules ('trainer/loop.py'), each with those it imports;
    every import counts (module level or deferred), as in test_import_direction."""
    def node(module: str) -> str | None:
        parts = module.split(".")
        if len(parts) < 2:
            return None  # the package itself
        return f"trainer/{parts[1]}" if (root / "trainer" / parts[1]).is_dir() else f"trainer/{parts[1]}.py"

    graph: dict[str, set[str]] = {}
    for module, deps in import_graph(root, ["trainer"]).items():
        if (here := node(module)) is not None:
            graph.setdefault(here, set()).update(there for dep in deps if (there := node(dep)) not in (None, here))
    return graph


def a_circle(graph: dict[str, set[str]]) -> list[str]:
    """One circle of `graph` as the path that closes it (['a', 'b', 'a']); [] when there is none."""
    on_path: list[str] = []
    done: set[str] = set()

    def visit(v: str) -> list[str]:
        on_path.append(v)
        for w in sorted(graph.get(v, ())):
            if w in on_path:
                return on_path[on_path.index(w):] + [w]
            if w not in done and (found := visit(w)):
                return found
        on_path.pop()
        done.add(v)
        return []

    for v in sorted(graph):
        if v not in done and (found := visit(v)):
            return found
    return []


def test_trainer_rooms_import_one_way():
    circle = a_circle(room_graph(ROOT))
    assert not circle, f"trainer/'s rooms import in a circle: {' → '.join(circle)} (move what the lower one needs down)"


def test_the_room_graph_check_catches_a_circle(tmp_path):
    files = {"trainer/__init__.py": "", "trainer/config/__init__.py": "",
             "trainer/config/a.py": "def f():\n    from trainer.setup import b\n",
             "trainer/setup/__init__.py": "", "trainer/setup/b.py": "from trainer.config import a\n",
             "trainer/loop.py": "import trainer.setup.b\n"}
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    graph = room_graph(tmp_path)
    assert graph == {"trainer/config": {"trainer/setup"}, "trainer/setup": {"trainer/config"},
                     "trainer/loop.py": {"trainer/setup"}}
    assert a_circle(graph) == ["trainer/config", "trainer/setup", "trainer/config"]
    (tmp_path / "trainer/config/a.py").write_text("x = 1\n")  # the deferred import gone: one way again
    assert a_circle(room_graph(tmp_path)) == []


TEST_ONLY_FOLDERS = {"experiments": "app/experiments' suites, run through the trainer",
                     "bench": "the benches' smoke tests (bench/)"}


def test_trainer_tests_mirror_the_rooms():
    # a trainer room's tests sit in tests/trainer/<room>/; the step's own (loop, update, tasks) at the top
    rooms = {d.name for d in (ROOT / "trainer").iterdir() if (d / "__init__.py").exists()}
    test_dirs = {d.name for d in (ROOT / "tests" / "trainer").iterdir()
                 if d.is_dir() and any(d.glob("test_*.py"))}
    assert rooms <= test_dirs, f"trainer rooms without a tests/trainer/<room>/ folder: {sorted(rooms - test_dirs)}"
    assert test_dirs - rooms <= set(TEST_ONLY_FOLDERS), (
        f"tests/trainer/ folders named after no trainer room: {sorted(test_dirs - rooms - set(TEST_ONLY_FOLDERS))}")
