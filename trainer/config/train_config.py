"""Run configuration: a tree of small dataclasses, each field with its docstring, and how one layer is read into it.

A default is stated once, here, or, where a library below the trainer must work without a config (a Gymnasium
env, the sandbox), once there as a named constant that the field here names (tests/structure/
test_defaults_once.py). YAML files in `configs/` only override (nested mappings), and the CLI
takes dotted `key=value` overrides (`optim.lr=1e-4 rollout.group_size=8`), values parsed as YAML.
Presets (`configs/algorithms/<name>.yaml`, data) sit between the two: defaults ← preset ← recipe ← command line,
the preset being the recipe's `algorithm: <name>` or, in its place, `algorithm=<name>` on the command line.
trainer/setup/build.py's `build_config` layers them with `apply_layer` and ends with the validation of
trainer/setup/validation.py. Unknown or ill-typed keys raise `ConfigError` naming the key and the valid choices; so do
values the run would trip over later (an unknown loss, a bad range, fields that contradict each other). The CLI
turns a `ConfigError` into one line on stderr and exit status 2.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from envs.tir_defaults import DEFAULT_DIFFICULTY, DEFAULT_MAX_TURNS, DEFAULT_SANDBOX_RETRY_S, DEFAULT_STYLE
from envs.webshop_defaults import DEFAULT_NUM_PRODUCTS
from sandbox.settings import RUN_TIMEOUT_S
from trainer.config.algo_config import AlgoConfig, PerturbConfig
from trainer.config.dist_config import DistributedConfig
from trainer.config.errors import ConfigError
from trainer.config.lora_config import ModelLoraConfig
from trainer.config.openenv_config import OpenEnvConfig
from trainer.config.rg_config import ReasoningGymConfig
from trainer.config.rollout_config import RolloutConfig

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"


@dataclass
class ModelConfig:
    path: str = ""
    """HF model dir or cached hub name. Empty: the tiny embedded model produced by SFT in `<sft.output_dir>`."""
    hidden_size: int = 256
    """Tiny model: width (only used when building the tiny model)."""
    num_layers: int = 4
    """Tiny model: number of decoder layers."""
    num_heads: int = 4
    """Tiny model: attention heads (head_dim = hidden_size / num_heads)."""
    num_kv_heads: int = 2
    """Tiny model: key/value heads (grouped-query attention)."""
    intermediate_size: int = 688
    """Tiny model: MLP width (about 2.7 × hidden_size, as Qwen2)."""
    vocab_size: int = 1024
    """Tiny model: BPE vocabulary size of the tokenizer trained on the SFT corpus."""
    chat_template: str = "chatml"
    """Tiny model: its chat template, chatml (keeps history as written) | chatml_drop_thinking (an earlier assistant
    turn loses its <think> block, as QwQ's and DeepSeek-R1's templates drop it; agents/tokenizer.py)."""
    lora: ModelLoraConfig = field(default_factory=ModelLoraConfig)
    """LoRA RL: r > 0 trains peft adapters instead of every weight (trainer/config/lora_config.py,
    trainer/runtime/lora.py)."""


@dataclass
class EnvConfig:
    id: str = "alprl/TIRMath-v0"
    """Gymnasium id of the environment."""
    style: str = DEFAULT_STYLE
    """TIR convention: simpletir | torl | hermes (reference/environments.md §1)."""
    think_history: str = "keep"
    """Earlier turns' <think> blocks in later prompts: keep (as sampled, any template) | strip (as the chat template
    renders history: a turn whose rendered prompt does not extend the stream starts a new trace of the episode;
    hermes tool turns only, agents/templates/history.py; `alprl check-template` says which turns do)."""
    context: str = "none"
    """History compaction once prompt + response + the next turn's room pass env.context_budget tokens: none |
    sliding | drop_tool_outputs | summarize (agents/templates/history.py); each compaction starts a new trace of the episode.
    Episodes kept in one assistant message only (TIR simpletir / torl, household, WebShop)."""
    context_budget: int = 0
    """Tokens of prompt + response past which env.context compacts the history; 0: the engine's max_model_len."""
    summarizer: str = ""
    """env.context=summarize: a `module:function` (text → text) that writes the summary of the dropped steps; empty:
    the policy itself (its greedy answer to a summary request)."""
    max_turns: int = DEFAULT_MAX_TURNS
    """Assistant turns per episode before truncation. This default and those of style, difficulty and
    sandbox_retry_s are envs/tir_defaults.py's, which `gym.make("alprl/TIRMath-v0")` takes too."""
    difficulty: int = DEFAULT_DIFFICULTY
    """Task difficulty level (1-3); 0 means all levels. Generated problems only (a dataset's are not rated)."""
    task_types: list[str] = field(default_factory=list)
    """Restrict generated task types (empty: all). Dataset problems ignore it (their task type is their source)."""
    dataset: str = ""
    """TIR / single-turn math: a local JSONL, JSON or parquet math file (any layout of envs/datasets: MATH500,
    AIME, Minerva, OlympiadBench, verl/DAPO parquet, question/answer), or reasoning_gym:<name>[,<name>...]
    (reasoning-gym's generators and scorers, drawn as env.reasoning_gym says; its test split is held out);
    non-empty: the train split serves its problems instead of generated ones, each step the next
    rollout.prompts_per_step of a per-epoch shuffle."""
    eval_dataset: str = ""
    """The file (or reasoning_gym:<name>,...) the test split (held-out evaluation, eval_tasks) serves. Empty: a
    reasoning-gym `dataset`'s held-out problems, else the `dataset` rows whose dataset_split_field is "test", or
    without a split field the `dataset` file itself, which evaluates on the training problems (logged once)."""
    dataset_format: str = ""
    """Layout of env.dataset and env.eval_dataset (math500, aime2024, aime2025, minerva, olympiadbench, verl,
    dapo, qa); empty: detected from the columns."""
    dataset_split_field: str = ""
    """Split env.dataset by this column (a dotted path such as extra_info.split reads a nested key): train = rows
    whose value is "train", test = "test", valid = "valid" or "validation". Empty: every row is a train row
    (and, without env.eval_dataset, a test row)."""
    dataset_fields: dict[str, str] = field(default_factory=dict)
    """Column overrides of env.dataset / env.eval_dataset by role (question, answer, id, source), e.g.
    env.dataset_fields.question=my_q env.dataset_fields.answer=my_a; empty: the layout's columns."""
    reasoning_gym: ReasoningGymConfig = field(default_factory=ReasoningGymConfig)
    """How a reasoning_gym:<name>,... dataset is drawn: sizes, seed, per-dataset config
    (trainer/config/rg_config.py)."""
    harness: str = ""
    """rollout.source=harness: the user's async function `module:function`, (task, base_url, api_key) → reward,
    that plays one episode with any OpenAI client (agents/endpoint/harness.py, docs/policy_endpoint.md); e.g.
    agents.harnesses.tir_harness:play, alprl's TIR loop written against the OpenAI API."""
    sandbox_url: str = ""
    """Sandbox endpoint(s), comma separated. Empty: in-process executor."""
    sandbox_retry_s: float = DEFAULT_SANDBOX_RETRY_S
    """With sandbox_url: seconds one tool call keeps retrying infrastructure errors (connection refused or reset,
    the service's own timeouts, HTTP 5xx, 429) across the URLs, with jittered backoff of at most 2 s, before it
    comes back SandboxError and its episode is left out of the loss (docs/sandbox.md). 0: one try."""
    run_timeout_s: float = RUN_TIMEOUT_S
    """Wall-clock limit per code execution (the default is the sandbox's, sandbox/settings.py)."""
    mask_void_turns: bool = True
    """Zero the loss mask of trajectories that ended with a void turn (no code, no answer), as SimpleTIR."""
    expert_epsilon: float = 0.1
    """Household/WebShop SFT data: probability that the imperfect expert takes a random admissible action."""
    expert_search: str = "random"
    """Household imperfect expert's search for unseen receptacles: random (ALFWorld-like) | ordered ((type,
    index) order, the order of the household agent's "Not visited" line)."""
    expert_wrong_option_p: float = 0.1
    """WebShop SFT data: probability that the imperfect expert picks a wrong value for an option group."""
    expert_privileged: bool = False
    """Household/WebShop SFT data: the expert knows the hidden state (where objects lie; the target product) instead
    of reading the pages. A model cannot imitate choices it cannot see the reason for: the privileged WebShop
    expert's SFT start reached 2% success, the reader's (default) see configs/webshop_tiny.yaml."""
    num_products: int = DEFAULT_NUM_PRODUCTS
    """WebShop: products in the generated catalog (WebShop's small set has 1,000)."""
    max_steps: int = 0
    """Household/WebShop/OpenEnv step limit (truncation); 0: the env's own (ALFWorld 50, WebShop 15,
    OpenEnv 50)."""
    action_projection: str = "exact"
    """Household/WebShop: exact (commands run as written) | nearest (an inadmissible command runs as the most
    similar admissible one, see agents/projection.py)."""
    projection_min_similarity: float = 0.9
    """Household/WebShop, action_projection=nearest: least string similarity (0-1) for a command to be mapped."""
    invalid_action_penalty: float = 0.0
    """Household/WebShop: subtracted from the episode's reward per command that was not admissible as written
    (verl-agent's invalid_action_penalty_coef)."""
    alfworld_data: str = ""
    """alprl/ALFWorld-v0 (the real ALFWorld, envs/adapters/alfworld.py): the folder `alfworld-download` filled
    (empty: $ALFWORLD_DATA)."""
    webshop_url: str = ""
    """alprl/WebShopServer-v0 (a running WebShop server, envs/adapters/webshop_server.py): its address (empty:
    $WEBSHOP_URL)."""
    openenv: OpenEnvConfig = field(default_factory=OpenEnvConfig)
    """alprl/OpenEnv-v0 (any OpenEnv server, envs/adapters/openenv_client.py): its address and text fields
    (trainer/config/openenv_config.py)."""


