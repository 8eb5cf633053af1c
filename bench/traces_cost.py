"""What episodes of several traces cost and give: a run against its one-stream twin, read from the two run folders.

    python bench/traces_cost.py --baseline runs/keep_demo --run runs/strip_demo --out docs/performance/traces.json

For each run: its warm start's SFT sequences (one per trace), expert success and final loss where its folder is
at hand, held-out success at its first and last evaluation with the paired change and its 95% bootstrap
interval over tasks (the run report's "Held-out change"), and per-step means of what a trace costs: rows and tokens
each forward runs over (`perf/batch_tokens`: a trace repeats its history in its prompt), traces per episode,
compactions and the prompt tokens they took out, sampled tokens, episodes the context cut short
(`rollout/infra_failures/context_overflow`), step seconds. Then the run's ratio to the baseline for the cost figures.
Both runs should share the machine's window (nothing else running), as every bench here. The source commit and the
settings that differ come from each run's `run_meta.json` and its last checkpoint's `alprl_config.yaml`.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import yaml

from evaluation.reports.run_report import eval_changes, read_jsonl

STEP_KEYS = ("perf/batch_tokens", "rollout/traces_per_episode", "rollout/turns", "rollout/compactions",
             "rollout/compacted_tokens", "rollout/sampled_tokens", "rollout/infra_failures/context_overflow", "rollout/reward", "perf/step_s",
             "perf/rollout_s", "perf/update_s")
COST_KEYS = ("perf/batch_tokens", "perf/step_s", "perf/rollout_s", "perf/update_s", "rollout/sampled_tokens")
SETTINGS = ("env.think_history", "env.context", "env.context_budget", "env.style", "model.path", "model.chat_template",
            "sft.expert_thinking", "rollout.max_model_len", "rollout.engine")


def _setting(config: dict[str, Any], dotted: str) -> Any:
    value: Any = config
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def summarize(run: Path) -> dict[str, Any]:
    """One run folder's figures (module docstring)."""
    steps = [r for r in read_jsonl(run / "metrics.jsonl") if "rollout/reward" in r]
    if not steps:
        raise SystemExit(f"traces_cost: {run} has no training steps in metrics.jsonl")
    means = {k: statistics.fmean(float(r.get(k, 0.0)) for r in steps) for k in STEP_KEYS}
    changes = eval_changes(run)
    if not changes:
        raise SystemExit(f"traces_cost: {run} has fewer than two held-out evaluations (eval/step_*.jsonl)")
    first, last, change = changes[-1]
    meta = json.loads((run / "run_meta.json").read_text()) if (run / "run_meta.json").is_file() else {}
    saved = sorted(run.glob("checkpoints/step_*/alprl_config.yaml"), key=lambda p: int(p.parent.name[5:]))
    config = yaml.safe_load(saved[-1].read_text()) if saved else {}  # the run config every checkpoint keeps
    start = Path(_setting(config, "model.path") or _setting(config, "sft.output_dir") or "") / "sft_meta.json"
    warm = json.loads(start.read_text()) if start.is_file() else {}  # the warm start's own facts, where it is here
    return {"run": str(run), "source": meta.get("source"), "steps": len(steps),
            "warm_start": {k: warm[k] for k in ("num_examples", "expert_success", "final_loss") if k in warm},
            "settings": {k: _setting(config, k) for k in SETTINGS},
            "held_out": {"first_step": first, "last_step": last, **change}, "step_means": means}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--baseline", required=True, help="the one-stream run folder")
    p.add_argument("--run", required=True, action="append", help="a run of several traces (repeatable)")
    p.add_argument("--out", help="write the figures here as JSON")
    args = p.parse_args(argv)
    base = summarize(Path(args.baseline))
    out = {"baseline": base, "runs": []}
    for run in args.run:
        summary = summarize(Path(run))
        summary["ratio_to_baseline"] = {k: summary["step_means"][k] / base["step_means"][k]
                                        for k in COST_KEYS if base["step_means"][k]}
        out["runs"].append(summary)
    for s in [base, *out["runs"]]:
        h, m = s["held_out"], s["step_means"]
        print(f"{s['run']}: held-out {h['before']:.3f} -> {h['after']:.3f} ({h['diff']:+.3f} "
              f"[{h['diff_ci_lo']:+.3f}, {h['diff_ci_hi']:+.3f}], steps {h['first_step']}-{h['last_step']}); "
              f"traces/episode {m['rollout/traces_per_episode']:.2f}, batch tokens {m['perf/batch_tokens']:.0f}, "
              f"step {m['perf/step_s']:.2f} s" + "".join(f"; {k} x{v:.2f}" for k, v in
                                                        s.get("ratio_to_baseline", {}).items()))
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
