"""The one table of env families: for each alprl env id, its CLI alias, agent, wrapper, system prompt,
constructor arguments, SFT expert, whether it has admissible commands (action projection) and whether it serves
dataset files (`env.dataset`); and `problem_count`, the size of a configured env's split.

Every caller — rollouts, evaluation, SFT, `alprl robustness`, config validation — looks an env up here; a new
env is one more `EnvEntry`. Adapters to the real environments (ALFWorld, a WebShop server) share their
generated twin's agent, wrapper and prompt, so a model trained on the twin runs on them unchanged; they have
no SFT expert (the twin's episodes are the warm start). `alprl/OpenEnv-v0` (any OpenEnv server) has no twin:
a plain one-action-per-line agent plays it, and RL starts from a model (`model.path`).

`env_cfg` below is the run config's `env` section (`trainer.config.train_config.EnvConfig`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
from transformers import PreTrainedTokenizerBase

from agents.experts import (
    ExpertPlayer,
    play_bfcl_expert,
    play_household_expert,
    play_math_expert,
    play_tir_expert,
    play_webshop_expert,
)
from agents.formats.bfcl_agent import BFCL_SYSTEM_PROMPT, BFCLAgent
from agents.formats.household_agent import (
    HOUSEHOLD_SYSTEM_PROMPT,
    OPENENV_SYSTEM_PROMPT,
    HouseholdAgent,
    OpenEnvAgent,
    StepContext,
)
from agents.formats.tir_agent import SingleTurnMathAgent, TIRAgent
from agents.formats.webshop_agent import WEBSHOP_SYSTEM_PROMPT, WebShopAgent
from agents.projection import ActionProjection
from agents.rollout import Agent
from agents.templates.check import strip_refusal
from envs import ADAPTER_TWINS  # (importing envs registers the alprl/* environments)
from envs.adapters.alfworld import TASK_TYPES as ALFWORLD_TASK_TYPES
from envs.bfcl.data import CATEGORIES as BFCL_CATEGORIES
from envs.bfcl.data import entries as bfcl_entries
from envs.household import TASK_TYPES as HOUSEHOLD_TASK_TYPES
from envs.splits import SPLIT_SIZES, check_split
from envs.tir.problems import ProblemSource
from envs.tir.styles import SINGLE_TURN_SYSTEM_PROMPT, STYLES, get_style
from envs.tir.tasks import GENERATORS as TIR_TASK_TYPES
from envs.tir_defaults import DEFAULT_STYLE


def _step_limit(e: Any) -> dict:
    return {"max_steps": e.max_steps} if e.max_steps else {}


@dataclass(frozen=True)
class EnvEntry:
    env_id: str
    alias: str
    """Short name on the command line (`alprl robustness --env household`)."""
    agent_class: type
    """Formats episodes of this env for the model and parses its replies (an `agents.rollout.Agent`)."""
    env_kwargs: Callable[[Any], dict]
    """env_cfg → `gym.make` keyword arguments (each env takes the keys it knows)."""
    system_prompt: Callable[[str], str]
    """TIR style → the system prompt text the agent uses (part of the SFT tokenizer corpus)."""
    styled: bool = False
    """The env and its agent take a TIR style (`env.style`)."""
    admissible_commands: bool = False
    """The env lists admissible commands, so a reply can be projected onto them (`env.action_projection`)."""
    wrap: Callable[[gym.Env], gym.Env] = lambda env: env
    """The env as its agent needs it (household steps restate the task and list the admissible commands)."""
    expert: ExpertPlayer | None = None
    """The imperfect SFT expert; None for adapters (warm-start on the twin)."""
    task_types: tuple[str, ...] = ()
    """Task types `env.task_types` may restrict the env to; empty: the env has none."""
    datasets: bool = False
    """The env serves math problems from files (`env.dataset`, `env.eval_dataset`; `envs/tir/problems.py`)."""
    multi_turn: bool = True
    """An episode can take several turns (step-level advantages such as GiGPO's need more than one step)."""
    test_size: Callable[[Any], int] | None = None
    """env_cfg → the test split's size where the env brings its own tasks (BFCL's entries); None: alprl's split
    sizes (`envs.splits.SPLIT_SIZES`)."""

    def make_agent(self, tokenizer: PreTrainedTokenizerBase, style: str = DEFAULT_STYLE) -> Agent:
        return self.agent_class(tokenizer, style=style) if self.styled else self.agent_class(tokenizer)

    @property
    def agent_format(self) -> str:
        """Names the agent's text format ("HouseholdAgent/2"), for cache keys of data built with it."""
        return f"{self.agent_class.__name__}/{self.agent_class.format_version}"


def _problem_kwargs(e: Any) -> dict:
    """The problem-source arguments both math envs take (`envs.tir.problems.ProblemSource`)."""
    return {"difficulty": e.difficulty or None, "task_types": e.task_types or None, "dataset": e.dataset,
            "eval_dataset": e.eval_dataset, "dataset_format": e.dataset_format,
            "dataset_split_field": e.dataset_split_field, "dataset_fields": dict(e.dataset_fields) or None,
            "reasoning_gym": dataclasses.asdict(e.reasoning_gym)}


def _tir_kwargs(e: Any) -> dict:
    return {"style": e.style, "max_turns": e.max_turns, "sandbox_url": e.sandbox_url or None,
            "sandbox_retry_s": e.sandbox_retry_s, "run_timeout_s": e.run_timeout_s, **_problem_kwargs(e)}


_HOUSEHOLD = dict(agent_class=HouseholdAgent, system_prompt=lambda style: HOUSEHOLD_SYSTEM_PROMPT,
                  admissible_commands=True, wrap=StepContext)
_WEBSHOP = dict(agent_class=WebShopAgent, system_prompt=lambda style: WEBSHOP_SYSTEM_PROMPT,
                admissible_commands=True)

ENTRIES: tuple[EnvEntry, ...] = (
    EnvEntry("alprl/TIRMath-v0", "tir", TIRAgent, _tir_kwargs, lambda style: get_style(style).system_prompt,
             styled=True, expert=play_tir_expert, task_types=tuple(TIR_TASK_TYPES), datasets=True),
    # one turn, no tool; its expert writes a line of working and the boxed answer (envs/tir/working.py)
    EnvEntry("alprl/Math-v0", "math", SingleTurnMathAgent, _problem_kwargs, lambda style: SINGLE_TURN_SYSTEM_PROMPT,
             expert=play_math_expert, task_types=tuple(TIR_TASK_TYPES), datasets=True, multi_turn=False),
    EnvEntry("alprl/Household-v0", "household",
             env_kwargs=lambda e: {"task_types": e.task_types or None} | _step_limit(e),
             expert=play_household_expert, task_types=tuple(HOUSEHOLD_TASK_TYPES), **_HOUSEHOLD),
    EnvEntry("alprl/WebShop-v0", "webshop", env_kwargs=lambda e: {"num_products": e.num_products} | _step_limit(e),
             expert=play_webshop_expert, **_WEBSHOP),
    EnvEntry("alprl/ALFWorld-v0", "alfworld",
             env_kwargs=lambda e: {"data_path": e.alfworld_data or None, "task_types": e.task_types or None}
             | _step_limit(e), task_types=tuple(ALFWORLD_TASK_TYPES), **_HOUSEHOLD),
    EnvEntry("alprl/WebShopServer-v0", "webshop-server",
             env_kwargs=lambda e: {"server_url": e.webshop_url or None} | _step_limit(e), **_WEBSHOP),
    # BFCL's multi-turn categories (task types); the ground-truth player is the warm start's expert
    EnvEntry("alprl/BFCL-v0", "bfcl", BFCLAgent,
             lambda e: {"categories": list(e.task_types) or None, "observation": "messages"},
             lambda style: BFCL_SYSTEM_PROMPT, expert=play_bfcl_expert, task_types=BFCL_CATEGORIES,
             test_size=lambda e: sum(len(bfcl_entries(c)) for c in (e.task_types or BFCL_CATEGORIES))),
    # any OpenEnv server: a plain one-action-per-line agent, no expert (start from a model), no projection
    EnvEntry("alprl/OpenEnv-v0", "openenv", OpenEnvAgent,
             lambda e: {"base_url": e.openenv.url or None, "action_field": e.openenv.action_field,
                        "observation_field": e.openenv.observation_field} | _step_limit(e),
             lambda style: OPENENV_SYSTEM_PROMPT),
)
BY_ID = {entry.env_id: entry for entry in ENTRIES}
BY_ALIAS = {entry.alias: entry for entry in ENTRIES}


def env_entry(env_id: str) -> EnvEntry:
    """The table row of `env_id` (an id or a CLI alias); one clear error naming the known ones."""
    entry = BY_ID.get(env_id) or BY_ALIAS.get(env_id)
    if entry is None:
        raise ValueError(f"no alprl env {env_id!r}; known ids: {', '.join(BY_ID)} (aliases: {', '.join(BY_ALIAS)})")
    return entry


def history_refusal(env_cfg: Any, tokenizer: PreTrainedTokenizerBase | None = None) -> str | None:
    """Why this env and style cannot build later prompts as `env.think_history` / `env.context` ask (agents/templates/history.py;
    given the tokenizer, also by its chat template: `agents.templates.check.strip_refusal`); None where they can.
    Only an env whose agent takes a function-calling style (hermes) can make assistant turns of their own, which
    `strip` needs; every other keeps an episode in one assistant message, which compaction needs."""
    strip = getattr(env_cfg, "think_history", "keep") == "strip"
    context = getattr(env_cfg, "context", "none")
    if not strip and context == "none":
        return None
    entry = env_entry(env_cfg.id)
    if strip and context != "none":
        return (f"env.think_history=strip with env.context={context}: a run strips thinking (assistant turns of their "
                "own) or compacts (one assistant message), not both; choose one")
    if context != "none" and not entry.multi_turn:
        return (f"env.context={context}: {entry.env_id} plays one turn per episode, so there is no history to "
                "compact; use env.context=none")
    style = STYLES.get(env_cfg.style) if entry.styled else None
    chat_style = style is not None and style.tool_schema is not None
    if strip and not chat_style:
        what = f"{entry.env_id} with env.style={env_cfg.style}" if entry.styled else entry.env_id
        return (f"env.think_history=strip: {what} keeps each episode in one assistant message, which has no "
                "earlier assistant turn to strip; use keep (strip needs hermes tool turns: env.style=hermes on "
                f"{', '.join(e.env_id for e in ENTRIES if e.styled)})")
    if tokenizer is None or not chat_style:
        return None
    agent = entry.make_agent(tokenizer, env_cfg.style)
    if strip:
        return strip_refusal(agent)
    if agent.tool_turn is not None:
        return (f"env.context={context}: env.style={env_cfg.style} under this chat template makes each tool call an "
                "assistant turn of its own, and alprl compacts only episodes kept in one assistant message (a "
                "compacted chat would need the template to render what was dropped); use env.style=simpletir or "
                "torl, or env.context=none")
    return None


def make_agent(env_cfg: Any, tokenizer: PreTrainedTokenizerBase) -> Agent:
    """The agent for `env_cfg.id` (anything with `.id` and `.style`); raises ValueError for an `env.think_history` or
    `env.context` that cannot hold (`history_refusal`)."""
    refusal = history_refusal(env_cfg, tokenizer)
    if refusal:
        raise ValueError(refusal)
    return env_entry(env_cfg.id).make_agent(tokenizer, env_cfg.style)


def make_env(env_cfg: Any) -> gym.Env:
    """The configured env as rollouts, evaluation and SFT experts use it (action projection, the agent's wrapper;
    every alprl env takes the global `index` reset option itself)."""
    entry = env_entry(env_cfg.id)
    env = gym.make(entry.env_id, **entry.env_kwargs(env_cfg))
    if entry.admissible_commands:
        env = ActionProjection(env, env_cfg.action_projection, env_cfg.projection_min_similarity,
                               env_cfg.invalid_action_penalty)
    elif (env_cfg.action_projection, env_cfg.invalid_action_penalty) != ("exact", 0.0):
        raise ValueError(f"env.action_projection / env.invalid_action_penalty need an env with admissible commands "
                         f"(household, WebShop); {entry.env_id} has none")
    return entry.wrap(env)


def problem_count(env_cfg: Any, split: str) -> int | None:
    """Problems in `split` of the configured env: a split served from a dataset file has its row count (loading
    the file, once per process), a generated one `envs.splits.SPLIT_SIZES` (test 500, valid 1000); None for the
    open-ended generated train split. Raises `envs.datasets.DatasetError` for a file that cannot be used."""
    entry = env_entry(env_cfg.id)
    if entry.datasets and (env_cfg.dataset or env_cfg.eval_dataset):
        files = {k: v for k, v in _problem_kwargs(env_cfg).items() if k not in ("difficulty", "task_types")}
        return ProblemSource(**files).size(split)  # sizes do not depend on the generator's filters
    if entry.test_size is not None and check_split(split) == "test":
        return entry.test_size(env_cfg)
    return SPLIT_SIZES[check_split(split)]


def expert_player(env_id: str) -> ExpertPlayer:
    """The SFT expert of `env_id`; adapters have none and the error says to warm-start on the twin."""
    entry = env_entry(env_id)
    if entry.expert is None and entry.env_id not in ADAPTER_TWINS:
        raise ValueError(f"no SFT expert for {entry.env_id}: `alprl sft` cannot build its warm start. Start from a "
                         "model instead (model.path=<dir>), e.g. a warm start `alprl sft` built on an env that has "
                         f"one ({', '.join(e.env_id for e in ENTRIES if e.expert is not None)})")
    if entry.expert is None:
        twin = ADAPTER_TWINS.get(entry.env_id, "its generated twin")
        raise ValueError(f"no SFT expert for {entry.env_id}: it plays the real environment. Warm-start on its "
                         f"generated twin {twin} (`alprl sft` with env.id={twin}) and pass that model as model.path")
    return entry.expert
