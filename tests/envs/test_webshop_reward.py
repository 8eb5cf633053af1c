"""WebShop reward on hand-built goal/product pairs (arithmetic in comments), its matchers, taxonomy, BM25."""

from __future__ import annotations

import itertools
import math
import string
from collections import Counter
from dataclasses import replace

import pytest
from rapidfuzz import fuzz

from envs.webshop.catalog import Product, get_catalog
from envs.webshop.goals import Goal
from envs.webshop.reward import fuzzy, get_reward, normalize_color, text_nouns, type_reward
from envs.webshop.search import BM25Index, tokenize
from envs.webshop.taxonomy import TYPES

CAT = "Electronics › Headphones › Over-Ear Headphones"
P = Product(
    asin="B0TEST0001", title="Acme Noise Cancelling Wireless Headphones", query="wireless headphones",
    category="electronics", product_category=CAT, price=45.0, price_text="$45.00",
    options={"color": ("black", "white"), "size": ("large", "x-large"), "style": ("travel", "studio")},
    attributes=("noise cancelling", "long battery life"), bullets=("Foldable design for travel.",),
    description="A thoughtful gift for friends.", type_nouns=("headphones",), type_key="headphones",
)
G = Goal(
    asin=P.asin, category="electronics", query="wireless headphones", name=P.title, product_category=CAT,
    instruction_text="", attributes=("noise cancelling", "long battery life"), price_upper=50.0,
    goal_options={"color": "black", "size": "large"}, type_nouns=("headphones",), target=0, expert_query="",
)


def score(purchased=P, goal=G, price=45.0, **options):
    return get_reward(purchased, goal, price, options)


def test_reward_arithmetic_on_hand_built_pairs():
    # (n_attr + n_opt + r_price) / (|A| + |O| + 1) * r_type, with |A| = 2, |O| = 2 -> denominator 5
    assert score(color="black", size="large")[0] == 1.0  # (2 + 2 + 1) / 5
    assert score(color="white", size="large")[0] == pytest.approx(0.8)  # (2 + 1 + 1) / 5: wrong color
    assert score(color="black", size="large", price=55.0)[0] == pytest.approx(0.8)  # (2 + 2 + 0) / 5
    assert score()[0] == pytest.approx(0.6)  # no option chosen: (2 + 0 + 1) / 5
    # size needs an exact match although the fuzzy score of "x-large" vs "large" is 100 (token subset)
    assert fuzzy("x-large", "large") == 100
    assert score(color="black", size="x-large")[0] == pytest.approx(0.8)  # (2 + 1 + 1) / 5
    # an unmatched option still counts when it is a substring of the product text ("travel" is in a bullet)
    goal = replace(G, goal_options={"color": "black", "style": "studio"})
    assert score(goal=goal, color="black", style="travel")[0] == 1.0  # (2 + 2 + 1) / 5


def test_attribute_matching_fuzzy_then_substring():
    goal = replace(G, attributes=("Noise-Cancelling", "foldable design"))  # fuzzy (processed), then a bullet
    assert score(goal=goal, color="black", size="large")[0] == 1.0  # (2 + 2 + 1) / 5
    goal = replace(G, attributes=("noise cancelling", "waterproof"))
    assert score(goal=goal, color="black", size="large")[0] == pytest.approx(0.8)  # (1 + 2 + 1) / 5


def test_type_reward_factors():
    speaker = replace(P, query="bluetooth speaker", type_nouns=("speaker",),
                      product_category="Electronics › Portable Audio › Bluetooth Speakers")
    # one shared category level, no shared noun: title_score 0 -> r_type 0 -> score 0
    assert type_reward(speaker, G)["r_type"] == 0.0 and score(speaker, G, color="black")[0] == 0.0
    assert type_reward(replace(speaker, type_nouns=("headphones", "case")), G)["r_type"] == 1.0  # title 1/1
    five = replace(G, type_nouns=("headphones", "earbuds", "set", "kit", "pack"))
    # title_score 1/5 = 0.2 is not > 0.2, no query or category match -> 0.5 (and 0.2 is not < 0.1)
    assert type_reward(replace(speaker, type_nouns=("headphones",)), five)["r_type"] == 0.5
    assert score(replace(speaker, type_nouns=("headphones",)), five, color="black", size="large")[0] == 0.5
    twelve = replace(G, type_nouns=tuple(f"n{c}" for c in "abcdefghijk") + ("headphones",))
    assert type_reward(replace(speaker, type_nouns=("headphones",)), twelve)["r_type"] == 0.1  # 1/12 < 0.1
    # same two category levels -> category match keeps 1.0 at title_score 0.2
    same_cat = replace(speaker, product_category=CAT, type_nouns=("headphones",))
    assert type_reward(same_cat, five)["r_type"] == 1.0
    nameless = replace(G, type_nouns=(), name="")  # no goal nouns -> title_score 0.2
    parts = type_reward(speaker, nameless)
    assert parts["title_score"] == 0.2 and parts["r_type"] == 0.5


