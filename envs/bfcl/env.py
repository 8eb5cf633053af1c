"""`alprl/BFCL-v0`: the Berkeley Function Calling Leaderboard's multi-turn categories as a Gymnasium text env."""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym

from envs.splits import check_split, task_id_of_index
from envs.unicode_text import UnicodeText, utf8_clean

from .calls import call_string, parse_calls
from .data import CATEGORIES, check_category, entries, ground_truth, openai_tools
from .session import MAX_STEPS_PER_TURN, Session

MAX_TEXT = 65536
MAX_ACTION = 8192
"""A model turn's characters: function calls, far under a turn's token budget."""
TRUNC_MARKER = "\n[... truncated]"
ADDED_FUNCTIONS_MESSAGE = "I have updated some more functions you can choose from. What about now?"
"""The user message of a miss_func turn that adds the held-out functions (BFCL's
DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC)."""
_OPTION_KEYS = frozenset({"task_id", "index", "task_type", "split"})


class BFCLEnv(gym.Env[str, str]):
    """BFCL multi-turn: a user asks, over several turns, for tasks on simulated APIs (a file system, a trading bot,
    travel booking, messaging, ...); the model answers each turn with function calls, run on BFCL's simulators.

    ## Observation
    Text. After `reset`: the first user turn's message(s). After a step with calls: their results, one line each
    (`name(args) -> result`). After a step without calls (the model ends the user turn): the next user turn's
    message (miss_func's added-functions turn: BFCL's "I have updated some more functions ..." message).
    `info["messages"]` holds the same as chat messages for an agent to render (role "user", or role "tool" with
    the call's `name` and `tool_call_id` index), `info["tools"]` the OpenAI tool schemas offered now (changed at
    miss_func's added-functions turn: `info["tools_changed"]`).

    ## Action
    The model's turn as text (`UnicodeText(8192)`; a longer string is read all the same). Every `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` block is a call
    (hermes, the format of Qwen's chat templates); a turn with none ends the current user turn. Malformed blocks are
    reported in the observation and `info["invalid_calls"]`.

    ## Reward
    At the end of the episode, 1.0 if BFCL's multi-turn checker accepts the episode's calls (state and responses
    equal the ground truth's after every turn), else 0.0; `info["turn_verdicts"]` has the checker's verdict on
    each prefix of turns, `info["bfcl"]` its error type and message.

    ## Episode End
    `terminated=True` after the last user turn ends. `truncated=True` when a user turn takes more than
    `max_steps_per_turn` steps (BFCL force-quits the entry: it fails).

    ## Arguments
    - `categories`: BFCL categories drawn from (base, miss_func, miss_param, long_context; default all four).
    - `split`: default split. BFCL ships only an evaluation set, so every split holds the same entries: test ids
      0..N-1 over the categories in order (N = 200 a category, past the 500 ids of alprl's generated test splits);
      train and valid ids wrap around them (id mod N), for runs that fit the benchmark itself.
    - `max_steps_per_turn`: BFCL's step limit (20).
    - `observation`: "text" (above) or "messages": each observation is `info["messages"]` as JSON (the first one
      `{"tools": ..., "messages": ...}`), for an agent that renders them with a chat template
      (agents/formats/bfcl_agent.py); miss_func's added functions are then listed in that turn's user message (BFCL's
      prompting-mode message), so the conversation only grows.

    `reset(options={"task_id": k, "task_type": category, "split": s})`: entry k of the categories (of one category
    with `task_type`), drawn from `np_random` without task_id.
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, render_mode: str | None = None, *, categories: list[str] | None = None, split: str = "test",
                 max_steps_per_turn: int = MAX_STEPS_PER_TURN, observation: str = "text") -> None:
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode={render_mode!r}: BFCLEnv supports None or 'ansi'")
        if observation not in ("text", "messages"):
            raise ValueError(f"observation={observation!r}: use 'text' or 'messages'")
        self.observation = observation
        self.render_mode = render_mode
        self.categories = tuple(check_category(c) for c in (categories or CATEGORIES))
        self.split = check_split(split)
        self.max_steps_per_turn = max_steps_per_turn
        self.observation_space, self.action_space = UnicodeText(MAX_TEXT), UnicodeText(MAX_ACTION)
        self.session: Session | None = None
        self._obs = ""
        self._steps = 0

    def _pool(self, category: str | None) -> list[dict[str, Any]]:
        return [e for c in ((check_category(category),) if category else self.categories) for e in entries(c)]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = set(options) - _OPTION_KEYS
        if unknown:
            raise ValueError(f"unknown reset option(s) {sorted(unknown)}; BFCLEnv accepts {sorted(_OPTION_KEYS)}")
        split = check_split(options.get("split", self.split))
        pool = self._pool(options.get("task_type"))
        if "index" in options and "task_id" not in options:
            options["task_id"] = task_id_of_index(split, options["index"])
        task_id = int(options["task_id"]) if "task_id" in options else int(self.np_random.integers(len(pool)))
        if split != "test" and task_id >= 0:  # train and valid are open-ended: ids wrap around the entries
            task_id %= len(pool)
        if not 0 <= task_id < len(pool):
            raise ValueError(f"options['task_id']={task_id} is outside BFCL's {len(pool)} entries of "
                             f"{options.get('task_type') or ', '.join(self.categories)}")
        if self.session is not None:
            self.session.close()
        entry = json.loads(json.dumps(pool[task_id]))  # BFCL's loaders share the dicts: the episode gets its own
        self.session = Session(entry, ground_truth(entry["id"].rsplit("_", 1)[0][len("multi_turn_"):])[entry["id"]])
        self._functions = list(entry["function"])
        self._tools = openai_tools(self._functions)
        self._task_id = f"{split}/{task_id}"
        self._steps = 0
        messages = self._turn_messages()
        if self.observation == "messages":  # the opening: the tools too, so the first prompt needs no info
            self._set_obs([json.dumps({"tools": self._tools, "messages": messages})])
        else:
            self._set_obs([m["content"] for m in messages])
        return self._obs, self._info(messages, tools_changed=True)

    def _show(self, messages: list[dict[str, Any]], lines: list[str]) -> None:
        """The observation: `lines` as text, or the messages as JSON (`observation="messages"`, each content cut to
        its share of the observation's length, so the JSON stays whole)."""
        if self.observation == "messages":
            share = MAX_TEXT // max(1, len(messages)) - 200
            messages = [m | {"content": m["content"][:share]} for m in messages]
            lines = [json.dumps(messages)]
        self._set_obs(lines)

    def _set_obs(self, lines: list[str]) -> None:
        text = utf8_clean("\n".join(lines))
        self._obs = text if len(text) <= MAX_TEXT else text[: MAX_TEXT - len(TRUNC_MARKER)] + TRUNC_MARKER

    def _turn_messages(self) -> list[dict[str, Any]]:
        """The current user turn's messages, the held-out functions added first on miss_func's turn for them."""
        s = self.session
        added = s.entry.get("missed_function", {}).get(str(s.turn))
        if added:
            self._functions.extend(added)
            self._tools = openai_tools(self._functions)
            if self.observation == "messages":  # BFCL's prompting-mode message: the functions, then the line
                return [{"role": "user", "content": json.dumps(openai_tools(added)) + "\n" + ADDED_FUNCTIONS_MESSAGE}]
            return [{"role": "user", "content": ADDED_FUNCTIONS_MESSAGE}]
        return [dict(m) for m in s.entry["question"][s.turn]]

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        s = self.session
        if s is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        self._steps += 1
        if s.finished:  # steps after the end change nothing
            return self._obs, 0.0, True, False, self._info([], bad=[])
        calls, bad = parse_calls(utf8_clean(action) if isinstance(action, str) else "")
        if calls:
            strings = [call_string(name, args) for name, args in calls]
            results = s.execute(strings)
            messages = [{"role": "tool", "name": name, "tool_call_id": str(k), "content": result}
                        for k, ((name, _), result) in enumerate(zip(calls, results, strict=True))]
            lines = [f"{text} -> {result}" for text, result in zip(strings, results, strict=True)]
            self._show(messages, lines + [f"invalid tool call: {reason}" for reason in bad])
            if s.steps > self.max_steps_per_turn:
                s.force_quit = True
                return self._end(truncated=True, messages=messages, bad=bad)
            return self._obs, 0.0, False, False, self._info(messages, bad=bad)
        if not s.next_turn():
            return self._end(truncated=False, messages=[], bad=bad)
        tools_before = len(self._functions)
        messages = self._turn_messages()
        self._show(messages, [m["content"] for m in messages] + [f"invalid tool call: {r}" for r in bad])
        return self._obs, 0.0, False, False, self._info(messages, bad=bad,
                                                        tools_changed=len(self._functions) != tools_before)

    def _end(self, *, truncated: bool, messages: list[dict[str, Any]], bad: list[str]):
        s = self.session
        verdict = s.verdict()
        s.finished, s.won = True, bool(verdict["valid"])
        s.outcome = {"turn_verdicts": s.turn_verdicts(),
                     "bfcl": {k: verdict[k] for k in ("error_type", "error_message") if k in verdict}}
        s.close()  # the simulators' state is not needed past the verdict
        return self._obs, float(s.won), not truncated, truncated, self._info(messages, bad=bad)

    def _info(self, messages: list[dict[str, Any]], *, bad: list[str] = (), tools_changed: bool = False) -> dict:
        s = self.session
        return {"messages": messages, "tools": self._tools, "tools_changed": tools_changed,
                "invalid_calls": list(bad), "task_id": self._task_id, "task_type": s.category[len("multi_turn_"):],
                "entry_id": s.entry["id"], "turn": s.turn, "turns": len(s.entry["question"]),
                "admissible_commands": [], "won": s.won, "task_score": float(s.won), "step": self._steps,
                "invalid_action": bool(bad), **s.outcome}

    def render(self) -> str:
        return self._obs

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None
