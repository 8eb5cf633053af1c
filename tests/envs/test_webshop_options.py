"""WebShop parity of the option credit: alprl's `option_matches` makes the decision WebShop's own code makes.

WebShop (web_agent_site/engine/goal.py `get_option_reward`) counts a goal option when some purchased value,
through `normalize_color`, scores thefuzz 0.19's `token_set_ratio > 85` against it; `get_reward` hands a dict goal
(its synthetic goals) on as `.items()`, so the goal side is the (group, value) pair, and a list goal (its human
goals) as bare values. So a near size is credited against a human goal and not against a synthetic one.

The fixture tests/envs/fixtures/webshop_option_decisions.json was written by bench/webshop_option_fixture.py: it
ran WebShop's own `get_option_reward` and `normalize_color` (princeton-nlp/WebShop 64fa2a5, taken from its source)
with the real thefuzz 0.19.0 on difflib (no python-Levenshtein) in a scratch environment, for every goal option of
alprl's taxonomy against every option value of the same product type, as a dict goal and as a list goal. Nothing
here imports thefuzz or WebShop.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from envs.webshop.catalog import get_catalog
from envs.webshop.goals import sample_goal
from envs.webshop.matching import normalize_color
from envs.webshop.reward import option_matches
from envs.webshop.taxonomy import TYPES

FIXTURE = Path(__file__).parent / "fixtures" / "webshop_option_decisions.json"


@pytest.fixture(scope="module")
def webshop() -> dict:
    data = json.loads(FIXTURE.read_text(encoding="utf-8"))
    return {(g, want, chosen): (synthetic, human) for g, want, chosen, synthetic, human in data["decisions"]}


def _credit(group: str, want: str, chosen: str) -> tuple[int, int]:
    """alprl's decision for one selected value against one goal option: (synthetic goal, human goal)."""
    return (option_matches({group: want}, {"any": chosen}, as_pairs=True),
            option_matches({group: want}, {"any": chosen}, as_pairs=False))


def test_fixture_was_made_by_webshops_code_with_thefuzz_0_19():
    made_with = json.loads(FIXTURE.read_text(encoding="utf-8"))["made_with"]
    assert made_with.startswith("princeton-nlp/WebShop 64fa2a5")
    assert "get_option_reward" in made_with and "thefuzz 0.19.0 on difflib.SequenceMatcher" in made_with


# (purchased, goal): token_set_ratio against the goal pair | bare goal, worked through thefuzz's three strings
NEAR_SIZES = (
    # "1 7 oz" vs "size 1 oz": common "1 oz"; "1 oz 7" -> 2·4/10 = 80 | bare: common == "1 oz" -> 100
    ("1.7 oz", "1 oz"),
    # "x large" vs "size xx large": common "large"; "large x" -> 2·5/12 = 83 | bare: "large x"/"large xx" 14/15 = 93
    ("x-large", "xx-large"),
    # common "fl oz"; "fl oz 12" -> 2·5/13 = 77 | bare: "fl oz 12"/"fl oz 16" -> 2·7/16 = 87.5, half to even 88
    ("12 fl oz", "16 fl oz"),
    # common "of pack"; "of pack 24" -> 2·7/17 = 82 | bare: "of pack"/"of pack 6" -> 2·7/16 = 87.5 -> 88
    ("pack of 24", "pack of 6"),
    # common "count"; "count 40" -> 2·5/13 = 77 | bare: "count 40"/"count 20" -> 2·7/16 = 87.5 -> 88
    ("40 count", "20 count"),
)


@pytest.mark.parametrize(("bought", "want"), NEAR_SIZES)
def test_near_sizes_get_no_credit_against_a_synthetic_goal(webshop, bought, want):
    """Credit against a human goal (a list), none against a synthetic one (a dict); the reward of such a purchase
    is test_webshop_thefuzz.py's test_near_size_purchases_score_by_goal_form."""
    assert _credit("size", want, bought) == (0, 1)
    assert webshop[("size", want, bought)] == (0, 1)


def test_credited_pairs():
    assert _credit("size", "1 oz", "1 oz") == (1, 1)  # ('size', '1 oz') vs '1 oz': common '1 oz' -> 100
    assert _credit("size", "x-large", "large") == (1, 1)  # 'large' holds a token subset of 'size x large': 100
    assert _credit("size", "1.7 oz", "1 oz") == (1, 1)  # '1 oz' within 'size 1 7 oz': 100
    assert _credit("color", "navy", "navy") == (1, 1)  # an exact colour word is normalized on the pair too
    assert _credit("scent", "lavender", "lavender") == (1, 1)


def test_webshops_colour_list_decides_scent_and_style_values():
    # WebShop's normalize_color takes the first of its words contained in the value: 'sandalwood' -> 'sand',
    # 'standard' -> 'tan'; on a goal pair it acts only on an element that is exactly one of its words
    assert normalize_color("sandalwood") == "sand" and normalize_color("standard") == "tan"
    assert normalize_color("unscented") == "unscented"
    # 'sand' vs 'scent sandalwood': no common token; 'sand' vs 'sandalwood scent' -> 2·4/20 = 40
    assert _credit("scent", "sandalwood", "sandalwood") == (0, 1)
    # 'tan' vs 'size standard' -> 2·3/16 = 37.5, rounded half to even: 38
    assert _credit("size", "standard", "standard") == (0, 1)
    assert _credit("style", "standard", "standard") == (0, 1)


def test_every_taxonomy_option_decision_is_webshops(webshop):
    wrong = [(key, expected, _credit(*key)) for key, expected in webshop.items() if _credit(*key) != expected]
    assert not wrong, wrong[:5]


def test_the_fixture_covers_the_taxonomy(webshop):
    """Every goal option against every value its product type offers: a new value needs the fixture rerun."""
    for t in TYPES:
        offered = [v for values in t.options.values() for v in values]
        for group, values in t.options.items():
            for want in values:
                for chosen in offered:
                    assert (group, want, chosen) in webshop, (t.key, group, want, chosen)


def test_synthetic_goals_never_ask_for_a_value_webshop_cannot_credit():
    """The generator keeps a goal only if buying its target with its options scores 1.0: a synthetic goal never
    names 'sandalwood', 'standard' or 'peppermint', a human goal may."""
    catalog = get_catalog(1000, 0)
    never = {"sandalwood", "standard", "peppermint"}
    synthetic = [sample_goal(random.Random(i), catalog, "synthetic") for i in range(300)]
    human = [sample_goal(random.Random(i), catalog, "human") for i in range(300)]
    assert not any(never & set(g.goal_options.values()) for g in synthetic)
    assert any(never & set(g.goal_options.values()) for g in human)
