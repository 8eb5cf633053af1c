"""WebShop parity: alprl's token_set_ratio gives thefuzz 0.19's scores (WebShop's pin, on difflib), pair by pair.

The fixture was written by bench/webshop_thefuzz_fixture.py with the real thefuzz 0.19.0 (no python-Levenshtein)
in a scratch environment; nothing here imports thefuzz.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path

import pytest

from envs.webshop.catalog import Product
from envs.webshop.goals import Goal
from envs.webshop.matching import difflib_ratio, normalize_color, normalize_goal_option, token_set_ratio
from envs.webshop.reward import get_reward
from envs.webshop.taxonomy import TYPES

FIXTURE = Path(__file__).parent / "fixtures" / "webshop_thefuzz_scores.json"


def _side(value):
    """The fixture writes a goal's (group, value) tuple as a two-element list."""
    return tuple(value) if isinstance(value, list) else value


@pytest.fixture(scope="module")
def scores() -> dict:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


def test_fixture_was_made_with_thefuzz_0_19_on_difflib(scores):
    assert scores["made_with"].startswith("thefuzz 0.19.0 on difflib.SequenceMatcher (no python-Levenshtein)")


def test_named_pairs_score_as_thefuzz_0_19(scores):
    wrong = [(row["a"], row["b"], row["score"], token_set_ratio(_side(row["a"]), _side(row["b"])))
             for row in scores["named"] if token_set_ratio(_side(row["a"]), _side(row["b"])) != row["score"]]
    assert not wrong, wrong[:5]


def test_every_taxonomy_pair_scores_as_thefuzz_0_19(scores):
    wrong = [(a, b, s, token_set_ratio(_side(a), _side(b)))
             for a, b, s in scores["taxonomy"] if token_set_ratio(_side(a), _side(b)) != s]
    assert not wrong, wrong[:5]


def test_the_fixture_covers_the_taxonomy(scores):
    """Every pair the reward can compare in alprl's shop is pinned: a new option value or attribute needs the
    fixture regenerated (bench/webshop_thefuzz_fixture.py)."""
    pinned = {(_side(a), _side(b)) for a, b, _ in scores["taxonomy"]}
    for t in TYPES:
        for group, values in t.options.items():
            for chosen, wanted in itertools.product(values, repeat=2):
                assert (normalize_color(chosen), normalize_color(wanted)) in pinned, (t.key, chosen, wanted)
                assert (normalize_color(chosen), normalize_goal_option(group, wanted)) in pinned, (t.key, wanted)
        for p_attr, g_attr in itertools.product(t.attributes, repeat=2):
            assert (p_attr, g_attr) in pinned, (t.key, p_attr, g_attr)


def test_scores_are_difflibs_not_an_edit_distance():
    # difflib's matching blocks can count fewer characters than the longest common subsequence rapidfuzz counts
    assert difflib_ratio("beige", "white") == 20  # rapidfuzz.fuzz.ratio: 40
    assert token_set_ratio("0555555", "05255555") == 80  # rapidfuzz-based: 93, a match
    assert token_set_ratio("size_large", "size large") == 50  # "_" is a word character to thefuzz 0.19
    assert difflib_ratio("", "") == 100 and difflib_ratio("", "a") == 0  # equality is checked first
    assert token_set_ratio(None, "large") == 0 and token_set_ratio("!!!", "!!!") == 0


def test_near_size_purchases_score_by_goal_form():
    """Purchases a comparison with WebShop's get_reward found differing: WebShop's score follows from thefuzz's
    scores above, per goal form."""
    cream = Product(asin="B0TEST0002", title="Acme Face Cream", query="face moisturizer cream", category="beauty",
                    product_category="Beauty › Skin Care › Face Moisturizers", price=20.0, price_text="$20.00",
                    options={"size": ("1 oz", "1.7 oz")}, attributes=("anti aging",), bullets=(), description="",
                    type_key="face_cream")
    goal = Goal(asin=cream.asin, category="beauty", query=cream.query, name=cream.title,
                product_category=cream.product_category, instruction_text="", attributes=("anti aging",),
                price_upper=30.0, goal_options={"size": "1 oz"}, target=0, expert_query="", options_as_pairs=True)
    # synthetic goal (WebShop's dict): ('size', '1 oz') against '1.7 oz' scores 80, not > 85: (1 + 0 + 1) / 3
    assert get_reward(cream, goal, 20.0, {"size": "1.7 oz"})[0] == pytest.approx(2 / 3)
    # human goal (WebShop's list of values): '1 oz' against '1.7 oz' scores 100: (1 + 1 + 1) / 3
    assert get_reward(cream, replace(goal, options_as_pairs=False), 20.0, {"size": "1.7 oz"})[0] == 1.0
    shirt = replace(cream, options={"size": ("x-large", "xx-large")})
    big = replace(goal, goal_options={"size": "xx-large"})
    assert get_reward(shirt, big, 20.0, {"size": "x-large"})[0] == pytest.approx(2 / 3)  # pair: 83
    assert get_reward(shirt, replace(big, options_as_pairs=False), 20.0, {"size": "x-large"})[0] == 1.0  # bare: 93