@dataclass
class OptimConfig:
    lr: float = 2e-4
    """AdamW learning rate of the policy."""
    betas: list[float] = field(default_factory=lambda: [0.9, 0.99])
    """AdamW betas."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    grad_clip: float = 1.0
    """Global grad-norm clip; a non-finite norm skips the step."""
    num_minibatches: int = 2
    """Optimizer steps per rollout batch (mini-batch k > 0 is stale: off-policy on purpose)."""
    micro_batch_size: int = 32
    """Trajectories per forward/backward (gradient accumulation inside a mini-batch)."""


@dataclass
class SFTConfig:
    output_dir: str = "runs/sft"
    """Where the warm-start checkpoint goes (reused when it exists and matches this config)."""
    num_examples: int = 3000
    """Expert trajectories generated for SFT."""
    p_skip_tool: float = 0.35
    """Share of expert episodes that guess without the tool (headroom for RL)."""
    p_wrong_copy: float = 0.1
    """Share of expert episodes that copy the tool result wrongly."""
    varied_phrasing: bool = False
    """Vary the expert's sentences; off keeps copied numbers at fixed offsets, which tiny models learn fast."""
    expert_thinking: bool = False
    """TIR: the expert opens each turn with a short <think> block, as thinking models write (for a run with
    env.think_history=strip under model.chat_template=chatml_drop_thinking)."""
    epochs: int = 2
    """Passes over the SFT data."""
    lr: float = 2e-3
    """SFT learning rate (AdamW, cosine decay)."""
    batch_size: int = 32
    """SFT batch size (sequences)."""
    save_every: int = 50
    """Optimizer steps between SFT resume points (0: only when SIGINT/SIGTERM stop it); an interrupted `alprl sft`
    continues from the last one. Does not change the result, so not part of the SFT cache key."""
    torch_threads: int = 0
    """Torch threads while SFT trains (0: the run's `torch_threads`); not in the SFT cache key, like save_every."""
    seed: int = 0
    """The warm start's own seed (expert data, model init, batch order), in its cache key. The run's `seed` is the
    RL seed and leaves the warm start alone, so RL runs of many seeds start from one SFT model."""


