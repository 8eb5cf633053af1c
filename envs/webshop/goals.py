"""Shopping goals and instruction texts (reference/environments.md §3.2; WebShop `engine/goal.py`).

A goal = a target product, 1-3 of its attributes, one value for every option group of the target, and
`price_upper`: of the multiples of 10 in [10, 990] strictly above the price, keep the first four; if at least two
remain, sample two and keep the larger, else price_upper = 1e6 and no price text. The generator resamples a goal
(bounded retries) unless the expert's query `"{type query} {goal attributes}"` ranks the target in the top 50
and buying it with the goal options scores exactly 1.0 under the reward (reward.py), so a goal whose option
the fuzzy match cannot credit even for the target (in synthetic goals "peppermint", "sandalwood" and
"standard", which WebShop's colour list turns into "mint", "sand" and "tan") is never drawn.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .catalog import Catalog, Product
from .reward import get_reward

PRICE_RANGE = tuple(10.0 * i for i in range(1, 100))
NO_PRICE_LIMIT = 1e6
MAX_TRIES = 50
SEARCH_RETURN_N = 50
# alprl's human-like templates (lower-case, like WebShop's human instructions).
HUMAN_TEMPLATES = (
    "i am looking for {attrs} {query}{opts}{price}",
    "i need {attrs} {query}{opts}{price}",
    "i want to buy {attrs} {query}{opts}{price}",
    "can you find me {attrs} {query}{opts}{price}",
)


@dataclass(frozen=True, slots=True, eq=False)
class Goal:
    """A shopping goal (WebShop goal dict fields). name: the target's title; target: index of the target product
    in the catalog; expert_query: the query the expert searches; options_as_pairs: the reward scores the goal
    options as (group, value) pairs, as WebShop does for its synthetic goals (a dict) and not for its human
    goals (a list of values); see reward.py."""

    asin: str
    category: str
    query: str
    name: str
    product_category: str
    instruction_text: str
    attributes: tuple[str, ...]
    price_upper: float
    goal_options: dict[str, str]
    target: int
    expert_query: str
    options_as_pairs: bool


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def instruction(style: str, rng: random.Random, query: str, attrs: list[str], options: dict[str, str],
                price_upper: float) -> str:
    """The instruction text: "synthetic" (WebShop's `{text}{ with n: v, and ...}{, and price lower than ...}`,
    option names sorted) or "human" (alprl templates)."""
    price = f", and price lower than {price_upper:.2f} dollars" if price_upper < NO_PRICE_LIMIT else ""
    if style == "synthetic":
        opts = ", and ".join(f"{k}: {v}" for k, v in sorted(options.items()))
        return f"find me {_and(attrs)} {query}{' with ' + opts if opts else ''}{price}"
    opts = " in " + _and([f"{v} {k}" for k, v in sorted(options.items())]) if options else ""
    return rng.choice(HUMAN_TEMPLATES).format(attrs=_and(attrs), query=query, opts=opts, price=price)


def _price_upper(rng: random.Random, price: float) -> float:
    above = [p for p in PRICE_RANGE if p > price][:4]
    if len(above) >= 2:
        return max(rng.sample(above, 2))
    return NO_PRICE_LIMIT


def _draft(rng: random.Random, catalog: Catalog, idx: int, style: str) -> Goal:
    p: Product = catalog.products[idx]
    attrs = rng.sample(p.attributes, rng.randint(1, min(3, len(p.attributes))))
    options = {g: rng.choice(vals) for g, vals in sorted(p.options.items())}
    price_upper = _price_upper(rng, p.price)
    return Goal(
        asin=p.asin, category=p.category, query=p.query, name=p.title, product_category=p.product_category,
        instruction_text=instruction(style, rng, p.query, attrs, options, price_upper), attributes=tuple(attrs),
        price_upper=price_upper, goal_options=options, target=idx,
        expert_query=f"{p.query} {' '.join(attrs)}", options_as_pairs=style == "synthetic",
    )


def sample_goal(rng: random.Random, catalog: Catalog, style: str = "synthetic", category: str | None = None) -> Goal:
    """A goal the expert can reach with score 1.0; `category` restricts the target's category."""
    if style not in ("synthetic", "human"):
        raise ValueError(f"instruction_style={style!r}: use 'synthetic' or 'human'")
    if category is not None and category not in catalog.by_category:
        raise ValueError(f"task_type={category!r} is not a webshop category; use one of {sorted(catalog.by_category)}")
    pool = catalog.by_category[category] if category else range(len(catalog))
    for _ in range(MAX_TRIES):
        goal = _draft(rng, catalog, rng.choice(pool), style)
        if goal.target not in catalog.index.search(goal.expert_query, SEARCH_RETURN_N):
            continue
        p = catalog.products[goal.target]
        if get_reward(p, goal, p.price, goal.goal_options)[0] == 1.0:
            return goal
    raise RuntimeError(f"webshop goal generator found no reachable goal in {MAX_TRIES} tries")


def instruction_query(goal: Goal) -> str:
    """The instruction's words from its attributes to the product type, as written ("a, b and c {query}"): the
    search a reader of the instruction can copy (the same words as `expert_query`, in the instruction's order)."""
    return f"{_and(list(goal.attributes))} {goal.query}"
