"""WebShop reward on hand-built goal/product pairs (arithmetic in comments), its matchers, taxonomy, BM25."""

from __future__ import annotations

import itertools
import math
import string
from collections import Counter
from dataclasses import replace

import pytest

from envs.webshop.catalog import Product, catalog_color, get_catalog
from envs.webshop.goals import Goal
from envs.webshop.matching import fuzzy_match, normalize_color, normalize_goal_option, token_set_ratio
from envs.webshop.reward import get_reward, option_matches, type_reward
from envs.webshop.search import BM25Index, tokenize
from envs.webshop.taxonomy import TYPES

CAT = "Electronics › Headphones › Over-Ear Headphones"
P = Product(
    asin="B0TEST0001", title="Acme Noise Cancelling Wireless Headphones", query="wireless headphones",
    category="electronics", product_category=CAT, price=45.0, price_text="$45.00",
    options={"color": ("black", "white"), "size": ("large", "x-large"), "style": ("travel", "studio")},
    attributes=("noise cancelling", "long battery life"), bullets=("Foldable design for travel.",),
    description="A thoughtful gift for friends.", type_key="headphones",
)
G = Goal(
    asin=P.asin, category="electronics", query="wireless headphones", name=P.title, product_category=CAT,
    instruction_text="", attributes=("noise cancelling", "long battery life"), price_upper=50.0,
    goal_options={"color": "black", "size": "large"}, target=0, expert_query="", options_as_pairs=True,
)
BARE = replace(G, options_as_pairs=False)  # a WebShop human goal: options are a list of values


def score(purchased=P, goal=G, price=45.0, **options):
    return get_reward(purchased, goal, price, options)


def test_reward_arithmetic_on_hand_built_pairs():
    # (n_attr + n_opt + r_price) / (|A| + |O| + 1) * r_type, with |A| = 2, |O| = 2 -> denominator 5
    assert score(color="black", size="large")[0] == 1.0  # (2 + 2 + 1) / 5
    assert score(color="white", size="large")[0] == pytest.approx(0.8)  # (2 + 1 + 1) / 5: wrong color
    assert score(color="black", size="large", price=55.0)[0] == pytest.approx(0.8)  # (2 + 2 + 0) / 5
    assert score()[0] == pytest.approx(0.6)  # no option chosen: (2 + 0 + 1) / 5


def test_token_set_ratio_is_thefuzz():
    # scores thefuzz 0.19 (WebShop's pin, on difflib) gives (fuzz.token_set_ratio, default arguments); the full
    # table is tests/envs/fixtures/webshop_thefuzz_scores.json (tests/envs/test_webshop_thefuzz.py)
    thefuzz_scores = {
        ("x-large", "large"): 100, ("7.5", "7"): 100, ("set of 6", "set of 4"): 88, ("pack of 12", "pack of 24"): 90,
        ("12 fl oz", "8 fl oz"): 83, ("Noise-Cancelling!", "noise cancelling"): 100,
        ("x-large", ("size", "large")): 83, ("large", ("size", "x-large")): 100, ("7.5", ("size", "7")): 50,
        ("6", ("size", "6.5")): 100, ("set of 6", ("size", "set of 4")): 86, ("pack of 24", ("size", "pack of 12")): 82,
        ("mint", ("flavor", "peppermint")): 38, ("xx-large", ("size", "x-large")): 77,
        ("café", "cafe"): 86, ("Crème Brûlée", "creme brulee"): 86, ("naïve—fit", "naive fit"): 94,  # 128-255 dropped
    }
    for (a, b), expected in thefuzz_scores.items():
        assert token_set_ratio(a, b) == expected, (a, b)
    assert fuzzy_match("set of 6", ("size", "set of 4")) and not fuzzy_match("x-large", ("size", "large"))


