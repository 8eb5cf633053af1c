"""The nouns of a product title, as WebShop's type reward takes them from spaCy, by a fixed rule.

WebShop keeps the lower-cased text of every title token spaCy tags NOUN or PROPN (`goal.py:get_type_reward`).
alprl's titles are Title Case ("Brand Attribute Words Head", "Brand Head - Attr, Attr", "Brand Head with Attr"),
and on Title Case spaCy tags nearly every open-class word a proper noun: brands, attribute words ("Machine",
"Washable", "Free") and the head alike. The rule: split the title into runs of letters and digits (spaCy splits
"T-Shirt" into "T", "-", "Shirt" and commas off words), drop numbers and the closed-class words spaCy keeps
as prepositions, conjunctions, particles and determiners, and keep the rest, in order and with repeats (WebShop
divides by the length of the goal's list, not of its set). No lemmatization: "Pillow" and "Pillows" differ.

Approximated: spaCy's tagger is statistical and tags a few Title Case words by context (e.g. "Charging" or a
brand as VERB, "Foldable" as ADJ); the rule never does. tests/envs/fixtures/webshop_title_nouns.json holds
en_core_web_sm 3.8's nouns for the default catalog's titles and tests/envs/test_webshop_nouns.py measures the
agreement (WebShop itself loads en_core_web_lg, which no package registry reachable here ships).
"""

from __future__ import annotations

import re

# Words spaCy tags ADP, CCONJ, PART or DET in these titles even when capitalized ("with", "And", "For", "To").
CLOSED_CLASS = frozenset("a an and for in no of on or the to up with".split())
_WORD = re.compile(r"[A-Za-z0-9]+")


def title_nouns(title: str) -> list[str]:
    """The lower-cased noun tokens of `title` (see the module docstring), repeats kept."""
    words = (w.lower() for w in _WORD.findall(title))
    return [w for w in words if w not in CLOSED_CLASS and not w.isdigit()]  # spaCy tags "12" NUM
