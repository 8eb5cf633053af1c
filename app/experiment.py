"""`alprl experiment SUITE`: the papers' comparisons as a grid of cells, method × setting × seed.

A *setting* is a named set of config overrides (a mismatch, a layer range, a σ0/lr pair); a *cell* is one
`alprl train` run of one method (a preset of configs/algorithms/) under one setting with one seed, in
`<out>/<method>__<setting>__seed<k>/`, an ordinary run directory. What keeps cells comparable:
- the same SFT start: every cell trains from one warm start (`model.path=`), the recipe's `sft.output_dir`
  (built once if missing; `--scale smoke` builds a tiny one in `<out>/sft` so the recipe's is never rebuilt);
  `model.path` also skips the warm start's seed check, so cells of every seed start from the same weights;
- the same tasks for a given seed: training tasks and evaluation sampling derive from `seed` only
  (trainer/tasks.py, trainer/config/run_config.py `eval_settings`);
- the same held-out tasks: test indices 0..eval_tasks-1 of the run's own evaluation after its last step.

Override order, later wins: the recipe (`--config`; its own `algorithm:` preset is replaced by the cell's) ← the
cell's method preset (`algorithm=`) ← the scale's sizes (with a suite's own evaluation interval, `Horizon`) ← the
user's key=value overrides ← the setting's overrides ← the cell's seed, steps, start and run directory. The method
sits above the recipe, unlike `alprl train`'s defaults ← preset ← recipe (trainer/config/train_config.py `build_config`): a
suite compares methods as their presets define them, so a recipe's algo keys (the household recipe's loss_agg)
must not reach its cells (app/experiment_run.py `cell_config`). A user override of a key that a setting varies
is refused (the cell names would lie). Running, resuming and the report are in app/experiment_run.py and evaluation/reports/experiment_report.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from trainer.config.errors import ConfigError
from trainer.config.train_config import TrainConfig, parse_overrides

SMALL_MODEL = ("model.hidden_size=64", "model.num_layers=3", "model.num_heads=2", "model.num_kv_heads=1",
               "model.intermediate_size=128", "model.vocab_size=384")
"""The smoke scale's model: tests/trainer/tiny_tir.py's SMALL with 3 layers, so early/middle/late are distinct."""


@dataclass(frozen=True)
class Scale:
    """How big every cell of an experiment is."""

    name: str
    overrides: tuple[str, ...]
    """Config overrides of every cell (sizes only, never a method's knobs)."""
    seeds: tuple[int, ...]
    """Seeds when --seeds is not given."""
    steps: int | None
    """RL steps per cell when --steps is not given; None: the recipe's `steps`."""
    robustness_tasks: int
    """Held-out tasks of the robustness sweep on each final checkpoint (robustness suite); 0: no sweep."""
    own_sft: bool = False
    """Build a tiny warm start in `<out>/sft` instead of using the recipe's `sft.output_dir`."""
    summary: str = ""
    """One line for `alprl experiment --help`: what a cell is and what the scale costs."""


SCALES = {
    # ≤ 2 minutes on 2 cores for the alp suite (6 cells): a 0.14 M-parameter model warm-started on 400 episodes,
    # the transformers engine (a vLLM start costs ~20 s a cell), 2 steps of 2 × 2 episodes, 4 tasks × 2 samples;
    # the robustness sweep plays its 15 built-in conditions on 2 tasks.
    "smoke": Scale("smoke", (*SMALL_MODEL, "sft.num_examples=400", "sft.epochs=3", "sft.batch_size=16",
                             "sft.lr=5e-3", "rollout.engine=hf", "rollout.prompts_per_step=2",
                             "rollout.group_size=2", "optim.micro_batch_size=8", "eval_tasks=4", "eval_samples=2",
                             "eval_every=0", "eval_at_start=false"),
                   seeds=(0,), steps=2, robustness_tasks=2, own_sft=True,
                   summary="a tiny model built in <out>/sft, 2 steps, 4 tasks x 2 samples, seed 0: alp in ~1 min"),
    # The recipe's sizes, fewer steps and one final evaluation on 100 tasks × 2 samples. On the demo recipe (about
    # 20 s an RL step, ~30 s for 100 × 2 evaluation episodes, ~20 s engine start on 2 cores) a cell costs ~4 min:
    # the alp suite's 6 methods × 3 seeds ≈ 75 min, plus the SFT warm start when it is missing (~10 min).
    "default": Scale("default", ("eval_tasks=100", "eval_samples=2", "eval_every=0", "eval_at_start=false"),
                     seeds=(0, 1, 2), steps=10, robustness_tasks=32,
                     summary="the recipe's sizes, 10 steps, one evaluation of 100 tasks x 2 samples, seeds 0,1,2; "
                     "demo recipe: ~4 min a cell, alp (18 cells) ~75 min on 2 cores (+ ~10 min SFT if missing)"),
    # The recipe as it is (demo: 30 steps, 200 tasks × 2 samples every 15 steps): ~12 min a cell on 2 cores.
    "full": Scale("full", (), seeds=(0, 1, 2), steps=None, robustness_tasks=100,
                  summary="the recipe as it is (demo: 30 steps, 200 tasks x 2 samples), seeds 0,1,2: ~12 min a cell"),
}


CELL_SAVE_EVERY = 25
"""Steps between a cell's checkpoints: a 10-step cell saves once, at its end; a 200-step one every 25 steps."""


@dataclass(frozen=True)
class Setting:
    name: str
    overrides: tuple[str, ...] = ()
    methods: tuple[str, ...] = ()
    """Only these of the suite's methods run under this setting (empty: all of them): one extra arm, not a
    whole extra row of the grid."""
    named_only: bool = False
    """Run only when `--settings` names it (a follow-up run, e.g. the long suite's harsher lag 4)."""


@dataclass(frozen=True)
class Horizon:
    """A suite's own length at one scale, where the scale's few steps and single final evaluation would not show
    what the suite claims (the long suite)."""

    steps: int
    """RL steps per cell when --steps is not given."""
    eval_every: int
    """Held-out evaluation every this many steps, and after the last (a user's `eval_every=` still wins)."""
    seeds: tuple[int, ...] | None = None
    """Seeds when --seeds is not given; None: the scale's."""


@dataclass(frozen=True)
class Suite:
    """A comparison of the papers: methods × settings, and which arm each arm is compared against."""

    name: str
    doc: str
    methods: tuple[str, ...]
    settings: Callable[[TrainConfig, int], list[Setting]]
    """The settings, from the base config and the start model's decoder-layer count."""
    config: str = "configs/demo.yaml"
    """The recipe when --config is not given."""
    baseline_method: str = ""
    """Compare every other method with this one under the same setting (grpo)."""
    baseline_setting: str = ""
    """Or, for one-method suites: compare every other setting with this one (same method)."""
    also_compare: tuple[tuple[str, str], ...] = ()
    """More (arm, against) pairs the claim needs beyond the baseline: methods under each setting (method
    suites) or settings of each method (one-method suites)."""
    robustness: bool = False
    """Run the robustness sweep on each cell's final checkpoint."""
    claim: str = ""
    """What the papers claim this comparison shows, printed beside the measured verdicts (never a verdict)."""
    cost: str = ""
    """Its cells at --scale default and their measured minutes on the 2-core machine (docs/experiments.md)."""
    pair_arms: Callable[[list[str]], list[tuple[str, str]]] | None = None
    """A factorial suite's own (arm, against) pairs, from the planned arms (instead of the baseline rules)."""
    horizons: dict[str, Horizon] = field(default_factory=dict)
    """Per scale name: the suite's own steps, evaluation interval and seeds there (`suite_scale`)."""
    horizon_report: bool = False
    """Add the per-step counts (spikes, collapse) and the over-the-horizon figures to the report
    (evaluation/long_horizon.py)."""


def suite_scale(suite: Suite, scale: Scale) -> Scale:
    """`scale` as `suite` runs it: with the suite's own steps, periodic evaluation and seeds at that scale."""
    horizon = suite.horizons.get(scale.name)
    if horizon is None:
        return scale
    kept = tuple(o for o in scale.overrides if not o.startswith("eval_every="))
    return replace(scale, overrides=(*kept, f"eval_every={horizon.eval_every}"), steps=horizon.steps,
                   seeds=horizon.seeds or scale.seeds)


def thirds(num_layers: int) -> dict[str, str]:
    """Early / middle / late decoder-layer ranges (inclusive, `perturb.layers` syntax) of a model."""
    if num_layers < 3:
        raise ConfigError(f"the layers suite needs a model with at least 3 decoder layers, this one has {num_layers}")
    a, b = round(num_layers / 3), round(2 * num_layers / 3)
    span = {"early": (0, a - 1), "middle": (a, b - 1), "late": (b, num_layers - 1)}
    return {name: f"{lo}-{hi}" if hi > lo else str(lo) for name, (lo, hi) in span.items()}


ALP_FP16_SETTING = "lag2_fp16"
ALP_FP16_METHODS = ("grpo",)
"""FP16 training (arXiv 2510.26788): sampler and trainer both in fp16 and no correction, the paper's alternative to
correcting a bf16 mismatch; run for GRPO only (CPU fp16 is emulated: its updates cost 6-9x fp32's)."""
ALP_CLAIM_PAIRS = tuple((alp, other) for alp in ("token_alp", "seq_alp")
                        for other in ("seq_bypass", "token_mis", "seq_mis", "dppo_tv"))


def _alp_settings(cfg: TrainConfig, num_layers: int) -> list[Setting]:
    # The regime bench/mismatch_sweep.py picked on the demo recipe (docs/experiments.md "Choosing the regime"):
    # rollouts two updates old, where GRPO's r_mis reaches P2 0.84 and a min of 4e-4; bf16 alone (KL 5e-5) and
    # int8 weights (7e-5) leave the methods nothing to differ on. The fp16 arm keeps the lag: fp16 removes the
    # precision share of the mismatch, not the lag's.
    lag2 = ("rollout.policy_lag=2",)
    return [Setting("lag2", lag2),
            Setting(ALP_FP16_SETTING, (*lag2, "rollout.dtype=float16", "distributed.mixed_precision=fp16"),
                    methods=ALP_FP16_METHODS)]


def alp_comparisons(arms: list[str]) -> list[tuple[str, str]]:
    """Every method against GRPO under lag 2; each ALP arm against the other corrections (ALP Tables 1, 3); GRPO in
    fp16 against GRPO in bf16 and against the corrections in bf16 (the FP16 paper's claim: precision, not a
    correction)."""
    pairs = [(arm, "grpo/lag2") for arm in arms if arm.endswith("/lag2") and arm != "grpo/lag2"]
    pairs += [(f"{alp}/lag2", f"{other}/lag2") for alp, other in ALP_CLAIM_PAIRS]
    pairs += [(f"{m}/{ALP_FP16_SETTING}", f"{other}/lag2") for m in ALP_FP16_METHODS
              for other in ("grpo", "token_mis", "seq_bypass", "token_alp")]
    return pairs


def _layer_settings(cfg: TrainConfig, num_layers: int) -> list[Setting]:
    ranges = thirds(num_layers)
    return [Setting("layers_all", ("perturb.layers=all", "perturb.logits_only=false")),
            *(Setting(f"layers_{name}", (f"perturb.layers={span}", "perturb.logits_only=false"))
              for name, span in ranges.items()),
            Setting("logits_only", ("perturb.logits_only=true",))]


LAG2 = "rollout.policy_lag=2"  # the alp suite's regime (_alp_settings)
# relative 0.1 and 0.2 past the grid: on the demo, |Δp| P99 ≈ 0.6·σ0 reaches the lag-2 sampler's own
# |π_old − μ| P99 (~0.10) only near σ0 0.15 (docs/experiments.md "sensitivity")
SENSITIVITY_SIGMAS = {"relative": (1e-6, 1e-4, 1e-3, 1e-2, 2e-2, 5e-2, 1e-1, 2e-1), "absolute": (1e-6, 1e-3, 1e-2)}
SENSITIVITY_LRS = (5e-4, 1e-2)  # the TIR recipe's η_σ and the single-turn one


def noise_overrides(mode: str, sigma: float, lr: float = 5e-4) -> tuple[str, ...]:
    """ALP's perturbation on every decoder layer with σ0 `sigma` in `mode` (absolute | relative), η_σ `lr`."""
    return ("perturb.enabled=true", "perturb.layers=all", "perturb.logits_only=false", f"perturb.sigma_mode={mode}",
            f"perturb.sigma_init={sigma:g}", f"perturb.lr={lr:g}")


def sigma_setting_name(mode: str, sigma: float, lr: float | None = None) -> str:
    """abs1e-06 / rel0.01, with `_lr0.0005` when the σ learning rate varies too."""
    return f"{mode[:3]}{sigma:g}" + (f"_lr{lr:g}" if lr is not None else "")


def _sensitivity_settings(cfg: TrainConfig, num_layers: int) -> list[Setting]:
    # ALP Figure 9 under the alp suite's lag-2 sampler, σ0 in both modes: an absolute σ0 means a different share
    # of the hidden state on each model, a relative one the same share
    return [Setting(sigma_setting_name(mode, s, lr), (LAG2, *noise_overrides(mode, s, lr)))
            for mode, sigmas in SENSITIVITY_SIGMAS.items() for s in sigmas for lr in SENSITIVITY_LRS]


ABLATION_CLIPS = {"clip0.2-0.28": (0.2, 0.28), "clip0.5-3": (0.5, 3.0)}  # the Bypass presets' band, ALP's band
ABLATION_RELATIVE_SIGMA = 1e-1
"""The relative σ0 of the ablation's third noise level: where the sensitivity suite sees the perturbation start to
act on the demo (seed 0: absolute 1e-2, a relative 0.089 there, is the first σ0 whose loss-ratio envelope separates
from the preset's, P2 0.73 against 0.78, with |Δp| P99 0.07 against the sampler's own 0.11; relative 5e-2 moves
only the entropy and P98; docs/experiments.md "sensitivity")."""


def ablation_noises() -> dict[str, tuple[str, ...]]:
    return {"off": ("perturb.enabled=false",), sigma_setting_name("absolute", 1e-6): noise_overrides("absolute", 1e-6),
            sigma_setting_name("relative", ABLATION_RELATIVE_SIGMA):
                noise_overrides("relative", ABLATION_RELATIVE_SIGMA)}


def _ablation_settings(cfg: TrainConfig, num_layers: int) -> list[Setting]:
    # loss level (the method: token_bypass / seq_bypass) × clip band × perturbation, all under lag 2;
    # token_bypass/clip0.5-3_abs1e-06 is token_alp, seq_bypass/clip0.5-3_abs1e-06 seq_alp, seq_bypass/clip0.5-3_off
    # seq_bypass: the same runs as the alp suite's cells of those presets
    return [Setting(f"{clip}_{noise}", (LAG2, f"algo.clip_low={lo:g}", f"algo.clip_high={hi:g}", *overrides))
            for clip, (lo, hi) in ABLATION_CLIPS.items() for noise, overrides in ablation_noises().items()]


def ablation_comparisons(arms: list[str]) -> list[tuple[str, str]]:
    """(a) each noise level against no noise at the same loss and clip; (b) the wide clip against the narrow one
    at the same loss and noise; Token-ALP against Token-Bypass (both factors at once); token against seq."""
    noises, (narrow, wide) = list(ablation_noises()), list(ABLATION_CLIPS)
    pairs = []
    for method in ("token_bypass", "seq_bypass"):
        pairs += [(f"{method}/{clip}_{n}", f"{method}/{clip}_off") for clip in (narrow, wide) for n in noises[1:]]
        pairs += [(f"{method}/{wide}_{n}", f"{method}/{narrow}_{n}") for n in noises]
    pairs.append((f"token_bypass/{wide}_{noises[1]}", f"token_bypass/{narrow}_off"))
    pairs += [(f"token_bypass/{clip}_{n}", f"seq_bypass/{clip}_{n}") for clip in (narrow, wide) for n in noises]
    return pairs


def _plain_setting(cfg: TrainConfig, num_layers: int) -> list[Setting]:
    return [Setting("recipe")]


def _staleness_settings(cfg: TrainConfig, num_layers: int) -> list[Setting]:
    lags = [Setting(f"lag{k}", (f"rollout.policy_lag={k}", f"optim.lr={cfg.optim.lr:g}")) for k in (0, 1, 2)]
    return [*lags, Setting("lag0_lr3x", ("rollout.policy_lag=0", f"optim.lr={3 * cfg.optim.lr:g}"))]


def _mismatch_settings(cfg: TrainConfig, num_layers: int) -> list[Setting]:
    # int3 too: on the demo only int3 (of the quantizers) gives r_mis a heavy tail (docs/experiments.md)
    return [Setting(f"quant_{q or 'none'}", (f"rollout.sampler_quant={q}",)) for q in ("", "int8", "int4", "int3")]


LONG_METHODS = ("grpo", "seq_bypass", "token_mis", "seq_alp", "token_alp")
LONG_HORIZONS = {"smoke": Horizon(steps=4, eval_every=2), "default": Horizon(200, 25, seeds=(0, 1)),
                 "full": Horizon(200, 25, seeds=(0, 1))}
"""The long suite's length: 200 steps with held-out success every 25 at default scale (ALP Figures 1, 3, 4 span
hundreds of steps); at smoke scale 4 steps with evaluation every 2, so the periodic path and the counts run."""
LONG_DIAGNOSTICS = "diagnostics.every=1"
"""The clean entropy, the update KL and an ALP arm's last-mini-batch r_byp every step instead of every 10th: the
report counts spikes step by step. Under ALP a diagnostics step costs 1.075× a train step (docs/architecture.md,
bench/diagnostics_overhead.py), a few percent of a step with its rollout."""
LONG_PERTURBATION: tuple[str, tuple[str, ...]] | None = None
"""The sixth arm, once the sensitivity and ablation suites have picked ALP's best perturbation: (method, overrides),
e.g. `("token_alp", noise_overrides("relative", 0.1))`; it runs under the same lag-2 sampler as setting
`lag2_tuned`, that method only. None: the five presets alone."""


def _long_settings(cfg: TrainConfig, num_layers: int) -> list[Setting]:
    # lag 4: the heaviest mismatch of the demo's dials (KL 0.019, r_mis P2 0.70; docs/experiments.md), the
    # setting most likely to break GRPO and Bypass if lag 2 separates nothing; run it with --settings lag4
    settings = [Setting("lag2", (LAG2, LONG_DIAGNOSTICS)),
                Setting("lag4", ("rollout.policy_lag=4", LONG_DIAGNOSTICS), named_only=True)]
    if LONG_PERTURBATION is not None:
        method, overrides = LONG_PERTURBATION
        settings.append(Setting("lag2_tuned", (LAG2, LONG_DIAGNOSTICS, *overrides), methods=(method,)))
    return settings


def long_comparisons(arms: list[str]) -> list[tuple[str, str]]:
    """Under each arm's own sampler setting: every arm against GRPO; each ALP arm (the tuned one too) against
    Seq-Bypass and Token-MIS, the claim of ALP Figures 1, 3, 4; the tuned arm against its own preset."""
    def lag(arm: str) -> str:  # the tuned arm runs under lag 2
        setting = arm.split("/")[1]
        return "lag2" if setting == "lag2_tuned" else setting

    pairs = [(arm, f"grpo/{lag(arm)}") for arm in arms if arm != f"grpo/{lag(arm)}"]
    alp = [arm for arm in arms if arm.split("/")[0] in ("token_alp", "seq_alp")]
    pairs += [(arm, f"{other}/{lag(arm)}") for arm in alp for other in ("seq_bypass", "token_mis")]
    pairs += [(arm, f"{arm.split('/')[0]}/lag2") for arm in arms if arm.endswith("/lag2_tuned")]
    return pairs


SUITES = {s.name: s for s in (
    Suite("alp", "GRPO, Seq-Bypass, Seq/Token-MIS and Token/Seq-ALP under one dialled mismatch (ALP Tables 1/3, "
          "Figures 1-5, 10), with DPPO-TV as 2026's most shipped correction beside them",
          ("grpo", "seq_bypass", "seq_mis", "token_mis", "token_alp", "seq_alp", "dppo_tv"),
          _alp_settings, pair_arms=alp_comparisons,
          cost="24 cells (7 methods × lag2 and GRPO × lag2_fp16, × 3 seeds); 18 of them (without dppo_tv and "
               "fp16) took 43.2 min, 2.4 min a cell (2026-12-01, beside other work); an fp16 cell's updates cost "
               "6-9× fp32's on a CPU without fp16 arithmetic",
          claim="under training-inference mismatch Token/Seq-ALP reach a "
          "higher held-out avg@k than GRPO, Seq-Bypass, Token-MIS and Seq-MIS; FP16 training: GRPO with sampler and "
          "trainer in fp16 matches the corrections in bf16"),
    Suite("layers", "Seq-ALP on all / early / middle / late decoder layers and on the logits only (ALP Table 4, "
          "Figure 6)", ("seq_alp",), _layer_settings, baseline_setting="layers_all",
          cost="15 cells (5 settings × 3 seeds): 2.5-5 min a cell (33.3 min for seeds 0-1)",
          claim="perturbing all layers beats partial layers, which beat logits-only",
          also_compare=tuple((part, "logits_only") for part in ("layers_early", "layers_middle", "layers_late"))),
    Suite("sensitivity", "Token-ALP under policy lag 2 over σ0 (absolute and relative to rms(h)) × σ learning rate "
          "(ALP Figure 9; --methods seq_alp --settings ... for Seq-ALP at chosen σ0)", ("token_alp",),
          _sensitivity_settings, baseline_setting="abs1e-06_lr0.0005",
          cost="44 cells at --seeds 0,1 (22 settings × 2 seeds): 1.7-2.0 min a cell with --parallel 2 (median "
               "2.0, 2026-12-05); 5.7-7.7 min a cell one at a time on a slower 2-core machine (2026-12-03)",
          claim="σ0 and its learning rate matter"),
    Suite("ablation", "Loss level (token/seq Bypass) × clip band (0.2/0.28, 0.5/3.0) × perturbation (off, absolute "
          "σ0 1e-6, relative σ0) under policy lag 2: what of Token-ALP's lead is the noise, what the clip",
          ("token_bypass", "seq_bypass"), _ablation_settings, pair_arms=ablation_comparisons,
          cost="36 cells (2 methods × 6 settings × 3 seeds), 9 of them the alp suite's runs with --reuse: 55 min "
               "with --parallel 2, 96-198 s a cell (2026-12-04, beside other work)",
          claim="the perturbation itself, not the clip range, makes ALP better than Bypass under mismatch"),
    Suite("long", "GRPO, Seq-Bypass, Token-MIS and Seq/Token-ALP for 200 steps under policy lag 2, held-out "
          "success every 25 steps: ratio envelopes, KL and grad-norm spikes, entropy and collapse over the whole "
          "horizon (ALP Figures 1, 3, 4); --settings lag4 for the harsher sampler", LONG_METHODS, _long_settings,
          pair_arms=long_comparisons,
          horizons=LONG_HORIZONS, horizon_report=True,
          cost="10 cells (5 methods × lag2 × seeds 0,1): ~10 s a step two cells at a time (2026-12-05), so "
               "~38 min a 200-step cell with its 8 evaluations and ~3.2 h for the suite with --parallel 2",
          claim="over a long run Seq-Bypass's loss-ratio envelope blows up while ALP's stays tight, ALP avoids "
          "the KL spikes MIS shows, and its entropy is higher but controlled"),
    Suite("robustness", "GRPO, SPrPO and Seq-ALP on the household, then the robustness sweep of each final "
          "checkpoint (SPrPO's claim)", ("grpo", "sprpo", "seq_alp"), _plain_setting,
          config="configs/household_tiny.yaml", baseline_method="grpo", robustness=True,
          cost="9 cells on the household, 18-58 min a cell with its sweep, plus the household SFT start "
               "(45-94 min) when missing",
          claim="SPrPO's policy keeps its success under hidden-state noise, pruning and quantization better than "
          "GRPO's"),
    Suite("staleness", "GRPO, QUATRO and Seq-ALP under policy lag 0/1/2 and a 3× learning rate (QUATRO's claim)",
          ("grpo", "quatro", "seq_alp"), _staleness_settings, baseline_method="grpo",
          cost="36 cells (3 methods × 4 settings × 3 seeds): 29.3 min for seed 0's 12 cells (2.4 min a "
               "cell)",
          claim="QUATRO trains stably under increased policy staleness and aggressive learning rates"),
    Suite("mismatch", "GRPO, Token-MIS and MIPU over sampler fake quantization none/int8/int4/int3 (MIPU's claim)",
          ("grpo", "token_mis", "mipu"), _mismatch_settings, baseline_method="grpo",
          cost="36 cells (3 methods × 4 samplers × 3 seeds): 1.7-3.7 min a cell with --parallel 2 (2026-12-05); "
               "a MIPU step costs 1.4-1.6× a GRPO one (its validation rollouts)",
          claim="MIPU performs better on average and more stably under high mismatch"),
    Suite("gigpo", "GRPO and GiGPO (step-level advantages over anchor states) on the household; the shop with "
          "--config configs/webshop_tiny.yaml", ("grpo", "gigpo"), _plain_setting,
          config="configs/household_tiny.yaml", baseline_method="grpo",
          cost="6 cells on the household (21.6-22.6 min a cell), the shop 9-12.5 min a cell plus its SFT "
               "start (47 min)",
          claim="GiGPO's step-level credit over anchor states beats episode-level GRPO on multi-turn agent tasks "
          "(arXiv 2505.10978, ALFWorld and WebShop)"),
)}


@dataclass(frozen=True)
class Cell:
    method: str
    setting: Setting
    seed: int

    @property
    def arm(self) -> str:
        """What the report pools over seeds: method and setting."""
        return f"{self.method}/{self.setting.name}"

    @property
    def name(self) -> str:
        return f"{self.method}__{self.setting.name}__seed{self.seed}"


@dataclass
class Plan:
    """Everything an experiment runs, resolved before the first cell starts."""

    suite: Suite
    scale: Scale
    config: str
    seeds: list[int]
    steps: int
    out: Path
    start: str
    """The warm start every cell trains from (model.path of every cell)."""
    common: list[str]
    """Overrides of every cell before its setting: the scale's, then the user's; with the recipe alone (no method,
    no setting) they also make the config that builds the warm start when `start` is missing."""
    cells: list[Cell] = field(default_factory=list)
    save_every: int = CELL_SAVE_EVERY
    """Checkpoint interval of a cell (its last step always saves), so a stopped long cell resumes from there."""

    def cell_overrides(self, cell: Cell) -> list[str]:
        return [f"algorithm={cell.method}", *self.common, *cell.setting.overrides, f"seed={cell.seed}",
                f"steps={self.steps}", f"save_every={min(self.steps, self.save_every)}", f"model.path={self.start}",
                f"output_dir={self.out / cell.name}"]

    def comparisons(self) -> list[tuple[str, str]]:
        """(arm, the arm it is compared against), as the suite declares."""
        arms = list(dict.fromkeys(c.arm for c in self.cells))
        if self.suite.pair_arms is not None:
            return [(a, b) for a, b in self.suite.pair_arms(arms) if a in arms and b in arms]
        pairs = []
        for cell in {c.arm: c for c in self.cells}.values():
            if self.suite.baseline_method and cell.method != self.suite.baseline_method:
                pairs.append((cell.arm, f"{self.suite.baseline_method}/{cell.setting.name}"))
            elif self.suite.baseline_setting and cell.setting.name != self.suite.baseline_setting:
                pairs.append((cell.arm, f"{cell.method}/{self.suite.baseline_setting}"))
        for first, second in self.suite.also_compare:
            for cell in {c.arm: c for c in self.cells}.values():
                if self.suite.baseline_method and cell.method == first:
                    pairs.append((cell.arm, f"{second}/{cell.setting.name}"))
                elif self.suite.baseline_setting and cell.setting.name == first:
                    pairs.append((cell.arm, f"{cell.method}/{second}"))
        return [(a, b) for a, b in pairs if b in arms]

    def describe(self) -> dict:
        """experiment.json: what the report reads besides the cells' own directories."""
        settings = {c.setting.name: list(c.setting.overrides) for c in self.cells}
        return {"suite": self.suite.name, "doc": self.suite.doc, "claim": self.suite.claim, "scale": self.scale.name,
                "config": self.config, "horizon_report": self.suite.horizon_report,
                "seeds": self.seeds, "steps": self.steps, "start": self.start, "overrides": self.common,
                "settings": settings, "arms": list(dict.fromkeys(c.arm for c in self.cells)),
                "comparisons": [list(p) for p in self.comparisons()],
                "cells": [{"name": c.name, "arm": c.arm, "method": c.method, "setting": c.setting.name,
                           "seed": c.seed} for c in self.cells]}


def parse_seeds(text: str) -> list[int]:
    """'0,1,2' → [0, 1, 2]; anything else raises ConfigError naming the expected form."""
    parts = [p.strip() for p in text.split(",")]
    try:
        seeds = [int(p) for p in parts]
    except ValueError:
        seeds = []
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds {text!r}: expected distinct non-negative integers separated by commas, e.g. 0,1,2")
    return seeds


def _flat_keys(nested: dict, prefix: str = "") -> set[str]:
    keys = set()
    for k, v in nested.items():
        keys |= _flat_keys(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}"}
    return keys


def check_user_overrides(suite: Suite, settings: list[Setting], overrides: list[str]) -> None:
    """Refuse overrides of what the suite varies or what each cell sets itself."""
    user = _flat_keys(parse_overrides(overrides))
    cell_keys = {"algorithm", "seed", "steps", "save_every", "output_dir"}
    varied = set().union(*(_flat_keys(parse_overrides(list(s.overrides))) for s in settings)) | cell_keys
    clash = sorted(user & varied)
    if clash:
        raise ConfigError(f"the {suite.name} suite sets {', '.join(clash)} itself (per setting or per cell); "
                          "use --seeds / --steps / --out, or another suite")


def start_layers(cfg: TrainConfig) -> int:
    """Decoder layers of the model every cell starts from: model.path's config.json, else the tiny model's."""
    config_json = Path(cfg.model.path).expanduser() / "config.json" if cfg.model.path else None
    if config_json is not None and config_json.is_file():
        return int(json.loads(config_json.read_text())["num_hidden_layers"])
    return cfg.model.num_layers
