"""The effect each declared primary comparison's paper reports: the difference a design must be able to detect before
its "no difference" says anything (evaluation/reports/experiment_inference.py reads a comparison whose detectable
effect exceeds it as "no power").

Held here, not in experiment.json: it is the paper's number, not the suite's design, and the declaration's hash
(app/experiments/provenance.py `JUDGED_KEYS`) covers only what the report judges, so the committed declarations
still match. Effects are differences of success rates (the papers' scores in points / 100), keyed by (suite, arm
part, baseline part), a part being the arm's method ("token_alp/lag2" → "token_alp") or, where every arm shares
one method (the layers suite), its setting. A comparison with no entry has no paper effect; the report then reads
"no power" only where nothing under 1 is detectable.

The ALP paper's effects are its multi-turn tool-integrated reasoning tables, the methods' and the layer ranges'
(Qwen2.5-7B, average score; README of github.com/Chenluye99/Adaptive-Layerwise-Perturbation, arXiv 2603.19470),
whose baseline is GSPO: it stands for GRPO here, and the methods' table for the single-turn runs of the `alp`
suite too (its single-turn table is not transcribed). MIPU's is
its main table (FP8-quantized rollout, Pass@1 averaged over five math benchmarks; github.com/AnitaLeungxx/MIPU
project page, arXiv 2606.29526), Qwen3-1.7B's row, held to every sampler precision of the `mismatch` suite's
declared family. VESPO's, VCPO's and the ablation and sensitivity grids' comparisons have no entry yet.
"""

from __future__ import annotations

from dataclasses import dataclass

ALP_TIR = "ALP's multi-turn TIR table (Qwen2.5-7B, average score; its baseline GSPO stands for GRPO)"
ALP_TIR_SCORES = {"seq_alp": 50.53, "token_alp": 49.62, "token_mis": 48.74, "seq_mis": 46.94, "seq_bypass": 46.66,
                  "grpo": 46.57}
ALP_LAYERS = "ALP's layer-range ablation (multi-turn TIR, Qwen2.5-7B; Seq-ALP on layers 0-27, 23-27, 12-17, 0-5)"
ALP_LAYER_SCORES = {"layers_all": 50.53, "layers_late": 48.66, "layers_middle": 48.51, "layers_early": 48.25}
MIPU = "MIPU's main table (FP8 rollout, Qwen3-1.7B, Pass@1 average; its baseline stands for GRPO)"
MIPU_SCORES = {"mipu": 53.97, "grpo": 50.86}


@dataclass(frozen=True)
class PaperEffect:
    effect: float
    """arm − baseline as the paper reports it, a difference of success rates."""
    source: str
    """Where the number is from, in one line."""


def _table(suites: tuple[str, ...], scores: dict[str, float], arms: tuple[str, ...], source: str
           ) -> dict[tuple[str, str, str], PaperEffect]:
    return {(suite, arm, base): PaperEffect(round((scores[arm] - scores[base]) / 100, 4),
                                            f"{source}: {scores[arm]:.2f} vs {scores[base]:.2f}")
            for suite in suites for arm in arms for base in scores if base != arm and base not in arms}


PAPER_EFFECTS: dict[tuple[str, str, str], PaperEffect] = {
    # ALP Tables 1-3's claim (Token/Seq-ALP against GRPO, Seq-Bypass, Token-MIS, Seq-MIS), where the suites test it
    **_table(("alp", "long", "alp_acting"), ALP_TIR_SCORES, ("token_alp", "seq_alp"), ALP_TIR),
    # ALP Table 4: every partial range against all layers
    **_table(("layers",), ALP_LAYER_SCORES, ("layers_early", "layers_middle", "layers_late"), ALP_LAYERS),
    # MIPU's claim: better than its baseline under a quantized sampler
    **_table(("mismatch",), MIPU_SCORES, ("mipu",), MIPU),
}


def paper_effect(suite: str, arm: str, baseline: str) -> PaperEffect | None:
    """The paper's effect for arm − baseline in `suite` (arms as "method/setting"), by method and then by setting;
    None when the paper reports none."""
    (arm_method, arm_setting), (base_method, base_setting) = arm.split("/", 1), baseline.split("/", 1)
    return (PAPER_EFFECTS.get((suite, arm_method, base_method))
            or PAPER_EFFECTS.get((suite, arm_setting, base_setting)))
