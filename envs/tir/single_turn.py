"""`alprl/Math-v0`: a math problem answered in one assistant turn, without a tool.

The single-turn setting of the ALP paper's Table 1 (and of Qwen2.5-Math's chain-of-thought evaluation): the
system prompt `envs.tir.styles.SINGLE_TURN_SYSTEM_PROMPT` asks for step-by-step reasoning and a final
`\\boxed{}` answer, the model writes one reply, and the reply's last complete box is graded. Problems come from
the same `ProblemSource` as `alprl/TIRMath-v0` (generated, dataset files or reasoning-gym datasets, with the same
options and index rules), so the same tasks can be evaluated with and without the tool.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from envs.boxed import extract_boxed
from envs.tir.env import ACTION_MAX_CHARS, OBS_MAX_CHARS, to_observation
from envs.tir.problems import FULL_CREDIT, ProblemSource, score
from envs.tir.tasks import SPLIT_RANGES, TIRTask
from envs.tir_defaults import DEFAULT_DIFFICULTY
from envs.unicode_text import UnicodeText


class MathEnv(gym.Env):
    """Answer a math problem (generated, or a dataset file's) in one turn; no tool, no stop strings.

    ## Observation
    `UnicodeText(32768)` (any Unicode text), as `TIRMathEnv`'s. After `reset`:
    the problem text; the agent adds the system prompt and the chat template. After the step: "".

    ## Action
    `UnicodeText(65536)`: the whole reply. Any `str` is accepted; nothing raises.

    ## Reward
    The score of the reply's last complete `\\boxed{}` answer (`envs.tir.problems.score`): 1.0 if it grades
    correct (`envs.tir.grading.grade`: math-verify against the gold answer, bounded in time per answer, so an
    adversarial answer scores 0), else 0.0; on a reasoning-gym problem, its dataset's `score_answer` of the boxed
    text, partial credit included (in [0, 1]; `won` needs 1.0).

    ## Episode End
    Terminated after the one step, answered or not. A reply without a complete box is a wrong answer (reward 0),
    not a void turn: masking it would hide exactly the replies that must learn to box their answer.

    ## Info
    Every step: `admissible_commands` ([]), `won` (full credit), `task_score` (the reward: 0/1, or a
    reasoning-gym score), `task_id`, `task_type`, `difficulty`,
    `step` (0 or 1), `invalid_action` (a step after the end), `void_turn` (False), `num_tool_calls` (0),
    `tool_statuses` ([]), `sandbox_error` (False), `extracted_answer` (the boxed answer, "" if none): the keys of
    `TIRMathEnv`, so evaluation reads both alike. The gold answer never appears.

    ## Arguments
    - `split`: "train" | "valid" | "test": where `reset()` draws tasks (options may override).
    - `difficulty`, `task_types`: filters of generated problems, as `TIRMathEnv`'s (its default level too).
    - `dataset`, `eval_dataset`, `dataset_format`, `dataset_split_field`, `dataset_fields`: problems from local
      files (`envs/tir/problems.py`); `dataset` / `eval_dataset` may be `reasoning_gym:<name>,...` instead, drawn
      as `reasoning_gym` says (size, eval_size, seed, config: `envs/datasets/reasoning_gym.py`).
    - `render_mode`: None | "ansi" (`render()` returns the current observation).

    Reset options: `split`, `index` (generated: global index; from a file: position), `task_id`, `task_type`, as
    `TIRMathEnv`'s. Same seed and options => same task, obs and info.
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, split: str = "train", difficulty: int | None = DEFAULT_DIFFICULTY,
                 task_types: Sequence[str] | None = None,
                 dataset: str = "", eval_dataset: str = "", dataset_format: str = "", dataset_split_field: str = "",
                 dataset_fields: dict[str, str] | None = None, reasoning_gym: dict[str, Any] | None = None,
                 render_mode: str | None = None):
        for name, value, valid in (("split", split, list(SPLIT_RANGES)),
                                   ("render_mode", render_mode, [None, *self.metadata["render_modes"]])):
            if value not in valid:
                raise ValueError(f"MathEnv: unknown {name} {value!r}; valid: {', '.join(map(repr, valid))}")
        self.split, self.render_mode = split, render_mode
        self.problems = ProblemSource(dataset=dataset, eval_dataset=eval_dataset, dataset_format=dataset_format,
                                      dataset_split_field=dataset_split_field, dataset_fields=dataset_fields,
                                      reasoning_gym=reasoning_gym, difficulty=difficulty, task_types=task_types)
        self.observation_space = UnicodeText(OBS_MAX_CHARS)
        self.action_space = UnicodeText(ACTION_MAX_CHARS)
        self._task: TIRTask | None = None
        self._obs, self._answer, self._step, self._score, self._won, self._done = "", "", 0, 0.0, False, False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        self._task = self.problems.pick(dict(options or {}), self.split, self.np_random)
        self._obs = to_observation(self._task.question)
        self._answer, self._step, self._score, self._won, self._done = "", 0, 0.0, False, False
        return self._obs, self._info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self._task is None:
            raise RuntimeError("MathEnv.step() called before reset(); call reset() first")
        if self._done:  # stepping a finished episode: a no-op, never an error
            return self._obs, 0.0, True, False, self._info(invalid=True)
        text = action if isinstance(action, str) else str(action)
        answer = extract_boxed(text)
        self._answer = answer or ""
        self._score = score(self._task, answer)
        self._won = self._score >= FULL_CREDIT
        self._step, self._done, self._obs = 1, True, ""
        return self._obs, self._score, True, False, self._info()

    def render(self) -> str:
        return self._obs

    def _info(self, *, invalid: bool = False) -> dict:
        task = self._task
        return {"admissible_commands": [], "won": bool(self._won), "task_score": self._score,
                "task_id": task.task_id, "task_type": task.task_type, "difficulty": task.difficulty,
                "step": self._step, "invalid_action": bool(invalid), "void_turn": False, "num_tool_calls": 0,
                "tool_statuses": [], "sandbox_error": False, "extracted_answer": self._answer}
