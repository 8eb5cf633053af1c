"""WebShop's purchase reward (princeton-nlp/WebShop `web_agent_site/engine/goal.py:get_reward`), offline.

score = (n_attr + n_opt + r_price) / (|A| + |O| + 1) · r_type, clamped to [0, 1] (raw value kept in the info):
- r_type: 1.0; 0.5 if none of {query match, >= 2 shared `›` category levels, title_score > 0.2}; then 0.1 if
  title_score < 0.1; 0.0 if title_score == 0. title_score = |set(nouns(purchased title)) ∩ set(nouns(goal
  name))| / len(nouns(goal name)) (0.2 when the goal name has no nouns); the goal's name is its target's title.
- n_attr: goal attributes matched by a product attribute with token_set_ratio > 85, else by substring of the
  lower-cased title, bullet points or description.
- n_opt: loop over the *goal* options; each counts when some selected option value, through normalize_color,
  matches it with token_set_ratio > 85. Every group is fuzzy, size included (on bare values "x-large" credits
  "large" and "7.5" credits "7"), and the product text never stands in for an option.
- r_price = 1[price <= price_upper].

WebShop's synthetic goals hold their options in a dict, which get_reward hands on as `goal_options.items()`:
the goal side is a (group, value) pair, normalize_color acts only on a value that is exactly a colour word, and
the group name enters the fuzzy comparison. Its human goals hold a list of values, compared bare. alprl keeps
both: `goal.options_as_pairs` (set for instruction_style "synthetic") scores pairs, otherwise bare values. So
under pairs, goal "peppermint" (the selected value normalizes to "mint") is never matched, "x-large" no longer
credits goal "large" (83) while "large" still credits goal "x-large" (100); bare, both directions match.
See matching.normalize_goal_option.

Offline substitutes: spaCy's noun tags -> nouns.title_nouns, a fixed rule on Title Case titles; thefuzz ->
matching.token_set_ratio (thefuzz 0.19's scorer as WebShop runs it, on difflib; pinned score by score in
tests/envs/fixtures/webshop_thefuzz_scores.json).
"""

from __future__ import annotations

from typing import Any

from .matching import fuzzy_match, normalize_color, normalize_goal_option
from .nouns import title_nouns


def type_reward(purchased: Any, goal: Any) -> dict[str, Any]:
    """r_type with its parts (query_match, category_match, title_score)."""
    query_match = purchased.query == goal.query
    p_cat = {x.strip() for x in purchased.product_category.split("›")}
    g_cat = {x.strip() for x in goal.product_category.split("›")}
    category_match = len(p_cat & g_cat) >= 2
    goal_nouns = title_nouns(goal.name)
    if not goal_nouns:
        title_score = 0.2
    else:  # WebShop goal.py get_type_reward: unique shared nouns over the goal's noun list, repeats included
        title_score = len(set(title_nouns(purchased.title)) & set(goal_nouns)) / len(goal_nouns)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return {"r_type": r_type, "query_match": query_match, "category_match": category_match,
            "title_score": title_score}


def attribute_matches(purchased: Any, goal: Any) -> int:
    """n_attr: goal attributes found in the purchased product (fuzzy attribute, else substring of its text)."""
    texts = (purchased.title.lower(), " ".join(purchased.bullets).lower(), purchased.description.lower())
    n = 0
    for g_attr in goal.attributes:
        if any(fuzzy_match(p_attr, g_attr) for p_attr in purchased.attributes):
            n += 1
        elif any(g_attr in t for t in texts):
            n += 1
    return n


def option_matches(goal_options: dict[str, str], selected: dict[str, str], as_pairs: bool) -> int:
    """n_opt: goal options (as (group, value) pairs when `as_pairs`, else bare values) that some selected value
    matches fuzzily."""
    # WebShop goal.py get_option_reward: per goal option, any purchased value with token_set_ratio > 85
    if as_pairs:
        wanted = [normalize_goal_option(g, v) for g, v in goal_options.items()]
    else:
        wanted = [normalize_color(v) for v in goal_options.values()]
    chosen = [normalize_color(v) for v in selected.values()]
    return sum(any(fuzzy_match(c, w) for c in chosen) for w in wanted)


def get_reward(purchased: Any, goal: Any, price: float, options: dict[str, str]) -> tuple[float, dict[str, Any]]:
    """(score in [0, 1], parts) for buying `purchased` at `price` with `options` {group: value} selected.

    purchased: anything with title, query, product_category, attributes, bullets and description; goal:
    anything with query, product_category, name (the target's title), attributes (list), goal_options
    ({group: value}), options_as_pairs and price_upper."""
    r_type = type_reward(purchased, goal)
    r_price = float(price <= goal.price_upper)
    n_attr = attribute_matches(purchased, goal)
    n_opt = option_matches(goal.goal_options, options, goal.options_as_pairs)
    denom = len(goal.attributes) + len(goal.goal_options) + 1
    raw = (n_attr + n_opt + r_price) / denom * r_type["r_type"]
    parts = dict(r_type, n_attr=n_attr, n_opt=n_opt, r_price=r_price, raw_score=raw)
    return min(max(raw, 0.0), 1.0), parts
