"""WebShop env: exact page strings, transitions, invalid actions, limits, modes, splits, the Gymnasium contract."""

from __future__ import annotations

import pickle
import random
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import envs  # noqa: F401  (registers alprl/*)
from envs.webshop import WebShopEnv
from envs.webshop.goals import NO_PRICE_LIMIT, _price_upper, instruction
from envs.webshop.pages import NO_REVIEWS
from envs.webshop.reward import get_reward

SEP = " [SEP] "


def reset(env: WebShopEnv, k: int = 0, split: str = "test"):
    obs, info = env.reset(options={"task_id": k, "split": split})
    return obs, info, env.shop.goal, env.catalog


def test_instruction_texts_and_price_rule():
    rng = random.Random(0)
    text = instruction("synthetic", rng, "wireless headphones", ["noise cancelling", "deep bass"],
                       {"size": "large", "color": "black"}, 50.0)
    assert text == ("find me noise cancelling and deep bass wireless headphones with color: black, and size: "
                    "large, and price lower than 50.00 dollars")
    assert instruction("synthetic", rng, "raw honey", ["kosher"], {}, NO_PRICE_LIMIT) == "find me kosher raw honey"
    human = instruction("human", rng, "raw honey", ["kosher"], {"size": "16 ounce"}, 20.0)
    assert human.endswith("kosher raw honey in 16 ounce size, and price lower than 20.00 dollars")
    # multiples of 10 strictly above the price, first four, the larger of two sampled
    assert {_price_upper(random.Random(s), 45.0) for s in range(50)} == {60.0, 70.0, 80.0}
    assert _price_upper(rng, 975.0) == 990.0  # 980 and 990 above: both sampled, the larger kept
    assert _price_upper(rng, 985.0) == NO_PRICE_LIMIT  # only 990 above: no limit


def test_pages_exact_strings_and_navigation():
    env = WebShopEnv()
    obs, info, goal, cat = reset(env)
    instr = goal.instruction_text
    assert obs == f"WebShop [SEP] Instruction: [SEP] {instr} [SEP] Search"
    assert info["available_actions"] == {"has_search_bar": True, "clickables": ["search"]}
    assert info["admissible_commands"] == ["search[<your query>]"]
    obs, r, *_, info = env.step(f"search[{goal.expert_query}]")
    results = cat.index.search(goal.expert_query.lower(), 50)
    assert len(results) == 50 and r == 0.0

    def listing(page):
        return [x for i in results[(page - 1) * 10: page * 10]
                for x in (cat.products[i].asin, cat.products[i].title, cat.products[i].price_text)]
    head = ["Instruction:", instr, "Back to Search"]
    assert obs == SEP.join(head + ["Page 1 (Total results: 50)", "Next >"] + listing(1))
    assert info["available_actions"]["has_search_bar"] is False
    assert info["admissible_commands"][:2] == ["click[back to search]", "click[next >]"]
    obs, *_ = env.step("click[Next >]")  # the argument is lower-cased
    assert obs == SEP.join(head + ["Page 2 (Total results: 50)", "< Prev", "Next >"] + listing(2))
    for _ in range(3):
        obs, *_ = env.step("click[next >]")
    assert obs == SEP.join(head + ["Page 5 (Total results: 50)", "< Prev"] + listing(5))
    p = cat.products[results[41]]
    obs, *_ = env.step(f"click[{p.asin}]")
    groups = [x for g, vs in p.options.items() for x in (g, *vs)]
    item = SEP.join(head + ["< Prev", *groups, p.title, f"Price: {p.price_text}", "Rating: N.A.", "Description",
                            "Features", "Reviews", "Buy Now"])
    assert obs == item
    assert env.step("click[description]")[0] == SEP.join(head + ["< Prev", p.description])
    assert env.step("click[< prev]")[0] == item
    assert env.step("click[features]")[0] == SEP.join(head + ["< Prev", *p.bullets])
    env.step("click[< prev]")
    assert env.step("click[reviews]")[0] == SEP.join(head + ["< Prev", NO_REVIEWS])
    assert env.step("click[attributes]")[-1]["invalid_action"]  # only with show_attrs
    env.step("click[< prev]")
    obs, *_ = env.step("click[< prev]")
    assert obs.startswith(SEP.join(head + ["Page 5 (Total results: 50)"]))
    obs, _, term, trunc, info = env.step("click[back to search]")  # the 15th step: truncated
    assert obs == f"WebShop [SEP] Instruction: [SEP] {instr} [SEP] Search"
    assert (info["step"], term, trunc, info["invalid_action"]) == (15, False, True, False)
    obs, _, term, trunc, info = env.step(f"search[{goal.expert_query}]")  # past the limit: refused
    assert (obs, trunc, info["invalid_action"]) == (f"WebShop [SEP] Instruction: [SEP] {instr} [SEP] Search", True, True)