def test_bare_goal_options_match_fuzzily_in_every_group_size_included():
    # WebShop human goals: the goal's option values, compared with the selected values as they are
    assert score(goal=BARE, color="black", size="x-large")[0] == 1.0  # 'x-large' vs 'large': 100 > 85
    assert option_matches({"size": "7"}, {"size": "7.5"}, as_pairs=False) == 1  # '7 5' holds every token of '7'
    assert option_matches({"size": "set of 4"}, {"size": "set of 6"}, as_pairs=False) == 1  # 88 > 85
    assert option_matches({"size": "8 fl oz"}, {"size": "12 fl oz"}, as_pairs=False) == 0  # 83
    assert option_matches({"color": "royal blue"}, {"color": "navy blue"}, as_pairs=False) == 1  # both 'blue'
    # a value from another group credits too: WebShop compares each goal value with every selected value
    assert option_matches({"style": "large"}, {"size": "large"}, as_pairs=False) == 1


def test_pair_goal_options_bring_the_group_name_into_the_comparison():
    # WebShop synthetic goals: dict options, scored through .items(): ('size', 'large') is compared as a pair
    assert normalize_color("navy blue") == "blue" and normalize_color("unscented") == "unscented"
    assert normalize_goal_option("size", "large") == ("size", "large")
    assert normalize_goal_option("color", "black") == "black"  # `in` on the pair: only an exact colour word
    assert normalize_goal_option("color", "navy blue") == ("color", "navy blue")
    assert score(color="black", size="x-large")[0] == pytest.approx(0.8)  # 83: not credited
    assert option_matches({"size": "x-large"}, {"size": "large"}, as_pairs=True) == 1  # 100: the other way round
    assert option_matches({"size": "7"}, {"size": "7.5"}, as_pairs=True) == 0  # 50
    assert option_matches({"size": "6.5"}, {"size": "6"}, as_pairs=True) == 1  # 100
    assert option_matches({"size": "set of 4"}, {"size": "set of 6"}, as_pairs=True) == 1  # 86
    assert option_matches({"size": "pack of 12"}, {"size": "pack of 24"}, as_pairs=True) == 0  # 82 (bare: 90)
    # the selected 'peppermint' normalizes to 'mint', the goal pair does not: never matched, even by itself
    assert option_matches({"flavor": "peppermint"}, {"flavor": "peppermint"}, as_pairs=True) == 0
    assert option_matches({"flavor": "peppermint"}, {"flavor": "peppermint"}, as_pairs=False) == 1
    assert option_matches({"color": "navy blue"}, {"color": "light blue"}, as_pairs=True) == 1  # 'blue' in the pair


def test_options_have_no_text_fallback():
    # 'travel' is in a bullet point; WebShop's earlier reward credited it, the fuzzy-only one does not
    goal = replace(G, goal_options={"color": "black", "style": "studio"})
    assert score(goal=goal, color="black", style="travel")[0] == pytest.approx(0.8)  # (2 + 1 + 1) / 5
    assert score(goal=replace(goal, options_as_pairs=False), color="black", style="travel")[0] == pytest.approx(0.8)
    # options selected beyond the goal's groups earn nothing: the loop runs over the goal's options
    goal = replace(G, attributes=("noise cancelling",), goal_options={"color": "black"})
    value, parts = score(goal=goal, color="black", style="travel")
    assert value == 1.0 and parts["raw_score"] == 1.0 and parts["n_opt"] == 1  # (1 + 1 + 1) / 3


def test_attribute_matching_fuzzy_then_substring():
    goal = replace(G, attributes=("Noise-Cancelling", "foldable design"))  # fuzzy (processed), then a bullet
    assert score(goal=goal, color="black", size="large")[0] == 1.0  # (2 + 2 + 1) / 5
    goal = replace(G, attributes=("noise cancelling", "waterproof"))
    assert score(goal=goal, color="black", size="large")[0] == pytest.approx(0.8)  # (1 + 2 + 1) / 5


