"""`alprl experiment SUITE`: the papers' comparisons as a grid of cells, method × setting × seed.

A *setting* is a named set of config overrides (a mismatch, a layer range, a σ0/lr pair); a *cell* is one
`alprl train` run of one method (a preset of configs/algorithms/) under one setting with one seed, in
`<out>/<method>__<setting>__seed<k>/`, an ordinary run directory. What keeps cells comparable:
- the same SFT start: every cell trains from one warm start (`model.path=`), the recipe's `sft.output_dir`
  (built once if missing; `--scale smoke` builds a tiny one in `<out>/sft` so the recipe's is never rebuilt);
  the warm start's own seed is `sft.seed`, not the cells' RL `seed`, so cells of every seed start from the same weights;
- the same tasks for a given seed: training tasks and evaluation sampling derive from `seed` only
  (trainer/tasks.py, trainer/setup/saved_config.py `eval_settings`);
- the same held-out tasks: test indices 0..eval_tasks-1 of the run's own evaluation after its last step.

Override order, later wins: the recipe (`--config`; its own `algorithm:` preset is replaced by the cell's) ← the
cell's method preset (`algorithm=`) ← the scale's sizes (with a suite's own evaluation interval, `Horizon`) ← the
user's key=value overrides ← the setting's overrides ← the cell's seed, steps, start and run directory. The method
sits above the recipe, unlike `alprl train`'s defaults ← preset ← recipe (trainer/setup/build.py `build_config`): a
suite compares methods as their presets define them, so a recipe's algo keys (the household recipe's loss_agg)
must not reach its cells (app/experiments/run.py `cell_config`). A user override of a key that a setting varies
is refused (the cell names would lie). The suites themselves (settings, comparisons, the primary family) are in
app/experiments/suites.py; running, resuming and the report are in app/experiments/run.py and
evaluation/reports/experiment_report.py.
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
    # The recipe's sizes, fewer steps and one final evaluation on 100 tasks × 2 samples. On the demo recipe with the
    # transformers engine (`auto`'s choice there: 5-7 s an RL step, ~7 s start-up on 2 cores) a grpo/lag2 cell took
    # 65-85 s, with vLLM 148-186 s (bench/demo_engine.py, 2026-12-06, beside other work): the alp suite's 36 cells
    # ≈ 45 min one at a time, plus the SFT warm start when it is missing (~6-9 min).
    "default": Scale("default", ("eval_tasks=100", "eval_samples=2", "eval_every=0", "eval_at_start=false"),
                     seeds=(0, 1, 2), steps=10, robustness_tasks=32,
                     summary="the recipe's sizes, 10 steps, one evaluation of 100 tasks x 2 samples, seeds 0,1,2; "
                     "demo recipe: ~1.3 min a cell, alp (36 cells) ~45 min on 2 cores (+ ~6-9 min SFT if missing)"),
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
    reach_arm: str = ""
    """An arm whose endpoint the others claim to reach (the synchronous result): when it runs, the report gives
    each run's first evaluation at or above that endpoint (evaluation/reports/long_horizon_report.py)."""
    primary: Callable[[str, str], bool] | None = None
    """Which (arm, against) comparisons test the papers' claim: the primary family, declared with the suite before
    its cells run, over which the report's Holm correction runs; the rest are printed as exploratory. None: every
    comparison is primary."""


def suite_scale(suite: Suite, scale: Scale) -> Scale:
    """`scale` as `suite` runs it: with the suite's own steps, periodic evaluation and seeds at that scale."""
    horizon = suite.horizons.get(scale.name)
    if horizon is None:
        return scale
    kept = tuple(o for o in scale.overrides if not o.startswith("eval_every="))
    return replace(scale, overrides=(*kept, f"eval_every={horizon.eval_every}"), steps=horizon.steps,
                   seeds=horizon.seeds or scale.seeds)


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

    def primary(self) -> list[tuple[str, str]]:
        """The comparisons the suite declares primary (all of them when it declares none)."""
        declared = self.suite.primary
        return [(a, b) for a, b in self.comparisons() if declared is None or declared(a, b)]

    def describe(self) -> dict:
        """experiment.json: what the report reads besides the cells' own directories."""
        settings = {c.setting.name: list(c.setting.overrides) for c in self.cells}
        return {"suite": self.suite.name, "doc": self.suite.doc, "claim": self.suite.claim, "scale": self.scale.name,
                "config": self.config, "horizon_report": self.suite.horizon_report,
                "seeds": self.seeds, "steps": self.steps, "start": self.start, "overrides": self.common,
                "settings": settings, "arms": list(dict.fromkeys(c.arm for c in self.cells)),
                "comparisons": [list(p) for p in self.comparisons()],
                "primary": [list(p) for p in self.primary()],
                "cells": [{"name": c.name, "arm": c.arm, "method": c.method, "setting": c.setting.name,
                           "seed": c.seed} for c in self.cells]} | self._reach()

    def _reach(self) -> dict:
        return {"reach": self.suite.reach_arm} if self.suite.reach_arm in {c.arm for c in self.cells} else {}


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
