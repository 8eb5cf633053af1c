"""The suites of `alprl experiment`: each paper comparison as methods × settings, the pairs it compares, and which of
those pairs are its primary family (the paper's claim, declared here before a suite runs; the report corrects them
with Holm's method and prints the rest as exploratory). The types (Setting, Suite, Horizon) and the plan are in
app/experiments/plan.py.
"""

from __future__ import annotations

from app.experiments.plan import Horizon, Setting, Suite
from trainer.config.errors import ConfigError
from trainer.config.train_config import TrainConfig


def _method(arm: str) -> str:
    return arm.split("/")[0]


def _setting(arm: str) -> str:
    return arm.split("/")[1]


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
OFFPOLICY_2026 = ("vespo", "vcpo", "minpro", "ctpo")
"""2026's off-policy methods (trainer/objective/offpolicy_losses.py, trainer/algorithms/vcpo.py): arms of the alp suite
under its lag-2 sampler and of the long suite's lag-4 setting. Each is compared with GRPO under its own sampler, as
exploratory comparisons: both suites' primary families (the ALP paper's claims) were declared in 7ccfcb2, after
the suites' first runs and before these methods' cells, and DPPO-TV's comparison with GRPO is exploratory there as
well."""


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


ALP_PRIMARY_BASELINES = ("grpo", "seq_bypass", "token_mis", "seq_mis")


def alp_primary(arm: str, against: str) -> bool:
    """ALP Tables 1-3: Token-ALP and Seq-ALP against GRPO, Seq-Bypass, Token-MIS and Seq-MIS under one sampler."""
    return (_method(arm) in ("token_alp", "seq_alp") and _method(against) in ALP_PRIMARY_BASELINES
            and _setting(arm) == _setting(against))


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


def ablation_primary(arm: str, against: str) -> bool:
    """The claim's factor at ALP's clip band: each noise level against none, token and seq level; and Token-ALP
    against Token-Bypass (the preset against the preset)."""
    wide = "clip0.5-3"
    noise_vs_none = (_method(arm) == _method(against) and _setting(against) == f"{wide}_off"
                     and _setting(arm).startswith(f"{wide}_"))
    return noise_vs_none or (arm, against) == (f"token_bypass/{wide}_abs1e-06", "token_bypass/clip0.2-0.28_off")


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


LONG_SYNC = "lag0"
"""GRPO with fresh rollouts (no lag), run only when `--settings` names it: the synchronous result VCPO claims to
reach under lag (arXiv 2602.17616)."""
OFFPOLICY_2026_CLAIMS = ("vespo", "vcpo")
"""The two 2026 methods whose papers claim what the long suite's lag-4 setting measures: VESPO trains stably under
staleness (arXiv 2602.10693), VCPO under lag reaches the synchronous result (arXiv 2602.17616). Declared primary
(against GRPO under the same lag-4 sampler) on 2026-12-06 in the commits their lag-4 cells ran from, before the
first of them; main has the declaration from 7718795, after 4 of the first 6 cells had finished."""


def _long_settings(cfg: TrainConfig, num_layers: int) -> list[Setting]:
    # lag 4: the heaviest mismatch of the demo's dials (KL 0.019, r_mis P2 0.70; docs/experiments.md), the
    # setting most likely to break GRPO and Bypass if lag 2 separates nothing; run it with --settings lag4
    # (2026's off-policy methods, OFFPOLICY_2026, join the five presets at lag 4 only)
    settings = [Setting("lag2", (LAG2, LONG_DIAGNOSTICS), methods=LONG_METHODS),
                Setting("lag4", ("rollout.policy_lag=4", LONG_DIAGNOSTICS), named_only=True),
                Setting(LONG_SYNC, ("rollout.policy_lag=0", LONG_DIAGNOSTICS), methods=("grpo",), named_only=True)]
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
    if f"grpo/{LONG_SYNC}" in arms:  # the synchronous result, for the methods that claim to reach it under lag
        pairs += [(arm, f"grpo/{LONG_SYNC}") for arm in arms if _setting(arm) == "lag4"]
    return pairs


