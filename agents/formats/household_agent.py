"""Household (ALFWorld-style) agent formatting, and the command-line format it shares with the WebShop agent and
the plain agent of alprl/OpenEnv-v0 (`OpenEnvAgent`: any OpenEnv server, nothing specific to one environment).

Format (ReAct's ALFWorld transcripts, reference/environments.md §4, kept short for tiny models): like the TIR agent,
the whole episode is ONE assistant message. The system prompt states the rules; the user message is the task (for
the household: the env's first observation without the TextWorld banner). The assistant message opens with "> ";
each turn is one command that ends with a newline (the stop string), and the env's answer is appended as plain
tokens, "{observation}\\n> ", so the model continues with the next command:

    <|im_start|>system\\n{rules}<|im_end|>\\n<|im_start|>user\\n{room}\\n\\nYour task is to: {goal}.<|im_end|>\\n
    <|im_start|>assistant\\n> go to countertop 1\\nOn the countertop 1, you see a apple 1.\\n> take apple 1 from ...

The action sent to the env is the first line of the sampled text, stripped (a leading "> " too); anything that
is not an admissible command gets the env's "Nothing happens." and still costs a step.

Each step also restates the task and lists admissible commands, short, as verl-agent's per-step prompt does.
The Agent protocol hands the agent only observation text, so the `StepContext` wrapper (applied by
`agents.env_families`' household wrapper) writes them under the env's feedback (cut at `MAX_FEEDBACK_CHARS`):

    You arrive at sofa 1. On the sofa 1, you see a basketball 1, and a pillow 2.
    Actions: take basketball 1 from sofa 1
    Not visited: armchair 1, cabinet 1-3, drawer 2
    Task: examine the basketball with the desklamp.

"Actions" lists only the admissible commands that serve the goal as far as their text tells (`serves_goal`: the
goal names the object to take, or every receptacle, lamp and object the command names; `open` always), read off
the goal sentence and the env's admissible list, no hidden state. `go to`, `examine`, `look`, `inventory` and
`help` are left out (verl-agent drops `help` too). "Not visited" names the receptacles the episode has not gone
to yet, in (type, index) order with index ranges ("cabinet 1-3"): the wrapper's memory of its successful `go to`
commands (a ReAct agent keeps it in its thoughts). Both sit right before the next command, so a tiny model
decides "take what is listed, else search the next unvisited receptacle" at a fixed distance instead of matching
the goal against every object in view and attending hundreds of tokens back to the room description. The
unfiltered list made the 0.86 M SFT model "take" goal objects that were not there.

Departures from verl-agent's ALFWorld prompt: no <think>/<action> tags, the goal-filtered admissible list, and no
history window (the whole episode stays in context, as in ReAct).
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym
from transformers import PreTrainedTokenizerBase

from agents.control_tokens import chat_prompt_ids, encode_text, end_of_turn_ids
from agents.trajectory import ANCHOR_OBS_KEY

PROMPT = "> "
"""Opens every command line: ends the prompt and every appended observation."""
STOP = "\n"
"""A command ends at the first newline (the engine keeps the stop string in the turn)."""
CUT_MARKER = " ..."
MAX_FEEDBACK_CHARS = 400
"""The env's feedback is cut here (e.g. `help`'s 870-character list) before the task and hints are added."""
HOUSEHOLD_SYSTEM_PROMPT = ("Interact with a household to solve a task. "
                           "Reply with one command per line, such as: go to desk 1")
BANNER = "-= Welcome to TextWorld, ALFRED! =-"


class CommandLineAgent:
    """One command per line; observations appended as "{view}\\n> ". Subclasses say what the model sees."""

    system_prompt = ""
    max_obs_chars = 1200
    """Observations are cut here, on text, so SFT data and rollouts show the model the same thing."""
    format_version = 1
    """Bump when the text the model sees or writes changes: SFT caches built with another version are rebuilt."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase):
        self.tokenizer = tokenizer

    def task_text(self, first_obs: str) -> str:
        """The user message built from the env's first observation."""
        return first_obs

    def view(self, obs: str) -> str:
        """The observation text the model sees (before the length cap)."""
        return obs

    def messages(self, first_obs: str) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system_prompt},
                {"role": "user", "content": self.task_text(first_obs)}]

    def stop_strings(self, num_tool_calls: int) -> list[str]:
        """Every turn is one command line, however many turns came before."""
        return [STOP]

    def end_of_turn_ids(self) -> list[int]:
        """eos and the chat template's end-of-turn token: they close the one assistant message of the episode."""
        return end_of_turn_ids(self.tokenizer)

    def ended_turn_action(self, text: str) -> str | None:
        """None: a command that closed the message is not run (commands end at their line break; the env runs each
        command as a tool call), so the episode ends there."""
        return None

    def prompt_ids(self, first_obs: str, info: dict[str, Any]) -> list[int]:
        """Chat prompt + the opening "> " of the assistant message (tokenized separately, like every piece)."""
        return chat_prompt_ids(self.tokenizer, self.messages(first_obs)) + \
            self.tokenizer.encode(PROMPT, add_special_tokens=False)

    def observation_text(self, obs: str) -> str:
        """What follows a command: the capped view, then the next "> "."""
        return cut(self.view(obs), self.max_obs_chars) + STOP + PROMPT

    def observation_ids(self, obs: str) -> list[int]:
        return encode_text(self.tokenizer, self.observation_text(obs))

    def turn_ids(self, text: str) -> list[int]:
        """Token ids of an expert-written turn (SFT data); RL never re-encodes sampled text."""
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, token_ids: list[int]) -> str:
        """The command in a sampled turn: its first line, stripped (a repeated "> " dropped)."""
        return parse_command(self.tokenizer.decode(token_ids, skip_special_tokens=True))


