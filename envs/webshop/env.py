"""`alprl/WebShop-v0`: a WebShop-style shop over a procedural catalog (reference/environments.md §3)."""

from __future__ import annotations

import random
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from envs.splits import check_split, derive_seed, global_index, split_size, task_id_of_index
from envs.webshop_defaults import DEFAULT_NUM_PRODUCTS

from ..household.env import CHARSET, MAX_TEXT, clip_text
from . import pages
from .catalog import get_catalog
from .expert import rollout_oracle
from .goals import sample_goal
from .session import Shop, ShopState

INVALID_FEEDBACK = "Invalid action!"
_CHARSET = frozenset(CHARSET)
_OPTION_KEYS = frozenset({"task_id", "index", "task_type", "split"})  # index: global, as the TIR env


class WebShopEnv(gym.Env[str, str]):
    """WebShop-style shopping: search a catalog, open a product, choose its options and buy it.

    ## Observation
    A `Text(8192, min_length=0, charset=string.printable)` string: the current page. `text` mode joins the visible
    strings with " [SEP] " (search page: "WebShop [SEP] Instruction: [SEP] {instruction} [SEP] Search"); `text_rich`
    writes one element per line with "[button] x [button_]" markers. `num_prev_obs` / `num_prev_actions` prepend
    that many earlier observations / actions, joined with " [SEP] ".

    ## Action
    Any `str`; valid are `search[query]` (on the search page) and `click[x]` for x in
    `info["available_actions"]["clickables"]` except "search". Anything else leaves the page unchanged
    (`invalid_action=True`; the observation is repeated, or "Invalid action!" with `invalid_feedback=True`).

    ## Reward
    0.0 until `click[buy now]`; then WebShop's score in [0, 1] (attributes, options, price, type factor; see
    envs/webshop/reward.py): options match fuzzily in every group, "synthetic" goals' options as WebShop's
    dict goals ((group, value) pairs), "human" ones as bare values; the type factor compares title nouns by a
    Title Case rule standing in for spaCy (docs/architecture.md). `won` iff the score is exactly 1.0;
    `task_score` is the score.

    ## Episode End
    `terminated=True` on purchase; `truncated=True` after `max_steps` (15) steps without one. Steps after the end
    are invalid and pay 0.0.

    ## Arguments
    - `render_mode`: None or "ansi" (`render()` returns the current observation).
    - `num_products`, `catalog_seed`: the shared catalog (built once per process per pair; default 1,000).
    - `split`: default split ("train" | "valid" | "test"; WebShop index ranges 1500+ / 500-1499 / 0-499).
    - `observation_mode`: "text" | "text_rich". `instruction_style`: "synthetic" | "human".
    - `show_attrs`: add the `Attributes` button. `search_anywhere`: allow `search[...]` on every page.
    - `invalid_feedback`: answer invalid actions with "Invalid action!". `max_steps`: step limit.
    - `num_train_tasks`: train task ids drawn by `reset` without a task_id are in [0, num_train_tasks).
    - `expert`: add `info["expert_plan"]` (the oracle's remaining actions; for SFT data, never for RL).

    `reset(seed=..., options={"task_id": k, "task_type": category, "split": s})`; info keys (every step):
    admissible_commands, available_actions {has_search_bar, clickables}, won, task_score, raw_score, task_id,
    task_type (the target's category), step, invalid_action (+ expert_plan).
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, render_mode: str | None = None, *, num_products: int = DEFAULT_NUM_PRODUCTS,
                 catalog_seed: int = 0, split: str = "train", observation_mode: str = "text",
                 instruction_style: str = "synthetic", show_attrs: bool = False, search_anywhere: bool = False,
                 invalid_feedback: bool = False, num_prev_obs: int = 0, num_prev_actions: int = 0,
                 max_steps: int = 15, num_train_tasks: int = 10_000, expert: bool = False) -> None:
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode={render_mode!r}: WebShopEnv supports None or 'ansi'")
        if observation_mode not in ("text", "text_rich"):
            raise ValueError(f"observation_mode={observation_mode!r}: use 'text' or 'text_rich'")
        if instruction_style not in ("synthetic", "human"):
            raise ValueError(f"instruction_style={instruction_style!r}: use 'synthetic' or 'human'")
        if max_steps < 1 or num_prev_obs < 0 or num_prev_actions < 0:
            raise ValueError("max_steps must be >= 1 and num_prev_obs/num_prev_actions >= 0")
        self.render_mode = render_mode
        self.catalog = get_catalog(num_products, catalog_seed)
        self.catalog_seed = catalog_seed
        self.split = check_split(split)
        self.observation_mode, self.instruction_style = observation_mode, instruction_style
        self.show_attrs, self.search_anywhere, self.invalid_feedback = show_attrs, search_anywhere, invalid_feedback
        self.num_prev_obs, self.num_prev_actions = num_prev_obs, num_prev_actions
        self.max_steps, self.num_train_tasks, self.expert = max_steps, num_train_tasks, expert
        self.observation_space = spaces.Text(MAX_TEXT, min_length=0, charset=CHARSET)
        self.action_space = spaces.Text(MAX_TEXT, min_length=0, charset=CHARSET)
        self.shop: Shop | None = None
        self.state = ShopState()
        self.clickables: list[str] = []
        self._obs, self._page_text, self._task_id = "", "", ""
        self._history: list[tuple[str, str]] = []  # (observation, action that followed it)
        self._steps = 0
        self._plan: list[str] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = set(options) - _OPTION_KEYS
        if unknown:
            raise ValueError(f"unknown reset option(s) {sorted(unknown)}; WebShopEnv accepts {sorted(_OPTION_KEYS)}")
        split = check_split(options.get("split", self.split))
        category = options.get("task_type")
        if "index" in options and "task_id" not in options:  # the global-index form every alprl env accepts
            options["task_id"] = task_id_of_index(split, options["index"])
        if "task_id" in options:
            index = global_index(split, options["task_id"])
        else:
            index = global_index(split, int(self.np_random.integers(split_size(split, self.num_train_tasks))))
        self._task_id = f"{split}/{index - global_index(split, 0)}" + (f"/{category}" if category else "")
        rng = random.Random(derive_seed("webshop", self.catalog_seed, len(self.catalog), index, category,
                                        self.instruction_style))
        goal = sample_goal(rng, self.catalog, self.instruction_style, category)
        self.shop = Shop(self.catalog, goal, self.show_attrs, self.search_anywhere)
        self.state = ShopState()
        self._steps, self._history = 0, []
        self._render_page()
        self._obs = self._page_text
        if self.expert:
            self._plan = rollout_oracle(self.shop, self.state.copy(), self.max_steps)[0]
        return self._obs, self._info(invalid=False)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self.shop is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        over = self.state.page == "done" or self._steps >= self.max_steps
        self._steps += 1
        valid = not over and isinstance(action, str) and self.shop.apply(self.state, action, self.clickables)
        reward = 0.0
        if valid:
            # Echoed actions may hold characters outside the observation charset (model text): replace them.
            self._history.append((self._page_text, "".join(c if c in _CHARSET else "?" for c in action.strip())))
            self._render_page()
            self._obs = self._with_history(self._page_text)
            if self.state.page == "done":
                reward = float(self.state.score)
            if self.expert:
                self._advance_plan(action.strip())
        elif self.invalid_feedback:
            self._obs = INVALID_FEEDBACK
        terminated = self.state.page == "done"
        truncated = not terminated and self._steps >= self.max_steps
        return self._obs, reward, terminated, truncated, self._info(invalid=not valid)

    def _render_page(self) -> None:
        els = self.shop.elements(self.state)
        self.clickables = pages.clickables(els)
        if self.observation_mode == "text":
            self._page_text = clip_text(pages.render_text(els))
        else:
            self._page_text = clip_text(pages.render_rich(els, self.state.clicked))

    def _with_history(self, current: str) -> str:
        n = max(self.num_prev_obs, self.num_prev_actions)
        parts: list[str] = []
        recent = self._history[-n:] if n else []
        for i, (obs, act) in enumerate(recent):
            if len(recent) - i <= self.num_prev_obs:
                parts.append(obs)
            if len(recent) - i <= self.num_prev_actions:
                parts.append(act)
        return clip_text(pages.SEP.join(parts + [current]))

    def _advance_plan(self, action: str) -> None:
        # The oracle is a deterministic function of the state, so following its first action leaves exactly
        # the rest of the cached plan; recompute only after a deviation.
        if self._plan and self._plan[0] == action:
            self._plan = self._plan[1:]
        else:
            left = self.max_steps - self._steps
            self._plan = rollout_oracle(self.shop, self.state.copy(), left)[0] if left > 0 else []

    def _info(self, invalid: bool) -> dict[str, Any]:
        done = self.state.page == "done"
        info: dict[str, Any] = {
            "admissible_commands": self.shop.commands(self.state, self.clickables),
            "available_actions": {"has_search_bar": self.shop.has_search_bar(self.state),
                                  "clickables": list(self.clickables)},
            "won": done and self.state.score == 1.0,
            "task_score": float(self.state.score) if done else 0.0,
            "raw_score": float(self.state.raw_score) if done else 0.0,
            "task_id": self._task_id,
            "task_type": self.shop.goal.category,
            "step": self._steps,
            "invalid_action": invalid,
        }
        if self.expert:
            info["expert_plan"] = list(self._plan)
        return info

    def render(self) -> str:
        return self._obs

    def close(self) -> None:
        self.shop = None