def long_primary(arm: str, against: str) -> bool:
    """ALP Figures 1, 3, 4 on held-out success: each ALP arm against GRPO, Seq-Bypass and Token-MIS under its own
    sampler (the tuned arm against its preset is exploratory); VESPO and VCPO against GRPO under the lag-4 sampler
    (OFFPOLICY_2026_CLAIMS). Against the synchronous GRPO every comparison is exploratory."""
    alp = (_method(arm) in ("token_alp", "seq_alp") and _method(against) in ("grpo", "seq_bypass", "token_mis")
           and not arm.endswith("_tuned") and _setting(against) != LONG_SYNC)
    return alp or (_method(arm) in OFFPOLICY_2026_CLAIMS and against == "grpo/lag4" and _setting(arm) == "lag4")


ACTING_SIGMA = 1e-1
"""The relative σ0 of the acting suite's ALP arm: where the perturbation's |Δp| P99 reaches the lag-2 sampler's
own |π_old − μ| P99 on the demo (0.046-0.119 at relative 0.1-0.2 against ~0.08-0.10; docs/experiments.md
"sensitivity"), so that the noise can matter at all; the presets' σ0 1e-6 moves probabilities by ~5e-6."""
LAG4 = "rollout.policy_lag=4"
ALP_CLIP = ABLATION_CLIPS["clip0.5-3"]
ACTING_ALP = f"token_alp/lag4_{sigma_setting_name('relative', ACTING_SIGMA)}"
ACTING_TWIN = "token_bypass/lag4_clip0.5-3_off"
ACTING_GRPO = "grpo/lag4"
ACTING_HORIZONS = {"smoke": Horizon(steps=4, eval_every=2), "default": Horizon(200, 25, seeds=(0, 1, 2, 3, 4)),
                   "full": Horizon(200, 25, seeds=(0, 1, 2, 3, 4))}


def _acting_settings(cfg: TrainConfig, num_layers: int) -> list[Setting]:
    # three arms, one method each: Token-ALP with a perturbation that acts; the same loss at the same clip with the
    # perturbation off (token_bypass at ALP's band: the arms differ in perturb.* alone); GRPO, which dies at lag 4
    lo, hi = ALP_CLIP
    return [Setting(_setting(ACTING_GRPO), (LAG4, LONG_DIAGNOSTICS), methods=("grpo",)),
            Setting(_setting(ACTING_ALP), (LAG4, LONG_DIAGNOSTICS, *noise_overrides("relative", ACTING_SIGMA)),
                    methods=("token_alp",)),
            Setting(_setting(ACTING_TWIN), (LAG4, LONG_DIAGNOSTICS, f"algo.clip_low={lo:g}", f"algo.clip_high={hi:g}",
                                            "perturb.enabled=false"), methods=("token_bypass",))]


def acting_comparisons(arms: list[str]) -> list[tuple[str, str]]:
    """ALP against its noise-free twin (the mechanism) and against GRPO; the twin against GRPO."""
    return [(ACTING_ALP, ACTING_TWIN), (ACTING_ALP, ACTING_GRPO), (ACTING_TWIN, ACTING_GRPO)]


def acting_primary(arm: str, against: str) -> bool:
    """Whether the perturbation matters (ALP − twin) and whether ALP beats GRPO where GRPO dies."""
    return arm == ACTING_ALP


