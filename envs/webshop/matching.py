"""The string matchers of WebShop's reward: thefuzz's `token_set_ratio`, and `normalize_color`.

`token_set_ratio` is thefuzz's, rebuilt on rapidfuzz (which thefuzz itself wraps): thefuzz renders its arguments
with `str`, drops the characters 128-255, applies rapidfuzz's `default_process` (lower case, non-alphanumerics to
spaces, trimmed) and rounds the score to an int, and WebShop compares that int with `> 85`; rapidfuzz >= 3 does
neither the processing nor the rounding by itself. tests/envs/test_webshop_reward.py pins scores that thefuzz
0.22 gives.

normalize_color follows WebShop's `engine/normalize.py` rule (the first colour word contained in the string, else
the string unchanged) over alprl's own word list.
"""

from __future__ import annotations

from rapidfuzz import fuzz, utils

COLOR_WORDS = (
    "beige", "black", "blue", "blush", "bronze", "brown", "burgundy", "camel", "charcoal", "clear", "coral",
    "cream", "gold", "gray", "green", "grey", "ivory", "khaki", "lavender", "lilac", "maroon", "mint", "navy",
    "nude", "olive", "orange", "peach", "pink", "purple", "red", "rose", "silver", "teal", "turquoise", "violet",
    "white", "yellow",
)
FUZZ_THRESHOLD = 85  # WebShop counts a match when the (rounded) score is strictly above this
_LATIN1_UPPER_HALF = {i: None for i in range(128, 256)}


def _thefuzz_process(text: object) -> str:
    return utils.default_process(str(text).translate(_LATIN1_UPPER_HALF))


def token_set_ratio(a: object, b: object) -> int:
    """thefuzz.fuzz.token_set_ratio(a, b) with its defaults (force_ascii=True, full_process=True)."""
    return int(round(fuzz.token_set_ratio(_thefuzz_process(a), _thefuzz_process(b))))


def fuzzy_match(a: object, b: object) -> bool:
    """WebShop's match test: token_set_ratio(a, b) > 85."""
    return token_set_ratio(a, b) > FUZZ_THRESHOLD


def normalize_color(value: str) -> str:
    """The first COLOR_WORDS entry contained in `value`, else `value` unchanged."""
    for color in COLOR_WORDS:
        if color in value:
            return color
    return value


def normalize_goal_option(group: str, value: str) -> str | tuple[str, str]:
    """What WebShop's option reward compares a dict-shaped goal's option as: it passes `goal_options.items()`, so
    normalize_color's `in` test runs on the (group, value) pair and only fires for an element that *is* a colour
    word; any other pair stays a pair, and thefuzz then scores its `str()`, the group name included."""
    pair = (group, value)
    for color in COLOR_WORDS:
        if color in pair:
            return color
    return pair
