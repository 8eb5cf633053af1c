"""`alprl/Household-v0`: an ALFWorld-style text household, procedurally generated (reference/environments.md §2)."""

from __future__ import annotations

import random
import string
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from envs.splits import check_split, derive_seed, global_index, split_size, task_id_of_index

from .engine import NOTHING, admissible, base_commands, execute, goal_reached
from .expert import rollout_oracle
from .generator import generate
from .vocab import TASK_TYPES
from .world import World

CHARSET = string.printable
MAX_TEXT = 8192
TRUNC_MARKER = "\n[... truncated]"
_OPTION_KEYS = frozenset({"task_id", "index", "task_type", "split"})  # index: global, as the TIR env


def clip_text(text: str, max_length: int = MAX_TEXT) -> str:
    """Deterministically cut `text` to `max_length` characters, ending with a visible marker."""
    if len(text) <= max_length:
        return text
    return text[: max_length - len(TRUNC_MARKER)] + TRUNC_MARKER


class HouseholdEnv(gym.Env[str, str]):
    """ALFWorld-style household: find, process and place objects in one procedurally generated room.

    ## Observation
    A `Text(8192, min_length=0, charset=string.printable)` string. After `reset`: "-= Welcome to TextWorld,
    ALFRED! =-\\n\\n{look}\\n\\nYour task is to: {goal}.". After `step`: ALFWorld's feedback for the command (e.g.
    "You arrive at cabinet 1. The cabinet 1 is closed.") or "Nothing happens." for anything not admissible.

    ## Action
    Any `str` (space: `Text(8192, min_length=0, charset=string.printable)`). Only an exact match (after `strip()`,
    case-sensitive) of an entry of `info["admissible_commands"]` acts: look, inventory, help (v0.4), go to {r},
    open/close {r}, take {o} from {r}, move {o} to {r} (v0.4) / put {o} in/on {r} (v0.3), heat/cool/clean {o} with
    {r}, use {o}, slice {o} with {k}, examine {r|o}.

    ## Reward
    1.0 on the step that makes the goal true, else 0.0 (no penalty for invalid actions here; RL wrappers add it).

    ## Episode End
    `terminated=True` when the goal is reached (there is no losing state); `truncated=True` after `max_steps`
    steps (invalid ones count). Steps after the end return "Nothing happens." and reward 0.0.

    ## Arguments
    - `render_mode`: None or "ansi" (`render()` returns the current observation).
    - `split`: default split ("train" | "valid" | "test") when `reset` options name none.
    - `grammar`: "v0.4" (default, `move`, `help`) or "v0.3" (`put ... in/on ...`, "You arrive at loc N. ").
    - `strip_loc_prefix`: v0.3 only; drop "You arrive at loc N. " as ReAct does.
    - `max_steps`: step limit (50, ALFWorld's).
    - `task_types`: restrict the task types drawn when `reset` names none (default: all six, uniform).
    - `num_train_tasks`: train task ids drawn by `reset` without a task_id are in [0, num_train_tasks).
    - `expert`: add `info["expert_plan"]` (the oracle's remaining commands; for SFT data, never for RL).

    `reset(seed=..., options={"task_id": k, "task_type": t, "split": s})`: without task_id, k is drawn from
    `np_random`; the world is then generated from a seed derived from (split, k, task_type), so equal options give
    the same task in every process. Info keys (every step): admissible_commands, won, task_score, task_id,
    task_type, step, invalid_action (+ expert_plan).
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, render_mode: str | None = None, *, split: str = "train", grammar: str = "v0.4",
                 strip_loc_prefix: bool = False, max_steps: int = 50, task_types: list[str] | None = None,
                 num_train_tasks: int = 100_000, expert: bool = False) -> None:
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode={render_mode!r}: HouseholdEnv supports None or 'ansi'")
        if grammar not in ("v0.4", "v0.3"):
            raise ValueError(f"grammar={grammar!r}: use 'v0.4' (move/help) or 'v0.3' (put in/on)")
        if max_steps < 1:
            raise ValueError(f"max_steps={max_steps} must be >= 1")
        for t in task_types or ():
            if t not in TASK_TYPES:
                raise ValueError(f"task_types contains {t!r}; valid task types: {list(TASK_TYPES)}")
        self.render_mode = render_mode
        self.split = check_split(split)
        self.grammar = grammar
        self.strip_loc_prefix = strip_loc_prefix
        self.max_steps = max_steps
        self.task_types = tuple(task_types) if task_types else TASK_TYPES
        self.num_train_tasks = num_train_tasks
        self.expert = expert
        self.observation_space = spaces.Text(MAX_TEXT, min_length=0, charset=CHARSET)
        self.action_space = spaces.Text(MAX_TEXT, min_length=0, charset=CHARSET)
        self.world: World | None = None
        self._base: dict[str, tuple] = {}
        self._cmds: dict[str, tuple] = {}
        self._obs = ""
        self._task_id = ""
        self._steps = 0
        self._won = False
        self._plan: list[str] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = set(options) - _OPTION_KEYS
        if unknown:
            raise ValueError(f"unknown reset option(s) {sorted(unknown)}; HouseholdEnv accepts {sorted(_OPTION_KEYS)}")
        split = check_split(options.get("split", self.split))
        task_type = options.get("task_type")
        if task_type is not None and task_type not in TASK_TYPES:
            raise ValueError(f"options['task_type']={task_type!r}; valid task types: {list(TASK_TYPES)}")
        if "index" in options and "task_id" not in options:  # the global-index form every alprl env accepts
            options["task_id"] = task_id_of_index(split, options["index"])
        if "task_id" in options:
            index = global_index(split, options["task_id"])
        else:
            index = global_index(split, int(self.np_random.integers(split_size(split, self.num_train_tasks))))
        if task_type is None:
            # The type is part of the task, drawn from the task's own seed (uniform over self.task_types).
            task_type = self.task_types[derive_seed("household-type", index) % len(self.task_types)]
            self._task_id = f"{split}/{index - global_index(split, 0)}"
        else:
            self._task_id = f"{split}/{index - global_index(split, 0)}/{task_type}"
        rng = random.Random(derive_seed("household", index, task_type))
        self.world = generate(rng, task_type, self.grammar)
        self._base = base_commands(self.world)
        self._cmds = admissible(self.world, self._base)
        self._steps, self._won = 0, False
        self._plan = rollout_oracle(self.world.copy(), self.max_steps)[0] if self.expert else []
        self._obs = clip_text(f"-= Welcome to TextWorld, ALFRED! =-\n\n{self.world.middle_look}\n\n"
                              f"Your task is to: {self.world.goal.text}.")
        return self._obs, self._info(invalid=False)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self.world is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        over = self._won or self._steps >= self.max_steps
        self._steps += 1
        cmd = action.strip() if isinstance(action, str) else None
        op = None if over or cmd is None else self._cmds.get(cmd)
        reward = 0.0
        if op is None:
            self._obs = NOTHING
        else:
            self._obs = clip_text(execute(self.world, op, self.strip_loc_prefix))
            self._cmds = admissible(self.world, self._base)
            if goal_reached(self.world):
                self._won, reward = True, 1.0
            if self.expert:
                self._advance_plan(cmd)
        terminated = self._won
        truncated = not terminated and self._steps >= self.max_steps
        return self._obs, reward, terminated, truncated, self._info(invalid=op is None)

    def _advance_plan(self, cmd: str) -> None:
        # The oracle is a deterministic function of the state: after following its first command the rest of the
        # cached plan is exactly its rollout from the new state, so recompute only after a deviation.
        if self._plan and self._plan[0] == cmd:
            self._plan = self._plan[1:]
        else:
            self._plan = rollout_oracle(self.world.copy(), self.max_steps)[0]

    def _info(self, invalid: bool) -> dict[str, Any]:
        info: dict[str, Any] = {
            "admissible_commands": sorted(self._cmds),
            "won": self._won,
            "task_score": 1.0 if self._won else 0.0,
            "task_id": self._task_id,
            "task_type": self.world.goal.task_type,
            "step": self._steps,
            "invalid_action": invalid,
        }
        if self.expert:
            info["expert_plan"] = list(self._plan)
        return info

    def render(self) -> str:
        return self._obs

    def close(self) -> None:
        self.world = None