SUITES = {s.name: s for s in (
    Suite("alp", "GRPO, Seq-Bypass, Seq/Token-MIS and Token/Seq-ALP under one dialled mismatch (ALP Tables 1/3, "
          "Figures 1-5, 10), with DPPO-TV as 2026's most shipped correction and VESPO, VCPO, MinPRO and CTPO as "
          "its off-policy methods beside them",
          ("grpo", "seq_bypass", "seq_mis", "token_mis", "token_alp", "seq_alp", "dppo_tv", *OFFPOLICY_2026),
          _alp_settings, pair_arms=alp_comparisons, primary=alp_primary,
          cost="36 cells (11 methods × lag2 and GRPO × lag2_fp16, × 3 seeds); 18 of them (without dppo_tv, the "
               "2026 off-policy methods and fp16) took 43.2 min, 2.4 min a cell (2026-12-01, beside other work); an "
               "fp16 cell's updates cost 6-9× fp32's on a CPU without fp16 arithmetic; with the transformers engine "
               "(`auto`'s choice on the demo since 2026-12-05) a grpo/lag2 cell took 65-85 s against vLLM's "
               "148-186 s, back to back beside other work (bench/demo_engine.py, 2026-12-06)",
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
          primary=ablation_primary,
          cost="36 cells (2 methods × 6 settings × 3 seeds), 9 of them the alp suite's runs with --reuse: 55 min "
               "with --parallel 2, 96-198 s a cell (2026-12-04, beside other work)",
          claim="the perturbation itself, not the clip range, makes ALP better than Bypass under mismatch"),
    Suite("long", "GRPO, Seq-Bypass, Token-MIS and Seq/Token-ALP for 200 steps under policy lag 2, held-out "
          "success every 25 steps: ratio envelopes, KL and grad-norm spikes, entropy and collapse over the whole "
          "horizon (ALP Figures 1, 3, 4); --settings lag4 for the harsher sampler, where VESPO, VCPO, MinPRO and "
          "CTPO join them", (*LONG_METHODS, *OFFPOLICY_2026), _long_settings,
          pair_arms=long_comparisons, primary=long_primary,
          horizons=LONG_HORIZONS, horizon_report=True, reach_arm=f"grpo/{LONG_SYNC}",
          cost="10 cells (5 methods × lag2 × seeds 0,1): ~10 s a step two cells at a time (2026-12-05), so "
               "~38 min a 200-step cell with its 8 evaluations and ~3.2 h for the suite with --parallel 2; "
               "--settings lag4: 18 cells (9 methods × seeds 0,1), 21-42 min a cell (the five presets' lag-4 cells; "
               "the 2026 methods' 21-40 min, 21 alone two at a time), lag0: 2 cells, ~21 min",
          claim="over a long run Seq-Bypass's loss-ratio envelope blows up while ALP's stays tight, ALP avoids "
          "the KL spikes MIS shows, and its entropy is higher but controlled"),
    Suite("alp_acting", "Token-ALP with a perturbation that acts (relative σ0 0.1) against its exact noise-free twin "
          "(token_bypass at ALP's clip 0.5/3.0) and GRPO, 200 steps under policy lag 4 (where GRPO dies), five "
          "seeds: whether ALP's perturbation matters where it could", ("grpo", "token_alp", "token_bypass"),
          _acting_settings, pair_arms=acting_comparisons, primary=acting_primary, horizons=ACTING_HORIZONS,
          horizon_report=True,
          cost="15 cells (3 arms × 5 seeds × 200 steps), ~40 min a cell two at a time (the long suite's lag-4 "
               "cells: 21-42 min), ~5 h with --parallel 2",
          claim="ALP's perturbation, where it moves probabilities on the sampler's scale, makes the update better "
          "than the same loss without it, and better than GRPO under a sampler GRPO cannot survive"),
    Suite("robustness", "GRPO, SPrPO and Seq-ALP on the household, then the robustness sweep of each final "
          "checkpoint (SPrPO's claim)", ("grpo", "sprpo", "seq_alp"), _plain_setting,
          config="configs/household_tiny.yaml", baseline_method="grpo", robustness=True,
          primary=lambda arm, against: _method(arm) == "sprpo",
          cost="9 cells on the household, 18-58 min a cell with its sweep, plus the household SFT start "
               "(45-94 min) when missing",
          claim="SPrPO's policy keeps its success under hidden-state noise, pruning and quantization better than "
          "GRPO's"),
    Suite("staleness", "GRPO, QUATRO and Seq-ALP under policy lag 0/1/2 and a 3× learning rate (QUATRO's claim)",
          ("grpo", "quatro", "seq_alp"), _staleness_settings, baseline_method="grpo",
          primary=lambda arm, against: _method(arm) == "quatro",
          cost="36 cells (3 methods × 4 settings × 3 seeds): 29.3 min for seed 0's 12 cells (2.4 min a "
               "cell)",
          claim="QUATRO trains stably under increased policy staleness and aggressive learning rates"),
    Suite("mismatch", "GRPO, Token-MIS and MIPU over sampler fake quantization none/int8/int4/int3 (MIPU's claim)",
          ("grpo", "token_mis", "mipu"), _mismatch_settings, baseline_method="grpo",
          primary=lambda arm, against: _method(arm) == "mipu",
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