@dataclass
class DiagnosticsConfig:
    every: int = 10
    """Steps between the diagnostics that cost extra no-grad forwards, which also run at the first and last step
    (0: no diagnostics at all, not even the free ratio quantiles below): ALP's |Δp| per layer group (`perturb/dp/layer*`), r_upd and r_byp of the last mini-batch under
    ALP/SPrPO (`diag/ratio_{upd,byp}_last/*`) and the after-update policy KL, entropy and QUATRO realized KL
    (`diag/policy_kl_*`, `diag/entropy`, `quatro/realized_kl*`). The other Table 5 ratios come from the update
    forward itself and are logged every step. bench/diagnostics_overhead.py measures the cost."""
    rows: int = 16
    """Rows of the |Δp|-per-group and after-update forwards: whole GRPO groups, evenly spaced over the batch
    (0: every row). Their quantiles and KL estimates are over that sample."""
    scatter_every: int = 10
    """Save a sample of (π_train(θ_old), μ) token probabilities to `<run>/diagnostics/scatter_step_<k>.npz` every
    N steps and at the first and last step (0: only those two); the report draws them (ALP paper Fig. 10)."""
    scatter_points: int = 20000
    """Tokens in each scatter sample (a seeded draw without replacement; fewer when the batch has fewer)."""
    drift_window: int = 8
    """Steps over which the drift alarm fits the trend of the mismatch KL (`rollout_corr/k3_kl`); a rise over the
    window above drift_bound prints a warning line and logs `rollout_corr/drift_alarm` = 1
    (trainer/diagnostics/drift_alarm.py). 0: no alarm."""
    drift_bound: float = 0.005
    """The drift alarm's bound on the KL's fitted rise over drift_window steps. 0.005 is the KL bound of prime-rl's
    NIXL investigation (PrimeIntellect-ai/prime-rl docs/nixl-kl-investigation.md), whose broken transfer drifted
    from 0.002 to 0.035 in 16 steps."""


