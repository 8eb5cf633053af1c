"""Engine choice on the TIR demo: `alprl demo` and one `alp` experiment cell with each rollout engine, alternating.

    python bench/demo_engine.py [--engines vllm,auto] [--repeats 2] [--cell-scale default] [--no-cell]
                                [--out FILE.json] [key=value ...]

What it answers: what a user's `make demo` and an experiment's cell cost with `rollout.engine=vllm` (the choice
`auto` made on every machine until it weighed the model) against `auto` (on a CPU and a model of at most 50M
parameters, the transformers engine), measured back to back in the same window.

What runs. The demo's SFT start is built once first when missing (`alprl sft`, no engine involved, timed on its
own), so every run below reuses it. Then, repeat by repeat, each engine in turn (the order flips every repeat, so
neither always runs on a warmer machine): `alprl demo` (held-out evaluation of the start, RL, evaluation, report)
into a fresh folder, then `alprl experiment alp --methods grpo --settings lag2 --seeds 0` at --cell-scale into a
fresh folder (its cell trains, evaluates and writes the suite's report). key=value overrides are alprl config keys
given to both commands (the bench adds `rollout.engine=` last; `steps=` reaches the cell as --steps).

Figures per run: wall (launch → exit); start-up (launch → start of RL step 1: the demo's evaluation of the start
is inside it); RL step s, mean of steps 2..N, and its generation share (perf/rollout_s); peak memory (the largest
sum of RSS over the process tree, polled every 50 ms); held-out success (the demo's summary.json: after SFT and
after RL; the cell's final evaluation). The table shows each engine's mean over repeats (min–max) and the ratio
of means auto/vllm (below 1: auto is ahead). Exit status 1 when a run failed, 2 on bad input.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _load_sibling(name: str):
    """bench/<name>.py by path (bench/ is no package)."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


WATCH = _load_sibling("process_watch")
ENGINES = ("auto", "vllm", "hf")
CELL = ("alp", "grpo", "lag2", 0)  # suite, method, setting, seed: the suite's baseline arm
FIGURES = [  # (record key, row label)
    ("wall_s", "wall s (launch → exit)"),
    ("startup_s", "start-up s (launch → RL step 1)"),
    ("step_s", "RL step s (mean of steps 2..N)"),
    ("gen_s", "  generation s"),
    ("peak_gib", "peak memory GiB (tree RSS)"),
    ("success_sft", "held-out success after SFT"),
    ("success", "held-out success at the end"),
]


class BenchError(Exception):
    """Bad input: one line on stderr, exit status 2."""


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "app.cli", *args]


def step_figures(metrics: Path, w) -> dict:
    """Start-up and steady RL step figures of one run's metrics.jsonl (steps 2..N; step 1 pays for warm-up)."""
    records = sorted((r for r in map(json.loads, metrics.read_text().splitlines()) if "perf/step_s" in r),
                     key=lambda r: r["step"])
    if not records:
        return {}
    steady = records[1:] or records
    first = records[0]
    return {"startup_s": w.arrivals[first["step"]] - first["perf/step_s"] - w.launch,
            "step_s": statistics.fmean(r["perf/step_s"] for r in steady),
            "gen_s": statistics.fmean(r["perf/rollout_s"] for r in steady)}


def run_demo(work: Path, engine: str, repeat: int, overrides: list[str], timeout_s: float) -> dict:
    out = work / f"demo-{engine}-{repeat}"
    w = WATCH.watch(_cli("demo", "--no-progress", *overrides, f"output_dir={out}", f"rollout.engine={engine}"),
                    work / f"{out.name}.log", timeout_s, metrics=out / "metrics.jsonl")
    record = {"run": "demo", "engine": engine, "repeat": repeat, "rc": w.rc, "wall_s": w.exit - w.launch,
              "peak_gib": w.peak_bytes / 2**30}
    if w.rc != 0:
        return {**record, "error": WATCH.crash_line(work / f"{out.name}.log")}
    summary = json.loads((out / "summary.json").read_text())
    return {**record, **step_figures(out / "metrics.jsonl", w), "success_sft": summary["held_out_success_sft"],
            "success": summary["held_out_success_rl"],
            "engine_used": _engine_used(work / f"{out.name}.log", engine)}


def run_cell(work: Path, engine: str, repeat: int, overrides: list[str], scale: str, timeout_s: float) -> dict:
    suite, method, setting, seed = CELL
    out = work / f"cell-{engine}-{repeat}"
    steps = [o.split("=", 1)[1] for o in overrides if o.startswith("steps=")]  # the suite's own knob: --steps
    overrides = [o for o in overrides if not o.startswith("steps=")]
    metrics = out / f"{method}__{setting}__seed{seed}" / "metrics.jsonl"
    w = WATCH.watch(_cli("experiment", suite, "--methods", method, "--settings", setting, "--seeds", str(seed),
                         "--scale", scale, "--out", str(out), "--no-progress", *(["--steps", steps[-1]] if steps else []),
                         *overrides,
                         f"rollout.engine={engine}"), work / f"{out.name}.log", timeout_s, metrics=metrics)
    record = {"run": "cell", "engine": engine, "repeat": repeat, "rc": w.rc, "wall_s": w.exit - w.launch,
              "peak_gib": w.peak_bytes / 2**30}
    if w.rc != 0 or not metrics.exists():
        return {**record, "rc": w.rc or 1, "error": WATCH.crash_line(work / f"{out.name}.log")}
    evals = [r["eval/success"] for r in map(json.loads, metrics.read_text().splitlines()) if "eval/success" in r]
    return {**record, **step_figures(metrics, w), "success": evals[-1] if evals else None,
            "engine_used": _engine_used(work / f"{out.name}.log", engine)}


