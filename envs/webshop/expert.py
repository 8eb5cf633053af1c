"""WebShop experts: the oracle (score 1.0 within 10 steps), a page reader, and imperfect variants for SFT data.

API
    expert_action(env, rng=None, epsilon=0.0, wrong_option_p=0.0, privileged=True) -> str | None
        The next action for a WebShopEnv (wrapped or not); None once the episode has ended. Stateless: it reads
        the page state each call. Oracle (defaults): `search[{type query} {goal attributes}]`, `click[next >]` /
        `click[< prev]` until the target ASIN is on the page, click it, click every goal option value that is
        not selected, `click[buy now]`; off-track pages lead back (`< prev`, `back to search`).
        Reader (`privileged=False`, see `reader_step`): acts only on what the instruction and the pages show.
        Imperfect: with probability `epsilon` a random admissible click (on the search page: a search for a
        random subset of the instruction's words); on the chosen product's page it fills only groups with no
        selection yet and picks a wrong value with probability `wrong_option_p` (a mistake it does not notice).
        `rng` (random.Random or numpy.random.Generator) is required when epsilon or wrong_option_p > 0.
    rollout_oracle(shop, state, max_steps) -> (plan, won)
        Runs the oracle on `state` in place (pass a copy).

Step bound: search 1 + pages 4 + item 1 + option groups (<= 3) + buy 1 <= 10 (the generator guarantees the
target is in the top 50 of the oracle's query).
"""

from __future__ import annotations

import random
from typing import Any

from .goals import instruction_query
from .pages import PRODUCT_WINDOW, clickables
from .session import Shop, ShopState

MAX_STEPS = 15


def _randbelow(rng: Any, n: int) -> int:
    if isinstance(rng, random.Random):
        return rng.randrange(n)
    return int(rng.integers(n))  # numpy.random.Generator


def _options_step(shop: Shop, s: ShopState, wrong_option_p: float, rng: Any) -> str:
    """The next option click on the open product's page, or buy: each option value the goal names (in the goal's
    group order) in the product's group that offers it; values the product does not offer are skipped."""
    options = shop.catalog.products[s.item].options
    for _, want in sorted(shop.goal.goal_options.items()):
        group = next((g for g, values in options.items() if want in values), None)
        if group is None:
            continue
        have = s.selected.get(group)
        wrong = [v for v in options[group] if v != want]
        if have is None and wrong and wrong_option_p > 0 and rng.random() < wrong_option_p:
            return f"click[{wrong[_randbelow(rng, len(wrong))]}]"
        if have is None or (have != want and wrong_option_p == 0):
            return f"click[{want}]"
    return "click[buy now]"


def policy_step(shop: Shop, s: ShopState, wrong_option_p: float = 0.0, rng: Any = None) -> str | None:
    """The expert's next action for state `s` (the oracle when wrong_option_p == 0)."""
    goal = shop.goal
    if s.page == "done":
        return None
    if s.page == "search":
        return f"search[{goal.expert_query}]"
    if s.page == "sub":
        return "click[< prev]"
    if s.page == "item":
        return _options_step(shop, s, wrong_option_p, rng) if s.item == goal.target else "click[< prev]"
    if goal.target not in s.results:  # results of some other query
        return "click[back to search]"
    want = s.results.index(goal.target) // PRODUCT_WINDOW + 1
    if want == s.page_num:
        return f"click[{goal.asin.lower()}]"
    return "click[next >]" if want > s.page_num else "click[< prev]"


def _fits(shop: Shop, idx: int) -> bool:
    """What a reader can check on a product's page: the price is under the instruction's limit and every option
    value the instruction names is offered."""
    p = shop.catalog.products[idx]
    offered = {v for values in p.options.values() for v in values}
    return p.price <= shop.goal.price_upper and all(v in offered for v in shop.goal.goal_options.values())


def reader_step(shop: Shop, s: ShopState, wrong_option_p: float = 0.0, rng: Any = None) -> str | None:
    """The next action of an expert that knows only what the instruction and the pages show (no target ASIN):
    search the instruction's words from its attributes to the product type, as written (`instruction_query`);
    open the first page's results in rank order; on a product's page go back (`< prev`) unless it fits
    (`_fits`: price under the limit, every named option value offered), else click the instruction's option
    values and buy. When none of the first page fits, it buys the first result (partial credit beats none).
    Results of another query lead back to search; other pages lead back to page 1."""
    if s.page == "done":
        return None
    query = instruction_query(shop.goal)
    if s.page == "search":
        return f"search[{query}]"
    if s.page == "sub":
        return "click[< prev]"
    first_page = s.results[:PRODUCT_WINDOW]
    unseen = [idx for idx in first_page if idx not in s.visited]
    if s.page == "item":
        settle = _fits(shop, s.item) or (not unseen and s.item == first_page[0])
        return _options_step(shop, s, wrong_option_p, rng) if settle else "click[< prev]"
    if s.query != query.lower():
        return "click[back to search]"
    if s.page_num != 1:
        return "click[< prev]"
    pick = unseen[0] if unseen else first_page[0]
    return f"click[{shop.catalog.products[pick].asin.lower()}]"


def _random_action(env: Any, rng: Any) -> str:
    shop, s = env.shop, env.state
    clicks = [c for c in env.clickables if c != "search"]
    if shop.has_search_bar(s) and (not clicks or s.page == "search"):
        words = shop.goal.instruction_text.split()
        k = 1 + _randbelow(rng, len(words))
        return "search[" + " ".join(words[_randbelow(rng, len(words))] for _ in range(k)) + "]"
    return f"click[{clicks[_randbelow(rng, len(clicks))]}]"


def expert_action(env: Any, rng: Any = None, epsilon: float = 0.0, wrong_option_p: float = 0.0,
                  privileged: bool = True) -> str | None:
    """The expert's next action (see the module docstring)."""
    env = env.unwrapped
    if env.shop is None:
        raise ValueError("expert_action needs a reset environment (call env.reset() first)")
    if (epsilon > 0 or wrong_option_p > 0) and rng is None:
        raise ValueError("expert_action: pass rng (random.Random or numpy Generator) when epsilon or "
                         "wrong_option_p > 0")
    if env.state.page == "done":
        return None
    if epsilon > 0 and rng.random() < epsilon:
        return _random_action(env, rng)
    step = policy_step if privileged else reader_step
    return step(env.shop, env.state, wrong_option_p, rng)


def rollout_oracle(shop: Shop, s: ShopState, max_steps: int = MAX_STEPS) -> tuple[list[str], bool]:
    """Run the oracle on `s` in place; returns (actions taken, whether it bought with score 1.0)."""
    plan: list[str] = []
    for _ in range(max_steps):
        action = policy_step(shop, s)
        if action is None:
            break
        if not shop.apply(s, action, clickables(shop.elements(s))):
            return plan, False
        plan.append(action)
    return plan, s.page == "done" and s.score == 1.0
