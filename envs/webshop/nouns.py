"""The nouns of a product title, as WebShop's type reward takes them from spaCy: recorded for the default catalog's
titles, by a fixed rule for any other title.

WebShop keeps the lower-cased text of every title token spaCy tags NOUN or PROPN (`goal.py:get_type_reward`).
alprl's titles are Title Case ("Brand Attribute Words Head", "Brand Head - Attr, Attr", "Brand Head with Attr"),
and on Title Case spaCy tags nearly every open-class word a proper noun: brands, attribute words ("Machine",
"Washable", "Free") and the head alike. The rule: split the title into runs of letters and digits (spaCy splits
"T-Shirt" into "T", "-", "Shirt" and commas off words), drop numbers and the closed-class words spaCy keeps
as prepositions, conjunctions, particles and determiners, and keep the rest, in order and with repeats (WebShop
divides by the length of the goal's list, not of its set). No lemmatization: "Pillow" and "Pillows" differ.

spaCy's tagger is statistical and tags a few Title Case words by context (e.g. "Charging" or a brand as VERB,
"Fast" or "Foldable" as ADJ); the rule never does, so it gives spaCy's list for 834 of the default catalog's 997
titles. `title_nouns` therefore reads spaCy's own nouns where they are recorded: title_nouns.json beside this file
holds en_core_web_sm 3.8's nouns for every title of the default catalog (bench/webshop_noun_fixture.py writes it;
WebShop's goal.py loads the same model), and the rule covers titles outside it (another catalog seed or size).
tests/envs/test_webshop_nouns.py measures the rule's agreement; tests/envs/test_webshop_purchases.py checks whole
purchases against WebShop's reward.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

# Words spaCy tags ADP, CCONJ, PART or DET in these titles even when capitalized ("with", "And", "For", "To").
CLOSED_CLASS = frozenset("a an and for in no of on or the to up with".split())
_WORD = re.compile(r"[A-Za-z0-9]+")
RECORDED_NOUNS = Path(__file__).with_name("title_nouns.json")


@functools.cache
def recorded_nouns() -> dict[str, list[str]]:
    """spaCy's nouns of each title of the default catalog (title → lower-cased NOUN/PROPN tokens, repeats kept)."""
    return json.loads(RECORDED_NOUNS.read_text(encoding="utf-8"))["nouns"]


def rule_nouns(title: str) -> list[str]:
    """The rule's lower-cased noun tokens of `title` (see the module docstring), repeats kept."""
    words = (w.lower() for w in _WORD.findall(title))
    return [w for w in words if w not in CLOSED_CLASS and not w.isdigit()]  # spaCy tags "12" NUM


def title_nouns(title: str) -> list[str]:
    """The nouns WebShop's type reward keeps from `title`: spaCy's, recorded, or the rule's for an unrecorded title."""
    recorded = recorded_nouns().get(title)
    return list(recorded) if recorded is not None else rule_nouns(title)