def _engine_used(log: Path, engine: str) -> str:
    """The engine the run sampled with: `auto` says its choice on stderr (trainer/components.py)."""
    found = re.findall(r"rollout\.engine=auto chose (\w+)", log.read_text(errors="replace"))
    return found[-1] if found else engine


def summarize(records: list[dict], engines: list[str]) -> dict:
    """Per run kind and engine: mean (min, max) of each figure over the repeats that finished."""
    out: dict = {}
    for kind in ("demo", "cell"):
        for engine in engines:
            done = [r for r in records if r["run"] == kind and r["engine"] == engine and r["rc"] == 0]
            figures = {}
            for key, _ in FIGURES:
                values = [r[key] for r in done if r.get(key) is not None]
                if values:
                    figures[key] = {"mean": statistics.fmean(values), "min": min(values), "max": max(values)}
            if done:
                out.setdefault(kind, {})[engine] = figures
    return out


def table(summary: dict, engines: list[str]) -> str:
    lines = []
    for kind, per_engine in summary.items():
        lines += [f"\n{kind}:", "| | " + " | ".join(engines) + " | ratio " + "/".join(reversed(engines)) + " |",
                  "|---" * (len(engines) + 2) + "|"]
        for key, label in FIGURES:
            cells = [per_engine.get(e, {}).get(key) for e in engines]
            if not any(cells):
                continue
            shown = [f"{c['mean']:.3g} ({c['min']:.3g}–{c['max']:.3g})" if c else "–" for c in cells]
            ratio = (f"{cells[-1]['mean'] / cells[0]['mean']:.2f}" if all(cells) and cells[0]["mean"]
                     and not key.startswith("success") else "")
            lines.append(f"| {label} | " + " | ".join(shown) + f" | {ratio} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engines", default="vllm,auto", help="comma-separated rollout engines (default vllm,auto)")
    p.add_argument("--repeats", type=int, default=2, help="runs of each engine (default 2)")
    p.add_argument("--cell-scale", default="default", help="`alprl experiment --scale` of the cell (default "
                   "default; smoke for a quick check)")
    p.add_argument("--no-cell", action="store_true", help="measure the demo only")
    p.add_argument("--timeout", type=float, default=3600, help="seconds a run may take (default 3600)")
    p.add_argument("--work", default=None, help="folder for the runs (default: a fresh temporary folder)")
    p.add_argument("--out", default=None, help="write the records and the summary to this JSON file")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="alprl config overrides of every run")
    args = p.parse_args(argv)
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    bad = [e for e in args.engines if e not in ENGINES]
    if bad or not args.engines:
        raise BenchError(f"--engines {','.join(args.engines)}: expected some of {', '.join(ENGINES)}")
    if args.repeats < 1:
        raise BenchError(f"--repeats {args.repeats}: expected a positive number")
    if any("=" not in o for o in args.overrides):
        raise BenchError(f"overrides must be key=value, got {[o for o in args.overrides if '=' not in o]}")
    return args


def build_start(work: Path, overrides: list[str], timeout_s: float) -> dict:
    """The demo's SFT start, once: cached by `alprl sft` (a rerun with the same config returns at once)."""
    w = WATCH.watch(_cli("sft", "--config", "configs/demo.yaml", "--no-progress", *overrides),
                    work / "sft.log", timeout_s)
    if w.rc != 0:
        raise SystemExit(f"demo_engine: the SFT start failed: {WATCH.crash_line(work / 'sft.log')}")
    return {"run": "sft", "rc": 0, "wall_s": w.exit - w.launch, "peak_gib": w.peak_bytes / 2**30}


def _say(record: dict) -> None:
    print(f"{record['run']} {record['engine']} #{record['repeat']}: "
          + (f"{record['wall_s']:.1f} s" if record["rc"] == 0 else record["error"]), flush=True)


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
    except BenchError as exc:
        print(f"demo_engine: error: {exc}", file=sys.stderr)
        return 2
    work = Path(args.work or tempfile.mkdtemp(prefix="demo_engine_"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    records = [build_start(work, args.overrides, args.timeout)]
    print(f"SFT start: {records[0]['wall_s']:.1f} s (0 when it was cached)", flush=True)
    for repeat in range(args.repeats):
        order = args.engines if repeat % 2 == 0 else list(reversed(args.engines))
        for engine in order:
            records.append(run_demo(work, engine, repeat, args.overrides, args.timeout))
            _say(records[-1])
            if not args.no_cell:
                records.append(run_cell(work, engine, repeat, args.overrides, args.cell_scale, args.timeout))
                _say(records[-1])
    summary = summarize(records, args.engines)
    print(f"\nbench/demo_engine.py, started {started}, {args.repeats} repeat(s), work {work}", table(summary,
          args.engines), sep="")
    if args.out:
        Path(args.out).write_text(json.dumps({"started": started, "args": vars(args), "records": records,
                                              "summary": summary}, indent=1) + "\n")
    return 1 if any(r["rc"] != 0 for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
