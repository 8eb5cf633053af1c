"""The package layering and the absence of import circles, read from the source with `ast`.

Imports point one way, `sandbox ← envs ← agents ← evaluation ← trainer ← app` (docs/architecture.md): a module may import its own
package and the packages to its left. Every import counts — module level, inside functions, under
`TYPE_CHECKING` — since a deferred import is still a dependency and a type-only one still couples the modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ["sandbox", "envs", "agents", "evaluation", "trainer", "app"]


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, root: Path, packages: list[str]) -> set[str]:
    """The modules of `packages` that the file at `path` imports (relative imports resolved)."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # `from pkg import module`
    # importing a.b.c runs a and a.b first; a module's own ancestors are already loading when it runs (the
    # package re-export pattern), so those edges are not circles
    ancestors = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
    parents = {".".join(m.split(".")[:i]) for m in found for i in range(1, m.count(".") + 1)} - ancestors
    return {m for m in (found | parents) - ancestors if m.split(".")[0] in packages}


def import_graph(root: Path, packages: list[str]) -> dict[str, set[str]]:
    """module → the modules of `packages` it imports (only names that are modules of the tree)."""
    files = {module_name(p, root): p for pkg in packages for p in (root / pkg).rglob("*.py")}
    graph = {}
    for name, path in files.items():
        graph[name] = {m for m in imports_of(path, root, packages) if m in files and m != name}
    return graph


def layer_violations(graph: dict[str, set[str]], layers: list[str]) -> list[str]:
    rank = {pkg: i for i, pkg in enumerate(layers)}
    return sorted(f"{a} imports {b}" for a, deps in graph.items() for b in deps
                  if rank[b.split(".")[0]] > rank[a.split(".")[0]])


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_packages_import_only_to_their_left():
    assert layer_violations(import_graph(ROOT, LAYERS), LAYERS) == []


def test_no_import_circle_anywhere():
    assert cycles(import_graph(ROOT, LAYERS)) == []


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.mark.parametrize("files, circle", [
    ({"trainer/__init__.py": "", "trainer/a.py": "from trainer.b import x\n", "trainer/b.py": "import trainer.a\n"},
     ["trainer.a", "trainer.b"]),
    ({"trainer/__init__.py": "", "trainer/algos/__init__.py": "from trainer.algos import m\n",
      "trainer/algos/m.py": "def f():\n    from trainer.c import y\n", "trainer/c.py": "from .algos import m\n"},
     ["trainer.algos", "trainer.algos.m", "trainer.c"]),
    ({"trainer/__init__.py": "", "trainer/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
      "    from trainer.b import B\n", "trainer/b.py": "from trainer import a\n"}, ["trainer.a", "trainer.b"]),
])
def test_the_checks_catch_an_added_circle(tmp_path, files, circle):
    _write(tmp_path, files)
    assert circle in cycles(import_graph(tmp_path, ["trainer"]))


def test_the_checks_catch_an_upward_import(tmp_path):
    _write(tmp_path, {"envs/__init__.py": "", "envs/e.py": "from agents.rollout import run\n",
                      "agents/__init__.py": "", "agents/rollout.py": "run = 1\n"})
    graph = import_graph(tmp_path, ["envs", "agents"])
    assert layer_violations(graph, ["envs", "agents"]) == ["envs.e imports agents", "envs.e imports agents.rollout"]


def test_importing_the_config_loads_no_env():
    # the config's defaults come from leaf modules (envs/tir_defaults.py, envs/webshop_defaults.py); a fresh
    # interpreter, since this process has loaded the envs already
    import subprocess
    import sys

    code = ("import sys, trainer.config.train_config\n"
            "loaded = [m for m in sys.modules if m.startswith(('envs.webshop.', 'envs.household.', 'envs.tir.', "
            "'envs.bfcl.'))]\nassert not loaded, loaded\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