def command_turn(command: str) -> str:
    """The assistant turn that issues `command`, exactly as the model should write it (SFT data)."""
    if not command.strip() or STOP in command:
        raise ValueError(f"command_turn: a command is one non-empty line, got {command!r}")
    return command + STOP


def parse_command(text: str) -> str:
    """First line of `text`, stripped, without a leading ">" (models sometimes repeat the line opener)."""
    line = text.strip().split(STOP, 1)[0].strip()
    return line[1:].strip() if line.startswith(">") else line


OPENENV_SYSTEM_PROMPT = "Interact with the environment to complete its task. Reply with one action per line."


class OpenEnvAgent(CommandLineAgent):
    """alprl/OpenEnv-v0's agent: the first observation as the user message, each later one as the env wrote it,
    one action per line (which suits OpenEnv's text games and command envs; multi-line actions need their own)."""

    system_prompt = OPENENV_SYSTEM_PROMPT
    max_obs_chars = 2000  # cut on text, as for the household; the rollout's max_obs_tokens cuts tokens after


class HouseholdAgent(CommandLineAgent):
    """ALFWorld-style household: the room and goal as the task, the env's feedback as observations."""

    system_prompt = HOUSEHOLD_SYSTEM_PROMPT
    max_obs_chars = 1200  # a safety cap: StepContext already cuts the env's feedback
    format_version = 2  # 2: StepContext's "Not visited" line and goal-filtered "Actions"; bump on any change there

    def task_text(self, first_obs: str) -> str:
        """The first observation without the TextWorld banner (consumers usually drop it, §2.3)."""
        text = first_obs.strip()
        if text.startswith(BANNER):
            text = text[len(BANNER):].strip()
        return text


TASK_PREFIX = "\nTask: "
HINT_PREFIX = "\nActions: "
UNVISITED_PREFIX = "\nNot visited: "
GO_TO = "go to "
_UNHINTED_PREFIXES = (GO_TO, "examine ")
_UNHINTED = frozenset({"look", "inventory", "help"})
_GOAL_MARK = "Your task is to: "


_NAMED = re.compile(r"([a-z]+) \d+")  # "apple 1" in a command: a type followed by its index
_FIRST_NAME_DECIDES = ("take ", "clean ", "heat ", "cool ", "slice ")  # "take X from Y": only X matters


