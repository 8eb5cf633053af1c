"""Regenerate tests/envs/fixtures/webshop_thefuzz_scores.json: thefuzz 0.19's own token_set_ratio of the pairs
WebShop's reward compares in alprl's shop, and of named pairs.

    /tmp/tf/bin/python bench/webshop_thefuzz_fixture.py [--out tests/envs/fixtures/webshop_thefuzz_scores.json]

Run it with an interpreter that has thefuzz 0.19.0 and no python-Levenshtein, as WebShop installs it
(`python3 -m venv /tmp/tf && /tmp/tf/bin/pip install thefuzz==0.19.0`); nothing else is needed, the project's
taxonomy is imported from this checkout. It refuses a thefuzz that scores with Levenshtein or another version.
`tests/envs/test_webshop_thefuzz.py` checks alprl's `envs.webshop.matching.token_set_ratio` against every score,
and fails until the fixture is regenerated when the taxonomy gains values.

Pairs: the named ones below (each with why it is there); then, per product type, every (selected value, goal
option) of a group in the two forms WebShop's option reward compares (the goal value bare, as in its human goals,
and as the (group, value) pair its synthetic goals' dict gives), colours normalized as the reward normalizes
them; and every (product attribute, goal attribute) of the type. A goal pair is written as a two-element list.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import platform
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _module(relative: str):
    """A stdlib-only module of this checkout, loaded by path: importing the `envs` package would need gymnasium,
    which the thefuzz environment does not have."""
    spec = importlib.util.spec_from_file_location(Path(relative).stem, ROOT / relative)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


matching = _module("envs/webshop/matching.py")
TYPES = _module("envs/webshop/taxonomy.py").TYPES
normalize_color, normalize_goal_option = matching.normalize_color, matching.normalize_goal_option

THEFUZZ_VERSION = "0.19.0"
NAMED: tuple[tuple[object, object, str], ...] = (
    ("x-large", "xx-large", "near size: a bought x-large against a human goal's bare xx-large"),
    ("x-large", ("size", "xx-large"), "near size: the same against a synthetic goal's (group, value) pair"),
    ("1.7 oz", "1 oz", "near size: a bought 1.7 oz against a human goal's bare 1 oz"),
    ("1.7 oz", ("size", "1 oz"), "near size: the same against a synthetic goal's (group, value) pair"),
    ("xx-large", "x-large", "near size, the other way round"),
    ("x-large", "large", "near sizes credit each other bare"),
    ("7.5", "7", "'7 5' holds every token of '7'"),
    ("set of 6", "set of 4", "87.5 rounds half to even: 88"),
    ("pack of 12", "pack of 24", "bare"),
    ("12 fl oz", "8 fl oz", "just below the threshold"),
    ("Noise-Cancelling!", "noise cancelling", "case and punctuation are processed away"),
    ("x-large", ("size", "large"), "the group name enters the comparison"),
    ("large", ("size", "x-large"), "and not symmetrically"),
    ("7.5", ("size", "7"), "pair form"),
    ("6", ("size", "6.5"), "pair form"),
    ("set of 6", ("size", "set of 4"), "pair form"),
    ("pack of 24", ("size", "pack of 12"), "pair form"),
    ("mint", ("flavor", "peppermint"), "a normalized colour never meets its pair"),
    ("xx-large", ("size", "x-large"), "pair form"),
    ("beige", "white", "difflib's matching blocks: 20, rapidfuzz's indel ratio 40"),
    ("cruelty free", "sulfate free", "difflib 58, rapidfuzz 67"),
    ("easy assembly", "swivel wheels", "difflib 15, rapidfuzz 46"),
    ("machine washable", "space saving", "difflib 21, rapidfuzz 50"),
    ("3929294", "39239294", "a model number one digit off: difflib 67, rapidfuzz 93 (> 85)"),
    ("0555555", "05255555", "difflib 80, rapidfuzz 93: the threshold falls between them"),
    ("size_large", "size large", "'_' is a word character for thefuzz 0.19 (rapidfuzz's processing: 100)"),
    ("café", "cafe", "characters 128-255 are dropped"),
    ("Crème Brûlée", "creme brulee", "characters 128-255 are dropped"),
    ("naïve—fit", "naive fit", "an em dash (above 255) is kept, then a non-word character"),
    ("", "large", "an empty side scores 0"),
    ("!!!", "!!!", "empty after processing: 0, though equal"),
    (None, "large", "None scores 0"),
    (7, "7", "a number is scored as its str"),
    (" ".join(f"opt{i}x" for i in range(45)), " ".join(f"opt{i}y" for i in range(45)),
     "over 200 characters: difflib's autojunk heuristic applies (39 with it, 85 without)"),
)


def thefuzz_module(script: str = "webshop_thefuzz_fixture"):
    """thefuzz's fuzz module, after checking it is 0.19.0 on difflib (what WebShop's environment runs)."""
    from importlib.metadata import version

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its "slow pure-python SequenceMatcher" warning is the point here
        from thefuzz import fuzz
    if version("thefuzz") != THEFUZZ_VERSION:
        raise SystemExit(f"{script}: thefuzz {version('thefuzz')} found, {THEFUZZ_VERSION} needed")
    if fuzz.SequenceMatcher.__module__ != "difflib":
        raise SystemExit(f"{script}: thefuzz scores with python-Levenshtein here; use an environment without it, "
                         "as WebShop's")
    return fuzz


def thefuzz_scorer():
    """thefuzz's token_set_ratio (see `thefuzz_module`)."""
    return thefuzz_module().token_set_ratio


def taxonomy_pairs() -> list[tuple[object, object]]:
    """(selected, goal) for every option value pair of a group, bare and as a pair; (attribute, attribute)."""
    pairs: dict[tuple[object, object], None] = {}
    for t in TYPES:
        for group, values in t.options.items():
            for chosen, wanted in itertools.product(values, repeat=2):
                pairs[(normalize_color(chosen), normalize_color(wanted))] = None
                pairs[(normalize_color(chosen), normalize_goal_option(group, wanted))] = None
        for p_attr, g_attr in itertools.product(t.attributes, repeat=2):
            pairs[(p_attr, g_attr)] = None
    return list(pairs)


def _json_side(value: object) -> object:
    return list(value) if isinstance(value, tuple) else value


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "tests/envs/fixtures/webshop_thefuzz_scores.json"))
    args = ap.parse_args(argv)
    score = thefuzz_scorer()
    named = [{"a": _json_side(a), "b": _json_side(b), "score": score(a, b), "why": why} for a, b, why in NAMED]
    table = [[_json_side(a), _json_side(b), score(a, b)] for a, b in taxonomy_pairs()]
    made_with = (f"thefuzz {THEFUZZ_VERSION} on difflib.SequenceMatcher (no python-Levenshtein), "
                 f"Python {platform.python_version()}; fuzz.token_set_ratio(a, b) with default arguments; "
                 "a two-element list stands for the (group, value) tuple WebShop passes")
    body = ",\n".join(json.dumps(row, ensure_ascii=False) for row in table)
    named_body = ",\n".join(json.dumps(row, ensure_ascii=False) for row in named)
    Path(args.out).write_text(f'{{\n"made_with": {json.dumps(made_with)},\n"named": [\n{named_body}\n],\n'
                              f'"taxonomy": [\n{body}\n]\n}}\n', encoding="utf-8")
    print(f"{len(named)} named and {len(table)} taxonomy pairs → {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