def test_score_clamped_when_goal_omits_a_group():
    goal = replace(G, attributes=("noise cancelling",), goal_options={"color": "black"})
    value, parts = score(goal=goal, color="black", style="travel")
    # n_attr 1 + n_opt 2 (black; travel by substring) + r_price 1 over 1 + 1 + 1 -> 4/3, clamped to 1
    assert value == 1.0 and parts["raw_score"] == pytest.approx(4 / 3)


def test_normalize_color_fuzzy_and_nouns():
    assert normalize_color("navy blue") == "blue" and normalize_color("light grey") == "grey"
    assert normalize_color("unscented") == "unscented"
    goal = replace(G, goal_options={"color": "royal blue", "size": "large"})
    assert score(goal=goal, color="navy blue", size="large")[0] == 1.0  # both sides normalize to "blue"
    assert fuzzy("Noise-Cancelling!", "noise cancelling") == 100
    assert fuzz.token_set_ratio("Noise-Cancelling!", "noise cancelling") < 100  # rapidfuzz >= 3: no preprocessing
    assert text_nouns("i need a Long-Lasting lipstick for dry lips", frozenset({"long", "lasting"})) == [
        "lipstick", "dry", "lips"]


def test_taxonomy_options_are_distinguishable_by_the_reward():
    for t in TYPES:
        values = [(g, v) for g, vs in t.options.items() for v in vs]
        assert len({v for _, v in values}) == len(values), f"{t.key}: a value appears twice"
        for (g, v), (_, u) in itertools.permutations(values, 2):
            nv, nu = normalize_color(v), normalize_color(u)
            if g == "size":
                assert nv != nu, (t.key, v, u)
            else:
                assert fuzzy(nu, nv) <= 85, (t.key, v, u, fuzzy(nu, nv))


def test_catalog_text_is_clean_and_cached():
    cat = get_catalog(1000, 0)
    assert get_catalog(1000, 0) is cat and len(cat) == 1000
    printable = set(string.printable)
    for p in cat.products:
        assert len(p.asin) == 10 and p.asin.startswith("B0") and p.asin.isalnum() and p.asin.isupper()
        text = " ".join([p.title, *p.bullets, p.description]).lower()
        assert set(text) <= printable and set(p.price_text) <= printable
        assert " › " in p.product_category
        for values in p.options.values():
            assert len(values) >= 2 and not any(normalize_color(v) in text for v in values)
        assert p.price > 0 and (p.price_text == f"${p.price:.2f}" or " to " in p.price_text)
    assert [p.asin for p in cat.products] == sorted(p.asin for p in cat.products)


def _naive_bm25(docs, query, k1=0.9, b=0.4):
    n, avgdl = len(docs), sum(map(len, docs)) / len(docs)
    out = []
    for d in docs:
        tf, s = Counter(d), 0.0
        for term in tokenize(query):
            df = sum(term in x for x in docs)
            if tf[term]:
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                s += idf * tf[term] * (k1 + 1) / (tf[term] + k1 * (1 - b + b * len(d) / avgdl))
        out.append(s)
    return out


def test_bm25_matches_the_formula_and_breaks_ties_by_id():
    docs = [tokenize(t) for t in ["red apple pie", "green apple", "apple apple tart", "banana bread", "green apple"]]
    index = BM25Index(docs)
    for q in ["apple", "green apple", "apple apple", "kiwi", "Banana-Bread!"]:
        assert list(index.scores(q)) == pytest.approx(_naive_bm25(docs, q))
    assert index.search("green apple") == [1, 4, 2, 0]  # docs 1 and 4 tie: lower id first
    assert index.search("green apple", k=1) == [1]
    assert index.search("kiwi") == []
