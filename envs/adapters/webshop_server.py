"""`alprl/WebShopServer-v0`: a running WebShop server with alprl/WebShop-v0's interface, so the shop agent and a
model trained on the generated shop run on the real WebShop.

The server is AgentGym's `agentenv-webshop` (the real WebShop's `WebAgentTextEnv` in text mode behind HTTP):
`POST /create` → env index; `POST /reset {env_idx, session_id}` → [observation, null];
`POST /step {env_idx, action}` → {state, reward, done}; `GET /available_actions?env_idx=` → {has_search_bar,
clickables}; `POST /close {env_idx}`; `GET /` answers "ok". Pass its address as `server_url` (config key
`env.webshop_url`) or `$WEBSHOP_URL`; without one, or when nothing answers there, creating the env raises one
`AdapterUnavailable` line.

Task ids follow WebShop's goal indices as alprl/WebShop-v0 does: test = sessions 0-499, valid = 500-1,499,
train = 1,500 onward (wrapping around `num_goals`, WebShop's 12,087 human-instruction goals by default). Reward is
the server's (WebShop's score on `click[buy now]`); `won` iff it is 1.0; `max_steps` (15) truncates.
"""

from __future__ import annotations

import logging
import os
import string
from typing import Any

import gymnasium as gym
import httpx
from gymnasium import spaces

from envs.adapters import AdapterUnavailable
from envs.splits import SPLIT_OFFSETS, SPLIT_SIZES, check_split, task_id_of_index

log = logging.getLogger(__name__)

WEBSHOP_GOALS = 12_087  # goals with human instructions in WebShop's full data (items_human_ins.json)
MAX_TEXT = 16_384


class WebShopServerEnv(gym.Env[str, str]):
    """A WebShop server behind alprl/WebShop-v0's interface (see the module docstring).

    `reset(seed=..., options={"task_id": k, "split": s})`; info keys (every step): admissible_commands,
    available_actions {has_search_bar, clickables}, won, task_score, task_id, task_type ("" : the server does not
    say), step, invalid_action.
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, render_mode: str | None = None, *, server_url: str | None = None, split: str = "train",
                 max_steps: int = 15, num_goals: int = WEBSHOP_GOALS, timeout_s: float = 60.0) -> None:
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode={render_mode!r}: WebShopServerEnv supports None or 'ansi'")
        url = server_url or os.environ.get("WEBSHOP_URL", "")
        if not url:
            raise AdapterUnavailable("alprl/WebShopServer-v0 needs a running WebShop server (AgentGym's "
                                     "agentenv-webshop): set env.webshop_url=http://HOST:PORT or WEBSHOP_URL")
        self._http = httpx.Client(base_url=url, timeout=timeout_s)
        try:
            self._http.get("/").raise_for_status()
        except httpx.HTTPError as exc:
            self._http.close()
            raise AdapterUnavailable(f"alprl/WebShopServer-v0: no WebShop server answers at {url} ({exc}); start "
                                     "one or fix env.webshop_url") from exc
        self.render_mode, self.split, self.max_steps = render_mode, check_split(split), max_steps
        self.num_goals = num_goals
        self.observation_space = spaces.Text(MAX_TEXT, min_length=0, charset=string.printable)
        self.action_space = spaces.Text(MAX_TEXT, min_length=0, charset=string.printable)
        self._env_idx: int | None = None
        self._obs, self._task_id = "", ""
        self._available: dict[str, Any] = {"has_search_bar": False, "clickables": []}
        self._steps, self._done, self._score = 0, False, 0.0

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            raise RuntimeError(f"WebShop server {self._http.base_url}{path}: {exc}") from exc
        return response.json()

    def session_of(self, split: str, task_id: int) -> int:
        """WebShop's session (goal index) of `task_id` in `split`."""
        if split == "train":
            return SPLIT_OFFSETS["train"] + task_id % (self.num_goals - SPLIT_OFFSETS["train"])
        if not 0 <= task_id < SPLIT_SIZES[split]:
            raise ValueError(f"task_id={task_id}: split {split} has {SPLIT_SIZES[split]} tasks")
        return SPLIT_OFFSETS[split] + task_id

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = set(options) - {"task_id", "split", "index"}
        if unknown:
            raise ValueError(f"unknown reset options {sorted(unknown)}; valid: task_id, split, index")
        split = check_split(options.get("split", self.split))
        if "index" in options and "task_id" not in options:  # the global-index form every alprl env accepts
            options["task_id"] = task_id_of_index(split, options["index"])
        task_id = options.get("task_id")
        if task_id is None:
            size = SPLIT_SIZES.get(split) or (self.num_goals - SPLIT_OFFSETS["train"])
            task_id = int(self.np_random.integers(size))
        session = self.session_of(split, task_id)
        if self._env_idx is None:
            self._env_idx = int(self._call("POST", "/create"))
        self._obs = str(self._call("POST", "/reset", json={"env_idx": self._env_idx, "session_id": session})[0])
        self._task_id, self._steps, self._done, self._score = f"{split}-{task_id}", 0, False, 0.0
        self._refresh_actions()
        return self._obs, self._info(invalid=False)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self._env_idx is None:
            raise RuntimeError("WebShopServerEnv.step before reset; call env.reset() first")
        if self._done or self._steps >= self.max_steps:  # after the end: nothing changes, nothing is paid
            return self._obs, 0.0, self._done, not self._done, self._info(invalid=True)
        command = action.strip() if isinstance(action, str) else ""
        invalid = not self._admissible(command)
        self._steps += 1
        reward = 0.0
        if not invalid:  # the server would answer an invalid action with the same page; it is not asked
            result = self._call("POST", "/step", json={"env_idx": self._env_idx, "action": command})
            self._obs, reward, self._done = str(result["state"]), float(result["reward"]), bool(result["done"])
            self._score = reward if self._done else 0.0
            self._refresh_actions()
        truncated = not self._done and self._steps >= self.max_steps
        return self._obs, reward, self._done, truncated, self._info(invalid=invalid)

    def _refresh_actions(self) -> None:
        self._available = dict(self._call("GET", "/available_actions", params={"env_idx": self._env_idx}))

    def _admissible(self, command: str) -> bool:
        """WebShop's valid actions: `search[...]` where the page has a search bar, `click[x]` for a clickable x
        (compared lower-cased, as WebShop does)."""
        name, _, rest = command.partition("[")
        if not rest.endswith("]"):
            return False
        arg = rest[:-1]
        if name == "search":
            return bool(self._available["has_search_bar"]) and bool(arg.strip())
        clickables = [c.lower() for c in self._available["clickables"] if c != "search"]
        return name == "click" and arg.lower() in clickables

    def _info(self, invalid: bool) -> dict[str, Any]:
        clickables = list(self._available["clickables"])
        head = ["search[<your query>]"] if self._available["has_search_bar"] else []
        return {"admissible_commands": head + [f"click[{c}]" for c in clickables if c != "search"],
                "available_actions": {"has_search_bar": bool(self._available["has_search_bar"]),
                                      "clickables": clickables},
                "won": self._done and self._score == 1.0, "task_score": self._score, "task_id": self._task_id,
                "task_type": "", "step": self._steps, "invalid_action": invalid}

    def render(self) -> str:
        return self._obs

    def close(self) -> None:
        if self._env_idx is not None:
            try:
                self._call("POST", "/close", json={"env_idx": self._env_idx})
            except RuntimeError as exc:  # closing must not fail; a server that is gone has nothing left to close
                log.warning("WebShopServerEnv.close: env %d not closed on the server: %s", self._env_idx, exc)
            self._env_idx = None
        self._http.close()