@dataclass
class LoggingConfig:
    """Trackers beside the metrics.jsonl and TensorBoard events every run writes (trainer/runtime/logger.py). Their
    packages are imported only when switched on; a missing one is refused when the run starts, not by validation, so
    a run config saved with a tracker on still evaluates (`alprl eval`) on a machine without it."""

    wandb: bool = False
    """Also log every step's metrics to Weights & Biases (needs `pip install -e '.[wandb]'`)."""
    trackio: bool = False
    """Also log every step's metrics to Trackio, Hugging Face's local-first tracker (needs
    `pip install -e '.[trackio]'`; its store is $TRACKIO_DIR, default ~/.cache/huggingface/trackio; `trackio show`
    opens the dashboard), and every `eval_every` steps and at the last a table `rollout/episodes` of a few episodes
    of the step's rollout batch: prompt, assistant turns, tool outputs, reward (trainer/diagnostics/episode_table.py)."""
    project: str = "alprl"
    """The W&B and Trackio project the run logs to."""


@dataclass
class TrainConfig:
    seed: int = 0
    """Seed of everything (torch, task sampling, sampler)."""
    output_dir: str = "runs/train"
    """Run directory: metrics.jsonl, TensorBoard events, checkpoints/."""
    steps: int = 30
    """RL iterations (rollout batch + its mini-batch updates)."""
    save_every: int = 10
    """Checkpoint every N steps (and at the end)."""
    eval_every: int = 0
    """Held-out evaluation every N steps (0: only at the end)."""
    eval_at_start: bool = False
    """Also evaluate the starting policy before any update, logged as step 0 (verl's val_before_train)."""
    eval_tasks: int = 200
    """Held-out (test split) tasks for evaluation, indices 0..eval_tasks-1 (at most the test split's size: 500
    generated, or the problems the dataset file serves)."""
    eval_samples: int = 2
    """Samples per held-out task; success is averaged over them (avg@k, as the ALP paper's average@32)."""
    eval_greedy: bool = False
    """Greedy decoding for evaluation instead of sampling at the rollout temperature."""
    torch_threads: int = 0
    """Intra-op CPU threads for torch (0: torch's default). Tiny models on a busy machine run faster with 1."""
    degenerate_patience: int = 5
    """Steps in a row whose every GRPO group had one reward for all its members (no learning signal) before the run
    says so in one line (0: never; trainer/diagnostics/degenerate.py)."""
    fail_on_degenerate: bool = False
    """Stop the run there instead (exit status 6, that step's checkpoint kept); `alprl train --fail-on-degenerate`."""
    model: ModelConfig = field(default_factory=ModelConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    perturb: PerturbConfig = field(default_factory=PerturbConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    diagnostics: DiagnosticsConfig = field(default_factory=DiagnosticsConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)


# ---------------------------------------------------------------------------------------------- loading


def field_docs(cls: type) -> dict[str, str]:
    """Attribute docstrings of a dataclass (the string literal right after each field)."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body
    docs = {}
    for node, nxt in zip(body, body[1:], strict=False):
        if isinstance(node, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
            docs[node.target.id] = str(nxt.value.value)
    return docs


def _coerce(value: Any, hint: Any, key: str) -> Any:
    origin = typing.get_origin(hint)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"config key '{key}' expects a mapping (e.g. {key}.<name>=<value>), got {value!r}")
        item = typing.get_args(hint)[1]
        return {str(k): _coerce(v, item, f"{key}.{k}") for k, v in value.items()}
    if origin in (list, tuple):
        if isinstance(value, str):
            value = [v for v in value.split(",") if v]
        if not isinstance(value, list | tuple):
            raise ConfigError(f"config key '{key}' expects a list, got {value!r}")
        (item,) = typing.get_args(hint)[:1] or (Any,)
        return [_coerce(v, item, key) for v in value]
    if origin in (typing.Union, types.UnionType):
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"config key '{key}' expects true/false, got {value!r}")
    if hint is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if hint is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if hint is str:
        if isinstance(value, bool):  # YAML 1.1 reads on/off/yes/no as booleans: `distributed.fsdp=off` means "off"
            return "on" if value else "off"
        return "" if value is None else str(value)
    if hint in (int, float) and isinstance(value, str):
        try:  # YAML 1.1 reads "1e-3" as a string
            return hint(value)
        except ValueError:
            pass
    if hint in (int, float):
        raise ConfigError(f"config key '{key}' expects {hint.__name__}, got {value!r}")
    return value


MOVED_KEYS = {"wandb": "logging.wandb", "env.sandbox_max_failing_steps": "rollout.infra_patience"}
"""Keys that moved to another section: refused with their new name (a silent alias would keep two spellings); a run
config alprl saved before the move reads with the key where it now lives (trainer/setup/saved_config.py).
`env.sandbox_max_failing_steps` counted steps with any sandbox error; `rollout.infra_patience` counts steps over
`rollout.max_infra_frac` of any infrastructure failure, one mechanism for the sandbox and the rest."""


def apply_layer(obj: Any, overrides: dict[str, Any], prefix: str = "") -> None:
    """Set `overrides` (a nested mapping, one config layer) on the dataclass `obj` in place, coercing each value to
    its field's type; an unknown, moved or ill-typed key raises `ConfigError` naming it."""
    hints = typing.get_type_hints(type(obj))
    names = [f.name for f in dataclasses.fields(obj)]
    for name, value in overrides.items():
        key = f"{prefix}{name}"
        if key in MOVED_KEYS:
            section, leaf = MOVED_KEYS[key].rsplit(".", 1)
            raise ConfigError(f"config key '{key}' moved to '{MOVED_KEYS[key]}': pass {MOVED_KEYS[key]}=<value>, or in "
                              f"a YAML file put '{leaf}:' under '{section}:'")
        if name not in names:
            raise ConfigError(f"unknown config key '{key}'; valid keys{' in ' + repr(prefix[:-1]) if prefix else ''}:"
                              f" {', '.join(names)}")
        current = getattr(obj, name)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise ConfigError(f"config key '{key}' is a section; set its fields, e.g. {key}.<field>=...")
            apply_layer(current, value, key + ".")
        elif isinstance(current, dict) and isinstance(value, dict):  # a mapping field: later layers add keys
            setattr(obj, name, {**current, **_coerce(value, hints[name], key)})
        else:
            setattr(obj, name, _coerce(value, hints[name], key))


def _nest(dotted: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in dotted.items():
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"config key '{key}': '{part}' is set both as a value and as a section")
        node[parts[-1]] = value
    return out


def load_yaml(path: str | Path) -> dict[str, Any]:
    """A config file by path, or by its name in configs/ (`--config household_tiny.yaml`)."""
    path = Path(path)
    if not path.exists() and (CONFIG_DIR / path).is_file():
        path = CONFIG_DIR / path
    if not path.exists():
        raise ConfigError(f"config file '{path}' not found; files in {CONFIG_DIR}: "
                          f"{', '.join(sorted(p.name for p in CONFIG_DIR.glob('*.yaml')))}")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file '{path}' must hold a mapping of keys, got {type(data).__name__}")
    return data


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """`["a.b=1", "algorithm=grpo"]` → nested dict; values parsed as YAML scalars/lists."""
    flat = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"override '{item}' is not key=value (example: optim.lr=1e-4)")
        key, raw = item.split("=", 1)
        value = yaml.safe_load(raw) if raw.strip() else ""
        if isinstance(value, int | float) and not isinstance(value, bool) and any(c in raw for c in "_:"):
            value = raw.strip()  # YAML 1.1 reads 0.5_1 as 0.51 and 2:30 as 150; a numeric key still parses it
        flat[key.strip()] = value
    return _nest(flat)


def to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)
