"""`alprl/TIRMath-v0`: multi-turn math with a Python tool (reference/environments.md §0 and §1), on generated
problems, a dataset file's or reasoning-gym's (`envs/tir/problems.py`)."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from envs.tir.execution import EXEC_MODES, run_block
from envs.tir.expert import expert_code_turn
from envs.tir.problems import FULL_CREDIT, ProblemSource, score
from envs.tir.styles import get_style
from envs.tir.tasks import SPLIT_RANGES, TIRTask
from envs.tir_defaults import DEFAULT_DIFFICULTY, DEFAULT_MAX_TURNS, DEFAULT_SANDBOX_RETRY_S, DEFAULT_STYLE
from envs.unicode_text import UnicodeText, utf8_clean
from sandbox.client import make_runner
from sandbox.settings import DEFAULT_MEMORY_MB, RUN_TIMEOUT_S
from sandbox.types import CodeRunner, ExecutionResult

OBS_MAX_CHARS = 32768
ACTION_MAX_CHARS = 65536


def to_observation(text: str) -> str:
    """Keep an observation inside the observation space (`envs.unicode_text.UnicodeText`): its Unicode as it is
    (a lone surrogate, which no tokenizer takes, becomes U+FFFD), over-long text cut with a marker."""
    text = utf8_clean(text)
    if len(text) > OBS_MAX_CHARS:
        marker = "\n...(observation truncated)...\n"
        keep = (OBS_MAX_CHARS - len(marker)) // 2
        text = text[:keep] + marker + text[-keep:]
    return text


class TIRMathEnv(gym.Env):
    """Solve a math problem (generated, or a dataset file's), optionally running Python code through a sandbox.

    ## Observation
    `UnicodeText(32768)` (`envs/unicode_text.py`: any Unicode text). After `reset`: the problem text (e.g.
    "Compute 4821 * 937."); the agent adds the system prompt (`envs.tir.styles`) and chat template. After a code
    turn: the formatted execution result of the style (e.g. "\\nCode execution result: 4517277\\n"), its
    characters as the program printed them. After the last step: "".

    ## Action
    `UnicodeText(65536)`: the text of one assistant turn, which ends at the style's stop
    string when it calls the tool (hermes under a chat template with tool turns: at the template's end-of-turn
    token, which the decoded text leaves out; envs/tir/styles.py). Any `str` is accepted (other characters
    included); nothing raises.

    ## Reward
    On the step that gives an answer, its score (`envs.tir.problems.score`): 1.0 if it is correct (math-verify
    against the gold answer), else 0.0; on a reasoning-gym problem, its dataset's `score_answer` of the answer,
    partial credit included (in [0, 1]; `won` needs 1.0). Every other step 0.0.

    ## Episode End
    Terminated: the turn has a `\\boxed{` outside code (graded; that turn's code is not run); simpletir's
    `final_answer(x)` printed `\\boxed{x}` (graded from stdout); or a void turn (neither code nor answer:
    `info["void_turn"] = True`, reward 0). Truncated: `max_turns` turns without an answer, or (torl) a code
    turn after the tool-call budget is spent; reward 0.

    ## Info
    Every step: `admissible_commands` ([]), `won` (full credit), `task_score` (the answer's score: 0/1, or
    reasoning-gym's), `task_id`, `task_type`, `difficulty`,
    `step` (turns so far), `invalid_action` (void or after-end step), `void_turn`, `num_tool_calls`,
    `tool_statuses` (Success|Failed|TimeLimitExceeded|SandboxError per call), `sandbox_error` (this step's call
    came back SandboxError: the sandbox could not run it, which says nothing about the policy; the rollout ends
    and masks such an episode, agents/rollout.py),
    `extracted_answer` (the policy's last boxed answer, "" if none); `replay_failed` in replay mode;
    `expert_plan` (the code turn of the scripted solver; [] for a dataset problem, which has none) when
    `expert=True`. The gold answer never appears. A dataset problem's `task_type` is its source (benchmark,
    data_source, or reasoning-gym dataset name) and its `difficulty` 0.

    ## Arguments
    The defaults are the run config's (`envs/tir_defaults.py` and `sandbox.settings` write them for both), so
    `gym.make("alprl/TIRMath-v0")` plays the episode `alprl train` plays.
    - `style`: "simpletir" (default) | "torl" | "hermes" (code format, observation, truncation, stop strings).
    - `split`: "train" | "valid" | "test": where `reset()` draws tasks (options may override).
    - `max_turns`: assistant turns per episode (SimpleTIR: 5 train, 10 eval).
    - `runner`: a `sandbox.types.CodeRunner`; None builds one with `sandbox.client.make_runner(sandbox_url)`.
    - `sandbox_url`: None = in-process `LocalExecutor`, else the HTTP sandbox.
    - `sandbox_retry_s`: seconds an HTTP tool call retries infrastructure errors across the URLs before its
      result is a SandboxError (None: the client's own 5 tries).
    - `exec_mode`: "stateless" (fresh process per block) | "replay" (earlier successful blocks re-run first).
    - `run_timeout_s`, `memory_limit_mb`: per-call sandbox limits (SimpleTIR: 3 s, 1024 MB; `sandbox.settings`).
    - `difficulty`: 1 | 2 | 3 | None (all); `task_types`: subset of `envs.tir.tasks.GENERATORS` or None
      (the default mix, `TASK_TYPES`); both filter generated problems only.
    - `dataset`, `eval_dataset`, `dataset_format`, `dataset_split_field`, `dataset_fields`: serve splits from
      local math files instead of the generator (`envs/tir/problems.py` says which file serves which split);
      `dataset` / `eval_dataset` may be `reasoning_gym:<name>,...` instead, drawn as `reasoning_gym` says (size,
      eval_size, seed, config: `envs/datasets/reasoning_gym.py`). The model may run code before it answers.
    - `expert`: put the scripted solver's code turn in `info["expert_plan"]` (SFT/debugging, never during RL).
    - `render_mode`: None | "ansi" (`render()` returns the current observation).

    Reset options: `split`, `index` (generated split: the global task index, e.g. test 0-499; a split served
    from a file: the problem's position in it, 0..size-1), `task_id` (as in `info["task_id"]`), `task_type`
    (restrict this reset to one type). Same seed and options => same task, obs and info.
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, style: str = DEFAULT_STYLE, split: str = "train", max_turns: int = DEFAULT_MAX_TURNS,
                 runner: CodeRunner | None = None, sandbox_url: str | None = None, exec_mode: str = "stateless",
                 sandbox_retry_s: float | None = DEFAULT_SANDBOX_RETRY_S,
                 run_timeout_s: float = RUN_TIMEOUT_S, memory_limit_mb: int = DEFAULT_MEMORY_MB,
                 difficulty: int | None = DEFAULT_DIFFICULTY,
                 task_types: Sequence[str] | None = None, expert: bool = False, render_mode: str | None = None,
                 dataset: str = "", eval_dataset: str = "", dataset_format: str = "", dataset_split_field: str = "",
                 dataset_fields: dict[str, str] | None = None, reasoning_gym: dict[str, Any] | None = None):
        self.style = get_style(style)
        _check_choice("split", split, SPLIT_RANGES)
        _check_choice("exec_mode", exec_mode, EXEC_MODES)
        _check_choice("render_mode", render_mode, [None, *self.metadata["render_modes"]])
        if not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns must be a positive int, got {max_turns!r}")
        if not run_timeout_s > 0 or not memory_limit_mb > 0:
            raise ValueError(f"run_timeout_s and memory_limit_mb must be > 0, got {run_timeout_s!r}, "
                             f"{memory_limit_mb!r}")
        self.task_types = tuple(task_types) if task_types else None
        self.problems = ProblemSource(dataset=dataset, eval_dataset=eval_dataset, dataset_format=dataset_format,
                                      dataset_split_field=dataset_split_field, dataset_fields=dataset_fields,
                                      reasoning_gym=reasoning_gym, difficulty=difficulty,
                                      task_types=self.task_types)
        self.split, self.max_turns, self.exec_mode = split, max_turns, exec_mode
        self.run_timeout_s, self.memory_limit_mb = float(run_timeout_s), int(memory_limit_mb)
        self.difficulty, self.expert, self.render_mode = difficulty, bool(expert), render_mode
        self.observation_space = UnicodeText(OBS_MAX_CHARS)
        self.action_space = UnicodeText(ACTION_MAX_CHARS)
        self._owns_runner = runner is None
        self._runner: CodeRunner | None = runner if runner is not None else \
            make_runner(sandbox_url, retry_s=sandbox_retry_s)
        self._task: TIRTask | None = None
        self._start_episode(None)

    # ------------------------------------------------------------------ gymnasium API

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        task = self._pick_task(dict(options or {}))
        self._start_episode(task)
        self._obs = to_observation(task.question)
        return self._obs, self._info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self._task is None:
            raise RuntimeError("TIRMathEnv.step() called before reset(); call reset() first")
        if self._done:  # stepping a finished episode: a no-op, never an error
            return self._obs, 0.0, self._terminated, self._truncated, self._info(invalid=True)
        text = action if isinstance(action, str) else str(action)
        self._turn += 1
        parsed = self.style.parse_turn(text)
        if parsed.answered:
            return self._finish(parsed.answer, obs="")
        if parsed.code is None:  # void turn: neither code nor answer
            self._terminated, self._done, self._obs = True, True, ""
            return self._obs, 0.0, True, False, self._info(invalid=True, void=True)
        budget = self.style.max_tool_calls
        if budget is not None and self._num_tool_calls >= budget:
            self._truncated, self._done, self._obs = True, True, ""
            return self._obs, 0.0, False, True, self._info(invalid=True)
        result, sandbox_error = self._run(parsed.code)
        obs = to_observation(self.style.format_observation(result, text))
        answered, answer = self.style.stdout_answer(result)
        if answered:
            return self._finish(answer, obs=obs, sandbox_error=sandbox_error)
        self._obs = obs
        if self._turn >= self.max_turns:
            self._truncated, self._done = True, True
        return obs, 0.0, False, self._truncated, self._info(sandbox_error=sandbox_error)

    def render(self) -> str:
        return self._obs

    def close(self) -> None:
        if self._owns_runner and self._runner is not None:
            self._runner.close()
        self._runner = None

    # ------------------------------------------------------------------ internals

    def _pick_task(self, options: dict[str, Any]) -> TIRTask:
        """The task of this reset: from `task_id`, from `index`, or drawn from `np_random`."""
        return self.problems.pick(options, self.split, self.np_random)

    def _start_episode(self, task: TIRTask | None) -> None:
        self._task = task
        self._obs = ""
        self._turn = self._num_tool_calls = 0
        self._statuses: list[str] = []
        self._history: list[str] = []  # prepared blocks that succeeded (replay mode)
        self._won = self._terminated = self._truncated = self._done = self._replay_failed = False
        self._answer, self._score = "", 0.0

    def _run(self, code: str) -> tuple[ExecutionResult, bool]:
        """Run the turn's code in the configured mode; returns (ExecutionResult, sandbox_error)."""
        block = self.style.prepare_code(code)
        if self._runner is None:
            result, failed = ExecutionResult("SandboxError", stderr="the env is closed; reset() a new env"), False
        else:
            seed = zlib.crc32(self._task.task_id.encode())
            result, failed = run_block(self._runner, block, self._history, mode=self.exec_mode, seed=seed,
                                       timeout_s=self.run_timeout_s, memory_limit_mb=self.memory_limit_mb)
        self._num_tool_calls += 1
        self._statuses.append(result.status)
        self._replay_failed = self._replay_failed or failed
        if result.status == "Success":
            self._history.append(block)
        return result, result.status == "SandboxError"

    def _finish(self, answer: str | None, *, obs: str, sandbox_error: bool = False) -> tuple:
        self._answer = answer or ""
        self._score = score(self._task, answer)
        self._won = self._score >= FULL_CREDIT
        self._terminated, self._done, self._obs = True, True, obs
        return obs, self._score, True, False, self._info(sandbox_error=sandbox_error)

    def _info(self, *, invalid: bool = False, void: bool = False, sandbox_error: bool = False) -> dict:
        task = self._task
        info = {"admissible_commands": [], "won": bool(self._won), "task_score": self._score,
                "task_id": task.task_id, "task_type": task.task_type, "difficulty": task.difficulty,
                "step": self._turn, "invalid_action": bool(invalid), "void_turn": bool(void),
                "num_tool_calls": self._num_tool_calls, "tool_statuses": list(self._statuses),
                "sandbox_error": bool(sandbox_error), "extracted_answer": self._answer}
        if self.exec_mode == "replay":
            info["replay_failed"] = bool(self._replay_failed)
        if self.expert:
            info["expert_plan"] = [expert_code_turn(task, self.style.name)] if task.solution_code else []
        return info


def _check_choice(name: str, value: Any, valid: Sequence[Any] | dict) -> None:
    if value not in valid:
        raise ValueError(f"TIRMathEnv: unknown {name} {value!r}; valid: {', '.join(map(repr, valid))}")

