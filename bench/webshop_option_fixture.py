"""Regenerate tests/envs/fixtures/webshop_option_decisions.json: the option credit WebShop's own code gives for
every goal option of alprl's taxonomy against every option value of the same product type.

    /tmp/tf/bin/python bench/webshop_option_fixture.py --webshop DIR --commit SHA [--out PATH]

DIR holds WebShop's `web_agent_site/engine/goal.py` and `normalize.py` (a checkout of princeton-nlp/WebShop at SHA;
`git archive SHA web_agent_site/engine | tar -x -C DIR` is enough). Run it with an interpreter that has thefuzz
0.19.0 and no python-Levenshtein, as WebShop installs it (`python3 -m venv /tmp/tf && /tmp/tf/bin/pip install
thefuzz==0.19.0`). goal.py loads a spaCy model when imported, so `get_option_reward` is taken out of its source
with `ast` and run as written, with thefuzz's `fuzz` and WebShop's `normalize_color` beside it; nothing of WebShop
is copied into alprl. alprl's taxonomy is loaded by path from this checkout (the thefuzz environment has no
gymnasium).

Each row is [goal group, goal value, selected value, synthetic, human]: WebShop's num_option_matches (0 or 1) for
one selected value against the goal option given as a dict `{group: value}` (WebShop's synthetic goals, which
get_reward hands on as `.items()`) and as a list `[value]` (its human goals). The selected value's own group does
not enter WebShop's comparison, so it is not recorded. tests/envs/test_webshop_options.py checks alprl's
`reward.option_matches` against every row, and fails until this is rerun when the taxonomy gains values.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import itertools
import json
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the scorer fixture's checks, beside this script
from webshop_thefuzz_fixture import THEFUZZ_VERSION, thefuzz_module  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _module(path: Path):
    """A module loaded by path, registered in sys.modules (dataclasses look their module up there)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _fuzz():
    """thefuzz 0.19 on difflib, checked as the scorer fixture checks it (bench/webshop_thefuzz_fixture.py)."""
    return thefuzz_module("webshop_option_fixture")


def webshop_option_reward(webshop: Path):
    """WebShop's `get_option_reward`, compiled from its goal.py source with its own normalize_color."""
    engine = webshop / "web_agent_site" / "engine"
    normalize = _module(engine / "normalize.py")
    tree = ast.parse((engine / "goal.py").read_text(encoding="utf-8"))
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_option_reward")
    namespace = {"fuzz": _fuzz(), "normalize_color": normalize.normalize_color}
    exec(compile(ast.Module(body=[node], type_ignores=[]), str(engine / "goal.py"), "exec"), namespace)
    return namespace["get_option_reward"]


def decisions(get_option_reward) -> list[list[object]]:
    """[group, wanted, chosen, synthetic, human] for every goal option and selected value of each product type."""
    rows: dict[tuple[str, str, str], list[object]] = {}
    for t in _module(ROOT / "envs/webshop/taxonomy.py").TYPES:
        offered = [v for values in t.options.values() for v in values]
        for group, values in t.options.items():
            for wanted, chosen in itertools.product(values, offered):
                synthetic = get_option_reward([chosen], {group: wanted}.items())[1]
                human = get_option_reward([chosen], [wanted])[1]
                rows[(group, wanted, chosen)] = [group, wanted, chosen, synthetic, human]
    return [rows[k] for k in sorted(rows)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--webshop", required=True, help="a directory holding WebShop's web_agent_site/engine")
    ap.add_argument("--commit", required=True, help="the princeton-nlp/WebShop commit those files are from")
    ap.add_argument("--out", default=str(ROOT / "tests/envs/fixtures/webshop_option_decisions.json"))
    args = ap.parse_args(argv)
    table = decisions(webshop_option_reward(Path(args.webshop)))
    made_with = (f"princeton-nlp/WebShop {args.commit} web_agent_site/engine/goal.py get_option_reward and "
                 f"normalize.py normalize_color, thefuzz {THEFUZZ_VERSION} on difflib.SequenceMatcher "
                 f"(no python-Levenshtein), Python {platform.python_version()}; rows: [goal group, goal value, "
                 "selected value, matches as a dict goal (synthetic), matches as a list goal (human)]")
    body = ",\n".join(json.dumps(row, ensure_ascii=False) for row in table)
    Path(args.out).write_text(f'{{\n"made_with": {json.dumps(made_with)},\n"decisions": [\n{body}\n]\n}}\n',
                              encoding="utf-8")
    print(f"{len(table)} option decisions -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