def test_type_reward_factors():
    speaker = replace(P, title="Zorb Portable Speaker", query="bluetooth speaker",
                      product_category="Electronics › Portable Audio › Bluetooth Speakers")
    # goal nouns [acme, noise, cancelling, wireless, headphones]; one shared category level
    assert type_reward(speaker, G)["r_type"] == 0.0 and score(speaker, G, color="black")[0] == 0.0  # no noun shared
    assert type_reward(replace(speaker, title="Acme Noise Cancelling Wireless Case"), G)["r_type"] == 1.0  # 4/5
    # title_score 1/5 = 0.2 is not > 0.2, no query or category match -> 0.5 (and 0.2 is not < 0.1)
    one_of_five = replace(speaker, title="Zorb Wireless Speaker")
    assert type_reward(one_of_five, G)["title_score"] == pytest.approx(0.2)
    assert type_reward(one_of_five, G)["r_type"] == 0.5
    assert score(one_of_five, G, color="black", size="large")[0] == 0.5
    twelve = replace(G, name="Acme " + " ".join(f"N{c}" for c in "abcdefghijk"))
    assert type_reward(replace(speaker, title="Acme Speaker"), twelve)["r_type"] == 0.1  # 1/12 < 0.1
    # same two category levels -> category match keeps 1.0 at title_score 0.2
    assert type_reward(replace(one_of_five, product_category=CAT), G)["r_type"] == 1.0
    nameless = replace(G, name="with and for")  # no goal nouns -> title_score 0.2
    parts = type_reward(speaker, nameless)
    assert parts["title_score"] == 0.2 and parts["r_type"] == 0.5


def test_title_nouns_count_every_title_case_word_and_no_lemmas():
    pillow = replace(P, title="Dralu Pillow with Cooling Gel", query="bed pillows",
                     product_category="Home & Kitchen › Bedding › Bed Pillows")
    pillows = replace(G, name="Galnemar Hypoallergenic Bed Pillows", query="bed pillows",
                      product_category=pillow.product_category)
    # same product type (the query and category match), but 'pillow' is not 'pillows': no noun shared -> 0
    assert type_reward(pillow, pillows)["title_score"] == 0.0 and type_reward(pillow, pillows)["r_type"] == 0.0
    # attribute words in Title Case are nouns too: 'machine' and 'washable' shared with a bath towel
    towel = replace(P, title="Ulyo Bath Towels - Machine Washable, Quick Dry", query="cotton bath towels",
                    product_category="Home & Kitchen › Bath › Bath Towels")
    bins = replace(G, name="Marne Storage Bins - Machine Washable, Foldable", query="fabric storage bins",
                   product_category="Home & Kitchen › Storage & Organization › Storage Bins")
    parts = type_reward(towel, bins)  # goal nouns [marne, storage, bins, machine, washable, foldable]: 2 of 6
    assert parts["title_score"] == pytest.approx(2 / 6) and parts["r_type"] == 1.0
    assert type_reward(replace(towel, title="Ulyo Bath Towels - Quick Dry, Machine Washable"), bins)["r_type"] == 1.0
    assert type_reward(replace(towel, title="Ulyo Bath Towels - Quick Dry, Soft Cotton"), bins)["r_type"] == 0.0
    # repeats count in the goal's list: [over, ear, headphones, headphones] -> 1 shared noun over 4
    twice = replace(G, name="Over-Ear Headphones Headphones")
    assert type_reward(replace(P, title="Zorb Headphones"), twice)["title_score"] == pytest.approx(1 / 4)


def test_option_values_the_reward_confuses_are_the_ones_pinned():
    """Within a type no value appears twice; the fuzzy match still lets some values of a size group credit each
    other (as in WebShop's own catalog), and never a value of another group."""
    bare, pairs = set(), set()
    for t in TYPES:
        values = [(g, v) for g, vs in t.options.items() for v in vs]
        assert len({v for _, v in values}) == len(values), f"{t.key}: a value appears twice"
        for (g, want), (h, chosen) in itertools.permutations(values, 2):
            if fuzzy_match(normalize_color(chosen), normalize_color(want)):
                bare.add((g, h, want, chosen))
            if fuzzy_match(normalize_color(chosen), normalize_goal_option(g, want)):
                pairs.add((g, h, want, chosen))
    assert {(g, h) for g, h, _, _ in bare | pairs} == {("size", "size")}
    assert ("size", "size", "large", "x-large") in bare and ("size", "size", "7", "7.5") in bare
    assert ("size", "size", "set of 4", "set of 6") in bare and ("size", "size", "set of 4", "set of 6") in pairs
    assert ("size", "size", "x-large", "large") in pairs and ("size", "size", "large", "x-large") not in pairs
    assert len(bare) == 56 and len(pairs) == 23  # distinct (goal value, selected value) pairs over all types
    assert pairs < bare


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
            assert len(values) >= 2 and not any(catalog_color(v) in text for v in values)  # the generator's rule
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