def test_buying_scores_and_done_page():
    env = WebShopEnv(show_attrs=True)
    _, _, goal, cat = reset(env, 3)
    p = cat.products[goal.target]
    env.step(f"search[{goal.expert_query}]")
    while p.asin not in env.render():
        env.step("click[next >]")
    env.step(f"click[{p.asin.lower()}]")
    assert env.step("click[attributes]")[0].endswith(SEP.join(p.attributes))
    env.step("click[< prev]")
    wrong = {g: next(v for v in p.options[g] if v != want) for g, want in goal.goal_options.items()}
    for value in wrong.values():
        env.step(f"click[{value}]")
    expected, parts = get_reward(p, goal, p.price, wrong)
    obs, reward, term, trunc, info = env.step("click[buy now]")
    assert reward == expected == info["task_score"] and term and not trunc
    assert (reward < 1.0) == bool(goal.goal_options) and info["won"] == (reward == 1.0)
    assert obs == f"Thank you for shopping with us! [SEP] Your score (min 0.0, max 1.0) [SEP] {round(expected, 4)!r}"
    assert env.step("click[buy now]")[1:3] == (0.0, True)  # after the end: invalid, no reward


def test_invalid_actions_leave_the_page_unchanged():
    env = WebShopEnv()
    obs0, *_ = reset(env)
    for bad in ["click[search]", "search[]", "search", "click[b0nothere00]", "buy now", "SEARCH[shoes]",
                "[shoes]", "\u2011\x00" * 50, "click[" * 2000]:
        obs, r, term, trunc, info = env.step(bad)
        assert (obs, r, term, trunc, info["invalid_action"]) == (obs0, 0.0, False, False, True), bad
    obs1, *_ = env.step("search[shoes]")
    obs, *_, info = env.step("search[hats]")  # search only on the search page by default
    assert obs == obs1 and info["invalid_action"]
    anywhere = WebShopEnv(search_anywhere=True, invalid_feedback=True)
    reset(anywhere)
    anywhere.step("search[shoes]")
    assert not anywhere.step("search[hats]")[-1]["invalid_action"]
    assert anywhere.step("click[nope]")[0] == "Invalid action!"


def test_text_rich_mode_and_history():
    env = WebShopEnv(observation_mode="text_rich")
    _, _, goal, cat = reset(env, 1)
    env.step(f"search[{goal.expert_query}]")
    p = cat.products[goal.target]
    while p.asin not in env.render():
        env.step("click[next >]")
    obs, *_ = env.step(f"click[{p.asin}]")
    assert obs.startswith(f"You have clicked {p.asin.lower()}.\nInstruction:\n{goal.instruction_text}\n"
                          "[button] Back to Search [button_]\n[button] < Prev [button_]\n")
    if goal.goal_options:
        group, value = sorted(goal.goal_options.items())[0]
        obs, *_ = env.step(f"click[{value}]")
        assert f"\n  [clicked button] {value} [clicked button_]\n" in obs
        assert obs.startswith(f"You have clicked {value}.")
    hist = WebShopEnv(num_prev_obs=1, num_prev_actions=1)
    first, *_ = reset(hist, 1)
    obs, *_ = hist.step("search[raw  honey]")
    assert obs.startswith(f"{first} [SEP] search[raw  honey] [SEP] Instruction:")


def test_seeded_determinism_and_splits():
    a, b = WebShopEnv(expert=True), WebShopEnv(expert=True)
    ra = a.reset(seed=3)
    assert ra == b.reset(seed=3) and a.reset(seed=4)[0] != ra[0]
    a.reset(seed=3)
    for act in [ra[1]["expert_plan"][0], "click[next >]", "junk"]:
        assert a.step(act) == b.step(act)
    env = WebShopEnv()
    seen = {}
    for split in ("test", "valid"):
        seen[split] = []
        for k in range(300):
            _, info = env.reset(options={"split": split, "task_id": k})
            assert info["task_id"] == f"{split}/{k}"
            seen[split].append((env.shop.goal.asin, env.shop.goal.instruction_text))
    assert len(set(seen["test"])) > 290 and len(set(seen["test"]) & set(seen["valid"])) < 10
    env.reset(seed=1, options={"split": "valid", "task_id": 9})
    goal = env.shop.goal.instruction_text
    env.reset(seed=2, options={"split": "valid", "task_id": 9})
    assert env.shop.goal.instruction_text == goal
    _, info = env.reset(options={"task_type": "grocery"})
    assert info["task_type"] == "grocery"
    pickle.dumps(info)
    with pytest.raises(ValueError, match="not a webshop category"):
        env.reset(options={"task_type": "toys"})
    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(options={"goal": 1})


def test_check_env_make_vec_and_shared_catalog():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # render_fps is meaningless for ansi text
        env = gym.make("alprl/WebShop-v0")
        check_env(env.unwrapped)
        obs, _ = env.reset(seed=0)
        for _ in range(20):
            obs, r, _, _, _ = env.step(env.action_space.sample())
            assert env.observation_space.contains(obs) and type(r) is float
        env.close()
        env.close()
        venv = gym.make_vec("alprl/WebShop-v0", num_envs=2, vectorization_mode="sync")
    obs, info = venv.reset(seed=[8, 8])
    assert obs[0] == obs[1]
    assert venv.envs[0].unwrapped.catalog is venv.envs[1].unwrapped.catalog  # built once per process
    obs, rew, term, trunc, info = venv.step(("search[shoes]", "click[nothing]"))
    assert list(info["invalid_action"]) == [False, True] and rew.dtype == np.float64
    venv.close()