def goal_words(goal: str) -> frozenset[str]:
    """The words of a goal sentence ("put a clean apple in fridge" → {put, a, clean, apple, in, fridge})."""
    return frozenset(re.findall(r"[a-z]+", goal.lower()))


def serves_goal(command: str, goal: frozenset[str]) -> bool:
    """Whether an admissible command acts toward the goal as far as its text tells: `open` always (a closed
    receptacle may hide the object); `take`/`clean`/`heat`/`cool`/`slice` when their object's type is in the goal;
    any other command when every type it names is in the goal ("move apple 1 to fridge 1", "use desklamp 1")."""
    if command.startswith("open "):
        return True
    names = _NAMED.findall(command)
    if command.startswith(_FIRST_NAME_DECIDES):
        names = names[:1]
    return bool(names) and all(name in goal for name in names)


def action_hints(commands: list[str], goal: frozenset[str] | None = None) -> str:
    """The short admissible list appended to an observation ("" when nothing acts on what is here); with `goal`
    (its words), only the commands that serve it."""
    shown = [c for c in commands if c not in _UNHINTED and not c.startswith(_UNHINTED_PREFIXES)
             and (goal is None or serves_goal(c, goal))]
    return HINT_PREFIX + ", ".join(shown) if shown else ""


def cut(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, ending with a marker when cut (deterministic)."""
    return text if len(text) <= limit else text[: limit - len(CUT_MARKER)] + CUT_MARKER


def receptacle_order(name: str) -> tuple[str, int]:
    """Sort key (type, index) of a receptacle name such as "cabinet 12" (a name without an index sorts first)."""
    kind, _, index = name.rpartition(" ")
    return (kind, int(index)) if kind and index.isdigit() else (name, 0)


def unvisited_line(receptacles: list[str]) -> str:
    """The "Not visited" line for receptacles in (type, index) order, consecutive indices of a type written as a
    range ("cabinet 2-5", so a kitchen's list stays short); "" once every receptacle was gone to."""
    runs: list[list] = []  # [type, first index, last index]
    for name in receptacles:
        kind, index = receptacle_order(name)
        if runs and runs[-1][0] == kind and runs[-1][2] + 1 == index and index > 0:
            runs[-1][2] = index
        else:
            runs.append([kind, index, index])
    parts = [kind if index == 0 else f"{kind} {index}" if last == index else f"{kind} {index}-{last}"
             for kind, index, last in runs]
    return UNVISITED_PREFIX + ", ".join(parts) if parts else ""


class StepContext(gym.Wrapper):
    """Household steps answer "{feedback}\\nActions: {hints}\\nNot visited: {receptacles}\\nTask: {goal}" (see the
    module docstring); the reset observation is the env's own (the agent turns it into the user message)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self._task = ""
        self._goal: frozenset[str] = frozenset()
        self._unvisited: list[str] = []

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._task = obs.rsplit(_GOAL_MARK, 1)[-1].strip() if _GOAL_MARK in obs else ""
        self._goal = goal_words(self._task)
        # Every receptacle of the room has a `go to` command at the start (ALFWorld lists them all).
        names = {c[len(GO_TO):] for c in info.get("admissible_commands", ()) if c.startswith(GO_TO)}
        self._unvisited = sorted(names, key=receptacle_order)
        return obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        command = info.get("projected_action", action.strip() if isinstance(action, str) else "")
        if command.startswith(GO_TO) and not info.get("invalid_action", False):
            target = command[len(GO_TO):]
            self._unvisited = [r for r in self._unvisited if r != target]
        task = TASK_PREFIX + self._task if self._task else ""
        # GiGPO's anchor state is the env's own feedback, as verl-agent keys it: the hint and "Not visited" lines are
        # agent context (two episodes at the same place with different histories share the state)
        info = {**info, ANCHOR_OBS_KEY: obs}
        obs = (cut(obs, MAX_FEEDBACK_CHARS) + action_hints(info["admissible_commands"], self._goal)
               + unvisited_line(self._unvisited) + task)
        return obs, reward, terminated, truncated, info
