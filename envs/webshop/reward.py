"""WebShop's purchase reward (princeton-nlp/WebShop `web_agent_site/engine/goal.py:get_reward`), offline.

score = (n_attr + n_opt + r_price) / (|A| + |O| + 1) · r_type, clamped to [0, 1] (raw value kept in the info):
- r_type: 1.0; 0.5 if none of {query match, >= 2 shared `›` category levels, title_score > 0.2}; then 0.1 if
  title_score < 0.1; 0.0 if title_score == 0. title_score = |nouns(purchased) ∩ nouns(goal)| / |nouns(goal)|
  (0.2 when the goal has no nouns).
- n_attr: goal attributes matched by a product attribute with token_set_ratio > 85, else by substring of the
  lower-cased title, bullet points or description.
- n_opt: loop over the *purchased* options (both sides through normalize_color); group "size" needs an exact match
  among the goal values, other groups token_set_ratio > 85; an unmatched value still counts when it is a substring
  of the title, bullets or description.
- r_price = 1[price <= price_upper].

Offline substitutes: spaCy noun tags -> the generator's `type_nouns` for catalog products (exact), and for free
text `text_nouns` (lower-case alphabetic tokens outside a stopword/attribute lexicon); thefuzz -> rapidfuzz with
`processor=default_process` (thefuzz preprocesses by default, rapidfuzz >= 3 does not). normalize_color: the first
word of COLOR_WORDS contained in the string, else the string unchanged (same rule as WebShop's normalize.py,
alprl's own word list).
"""

from __future__ import annotations

from typing import Any

from rapidfuzz import fuzz, utils

COLOR_WORDS = (
    "beige", "black", "blue", "blush", "bronze", "brown", "burgundy", "camel", "charcoal", "clear", "coral",
    "cream", "gold", "gray", "green", "grey", "ivory", "khaki", "lavender", "lilac", "maroon", "mint", "navy",
    "nude", "olive", "orange", "peach", "pink", "purple", "red", "rose", "silver", "teal", "turquoise", "violet",
    "white", "yellow",
)
EXACT_MATCH_OPTIONS = frozenset({"size"})
FUZZ_THRESHOLD = 85
_STOPWORDS = frozenset(
    "a an and are as at be by for from has i in is it its me my need of on or our so that the this to want "
    "with you your looking find buy can lower than price dollars pack set count size color new".split()
)


def fuzzy(a: str, b: str) -> float:
    """thefuzz.fuzz.token_set_ratio(a, b) equivalent (with its default preprocessing)."""
    return fuzz.token_set_ratio(a, b, processor=utils.default_process)


def normalize_color(value: str) -> str:
    """The first COLOR_WORDS entry contained in `value`, else `value` unchanged."""
    for color in COLOR_WORDS:
        if color in value:
            return color
    return value


def text_nouns(text: str, lexicon: frozenset[str] = frozenset()) -> list[str]:
    """Noun stand-in for free text: lower-case alphabetic tokens not in the stopword list or `lexicon`."""
    words = "".join(c if c.isalpha() else " " for c in text.lower()).split()
    return [w for w in words if w not in _STOPWORDS and w not in lexicon]


def nouns_of(item: Any) -> list[str]:
    """Nouns of a product's or goal's name: its `type_nouns` when it has them, else text_nouns(title)."""
    nouns = getattr(item, "type_nouns", None)
    if nouns:
        return list(nouns)
    title = getattr(item, "title", None) or getattr(item, "name", "")
    attrs = frozenset(w for a in getattr(item, "attributes", ()) for w in a.lower().split())
    return text_nouns(title, attrs)


def type_reward(purchased: Any, goal: Any) -> dict[str, Any]:
    """r_type with its parts (query_match, category_match, title_score)."""
    query_match = purchased.query == goal.query
    p_cat = {x.strip() for x in purchased.product_category.split("›")}
    g_cat = {x.strip() for x in goal.product_category.split("›")}
    category_match = len(p_cat & g_cat) >= 2
    goal_nouns = nouns_of(goal)
    if not goal_nouns:
        title_score = 0.2
    else:
        title_score = len(set(nouns_of(purchased)) & set(goal_nouns)) / len(goal_nouns)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return {"r_type": r_type, "query_match": query_match, "category_match": category_match,
            "title_score": title_score}


def _product_text(p: Any) -> tuple[str, str, str]:
    return p.title.lower(), " ".join(p.bullets).lower(), p.description.lower()


def attribute_matches(purchased: Any, goal: Any) -> int:
    """n_attr: goal attributes found in the purchased product (fuzzy attribute, else substring of its text)."""
    texts = _product_text(purchased)
    n = 0
    for g_attr in goal.attributes:
        if any(fuzzy(p_attr, g_attr) > FUZZ_THRESHOLD for p_attr in purchased.attributes):
            n += 1
        elif any(g_attr in t for t in texts):
            n += 1
    return n


def option_matches(purchased: Any, goal_values: list[str], purchased_options: dict[str, str]) -> int:
    """n_opt: purchased option values that match a goal value (size exactly, others fuzzily) or the text."""
    goal_norm = [normalize_color(v) for v in goal_values]
    texts = _product_text(purchased)
    n = 0
    for group, value in purchased_options.items():
        v = normalize_color(value)
        if group.lower() in EXACT_MATCH_OPTIONS:
            matched = v in goal_norm
        else:
            matched = any(fuzzy(g, v) > FUZZ_THRESHOLD for g in goal_norm)
        if matched or any(v in t for t in texts):
            n += 1
    return n


def get_reward(purchased: Any, goal: Any, price: float, options: dict[str, str]) -> tuple[float, dict[str, Any]]:
    """(score in [0, 1], parts) for buying `purchased` at `price` with `options` {group: value} selected.

    purchased: anything with title, query, product_category, attributes, bullets, description (and optionally
    type_nouns); goal: anything with query, product_category, name/title or type_nouns, attributes (list),
    goal_options ({group: value}) and price_upper."""
    r_type = type_reward(purchased, goal)
    r_price = float(price <= goal.price_upper)
    n_attr = attribute_matches(purchased, goal)
    n_opt = option_matches(purchased, list(goal.goal_options.values()), options)
    denom = len(goal.attributes) + len(goal.goal_options) + 1
    raw = (n_attr + n_opt + r_price) / denom * r_type["r_type"]
    parts = dict(r_type, n_attr=n_attr, n_opt=n_opt, r_price=r_price, raw_score=raw)
    return min(max(raw, 0.0), 1.0), parts
