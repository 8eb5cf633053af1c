"""Action projection for text envs with an admissible set (household, WebShop): the model's command is checked
against `info["admissible_commands"]` before the env runs it, optionally mapped onto the nearest admissible command,
and commands that were not admissible as written can cost a reward penalty.

verl-agent calls this step "projection" (text → env action, with `invalid_action_penalty_coef`); mapping free text
onto the most similar admissible action is the "admissible action translation" of Huang et al. 2022 (Language
Models as Zero-Shot Planners), here with string similarity (rapidfuzz's normalized Indel ratio) instead of an
embedding model, since nothing can be downloaded.

Modes (`env.action_projection`):
- `exact`: the command runs as written; the env answers anything inadmissible ("Nothing happens.").
- `nearest`: a command that is not admissible runs as the most similar admissible command when their similarity
  is at least `env.projection_min_similarity` (0-1), else as written.

An admissible entry with a `<...>` slot (WebShop's "search[<your query>]") accepts any non-empty text in the slot.
Matching ignores case (WebShop lower-cases its click arguments; the model copies buttons as the page shows them).

Every step reports `info["action_valid"]` (the command was admissible as written) and, when a command was mapped,
`info["projected_action"]`. At the episode's last step the reward is lowered by `env.invalid_action_penalty` per
invalid command of the episode; `info["invalid_actions"]` counts them. `won` is untouched.
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym
from rapidfuzz import fuzz, process

PROJECTIONS = ("exact", "nearest")
_SLOT = re.compile(r"<[^<>]*>")  # "<your query>" in "search[<your query>]"


def _template(command: str) -> re.Pattern | None:
    """The pattern an admissible entry with `<...>` slots accepts ("search[<your query>]" → `search\\[.+\\]`);
    None for a literal command."""
    if not _SLOT.search(command):
        return None
    parts = _SLOT.split(command.lower())
    return re.compile(".+".join(re.escape(p) for p in parts), re.DOTALL)


def project(command: str, admissible: list[str], mode: str = "exact",
            min_similarity: float = 0.9) -> tuple[str, bool]:
    """(command to run, admissible as written) for the model's `command` (already stripped)."""
    lowered = command.lower()
    literal: list[str] = []
    for entry in admissible:
        template = _template(entry)
        if template is None:
            literal.append(entry)
        elif template.fullmatch(lowered):
            return command, True
    choices = [a.lower() for a in literal]
    if lowered in choices:
        return command, True
    if mode == "nearest" and command and literal:
        best = process.extractOne(lowered, choices, scorer=fuzz.ratio, score_cutoff=100 * min_similarity)
        if best is not None:
            return literal[best[2]], False
    return command, False


class ActionProjection(gym.Wrapper):
    """Projects each step's command onto the admissible set and applies the invalid-action penalty."""

    def __init__(self, env: gym.Env, mode: str = "exact", min_similarity: float = 0.9, penalty: float = 0.0):
        super().__init__(env)
        if mode not in PROJECTIONS:
            raise ValueError(f"env.action_projection={mode!r}: valid choices are {', '.join(PROJECTIONS)}")
        if not 0.0 <= min_similarity <= 1.0:
            raise ValueError(f"env.projection_min_similarity={min_similarity}: use a similarity in [0, 1]")
        if penalty < 0:
            raise ValueError(f"env.invalid_action_penalty={penalty}: use a penalty >= 0 (it is subtracted)")
        self.mode, self.min_similarity, self.penalty = mode, min_similarity, penalty
        self._admissible: list[str] = []
        self._invalid = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._admissible = list(info.get("admissible_commands", []))
        self._invalid = 0
        return obs, info

    def step(self, action: str) -> tuple[Any, float, bool, bool, dict]:
        command = action.strip() if isinstance(action, str) else ""
        target, valid = project(command, self._admissible, self.mode, self.min_similarity)
        obs, reward, terminated, truncated, info = self.env.step(target if target != command else action)
        self._invalid += not valid
        self._admissible = list(info.get("admissible_commands", []))
        info = {**info, "action_valid": valid, "invalid_actions": self._invalid}
        if target != command:
            info["projected_action"] = target
        if (terminated or truncated) and self.penalty:
            reward = float(reward) - self.penalty * self._invalid
        return obs, reward, terminated, truncated, info
