"""The string matchers of WebShop's reward: thefuzz's `token_set_ratio`, and `normalize_color`.

`token_set_ratio` scores as thefuzz 0.19 computes without python-Levenshtein, which is what WebShop runs (its
requirements.txt pins thefuzz==0.19.0 and lists no python-Levenshtein): on the standard library's
`difflib.SequenceMatcher`, not on an edit distance. difflib's
ratio counts the characters of its longest-matching-block decomposition, which can fall short of the longest common
subsequence that rapidfuzz's (and thefuzz >= 0.20's) ratio counts: "beige"/"white" is 20 here, 40 under rapidfuzz.
tests/envs/fixtures/webshop_thefuzz_scores.json pins the scores thefuzz 0.19 itself gives (written by
bench/webshop_thefuzz_fixture.py).

thefuzz 0.19's steps, as read from its source (thefuzz/fuzz.py `_token_set`, utils.py `full_process`):
1. each side is rendered with `str` (None scores 0), the characters 128-255 are dropped, every non-word character
   (`\\W`, Unicode; "_" is a word character) becomes a space, then lower case, then surrounding whitespace goes;
2. an empty side scores 0; otherwise the whitespace tokens of each side form a set, and three strings are built:
   the sorted common tokens, and that joined with each side's sorted remaining tokens;
3. the score is the largest `ratio` of the three pairs, where `ratio(a, b)` is 100 for equal strings, 0 if one is
   empty, else round(100 · SequenceMatcher(None, a, b).ratio()) with Python's `round` (half to even).
WebShop counts a match when that int is `> 85`.

normalize_color is WebShop's `engine/normalize.py` rule over WebShop's own word list (`COLOR_SET`, alphabetical):
the first word of the list contained in the string, else the string unchanged. The list decides option credit, not
only colours: "sandalwood" becomes "sand" and "standard" becomes "tan", so a synthetic goal's ('scent',
'sandalwood') pair is never matched, as "peppermint" ("mint") is not. tests/envs/test_webshop_options.py pins
every option decision of alprl's taxonomy against WebShop's own `get_option_reward`.
"""

from __future__ import annotations

import difflib
import re

# WebShop's web_agent_site/engine/normalize.py COLOR_SET (102 words, alphabetical, its order of precedence)
COLOR_WORDS = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure", "banana", "beige", "black", "blue", "blush",
    "bordeaux", "bronze", "brown", "burgundy", "camel", "camo", "caramel", "champagne", "charcoal", "cheetah",
    "chestnut", "chocolate", "christmas", "coffee", "cognac", "copper", "coral", "cranberry", "cream",
    "crystal", "dark", "denim", "eggplant", "elephant", "espresso", "fuchsia", "gold", "granite", "grape",
    "graphite", "grass", "gray", "green", "grey", "heather", "indigo", "ivory", "ivy", "khaki", "lavender",
    "lemon", "leopard", "light", "lilac", "lime", "magenta", "maroon", "mauve", "merlot", "midnight", "mint",
    "mocha", "multicolor", "mushroom", "mustard", "natural", "navy", "nude", "olive", "orange", "peach",
    "pewter", "pink", "plum", "purple", "rainbow", "red", "rose", "royal", "rust", "sand", "sapphire",
    "seashell", "silver", "skull", "slate", "steel", "stone", "stonewash", "sunflower", "tan", "taupe",
    "teal", "tiger", "turquoise", "violet", "walnut", "wheat", "white", "wine", "yellow",
)
FUZZ_THRESHOLD = 85  # WebShop counts a match when the (rounded) score is strictly above this
_LATIN1_UPPER_HALF = {i: None for i in range(128, 256)}  # thefuzz's force_ascii drops exactly these code points
_NON_WORD = re.compile(r"\W")  # str patterns match Unicode by default, as thefuzz's `(?ui)\W`


def thefuzz_process(text: object) -> str:
    """thefuzz 0.19's `full_process(str(text), force_ascii=True)`: the string its scorers compare."""
    return _NON_WORD.sub(" ", str(text).translate(_LATIN1_UPPER_HALF)).lower().strip()


def difflib_ratio(a: str, b: str) -> int:
    """thefuzz 0.19's `fuzz.ratio` without python-Levenshtein: 0-100, difflib's matching-block ratio, rounded."""
    if a == b:  # checked before emptiness, as its decorators do: ("", "") is 100
        return 100
    if not a or not b:
        return 0
    return int(round(100 * difflib.SequenceMatcher(None, a, b).ratio()))


def token_set_ratio(a: object, b: object) -> int:
    """thefuzz 0.19's `fuzz.token_set_ratio(a, b)` with its defaults (force_ascii=True, full_process=True)."""
    if a is None or b is None:
        return 0
    processed_a, processed_b = thefuzz_process(a), thefuzz_process(b)
    if not processed_a or not processed_b:
        return 0
    tokens_a, tokens_b = set(processed_a.split()), set(processed_b.split())
    common = " ".join(sorted(tokens_a & tokens_b))
    with_a = f"{common} {' '.join(sorted(tokens_a - tokens_b))}".strip()
    with_b = f"{common} {' '.join(sorted(tokens_b - tokens_a))}".strip()
    return max(difflib_ratio(common, with_a), difflib_ratio(common, with_b), difflib_ratio(with_a, with_b))


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
