"""Peer bench: alprl against Hugging Face TRL's GRPOTrainer on alprl's single-turn recipe, same work, same window.

    python bench/trl_peer.py [--config configs/math_tiny.yaml] [--steps 10] [--seeds 0,1,2,3,4]
                             [--alprl-engine auto,hf] [--trl-vllm] [--eval-tasks K] [--model DIR | --build-start]
                             [--out FILE.json] [key=value ...]

Someone comparing trainers runs both on the same work, alternating, in the same window, and reads one table.

What runs. For each seed in turn: `alprl train` once per --alprl-engine (rollout.engine=...), then TRL's
GRPOTrainer with HF generate, then (--trl-vllm) with vLLM colocate; each a process of its own launched from here,
so load from other work on a shared machine falls on every variant alike. key=value overrides are alprl config
keys and change both trainers: the TRL side reads the same config through `trl_mapping`
(bench/trl_peer_trl.py), and the report opens with what maps to what and what cannot be matched. Both start from
the same warm start: the recipe's (`alprl sft --config ...`, built first with --build-start) or --model DIR.

The same work. TRL's dataset is alprl's own train draws of each step, in order, rendered by alprl's agent; the TRL
process tokenizes every prompt through TRL's own path and requires alprl's ids token for token, and checks that
each of its generations played the tasks of the same alprl step. Its reward function is alprl's env. A check that
fails ends that run as crashed, with the reason.

Figures per run:
- start-up: launch → start of step 1. alprl: the arrival of step 1's record in <run>/metrics.jsonl minus that
  step's perf/step_s; TRL: the begin of its first optimizer step (a TrainerCallback in the child);
- step: wall of one RL step (one rollout batch and its optimizer steps), mean over steps 2..N, split into
  generation (alprl perf/rollout_s; TRL `_generate` + `_calculate_rewards`) and the rest (update, sync);
- wall: launch → exit, the final save included;
- peak memory: the largest sum of RSS over the process and all its descendants (vLLM's engine processes, grading
  children), polled every 50 ms; pages shared between processes count once per process;
- generation tokens/s: sampled tokens over generation seconds, steps 2..N;
- reward: the mean rollout reward over all steps, a sanity figure (same tasks, same start), not a speed;
- held-out success (--eval-tasks K): `alprl eval` on each final model, the test split's first K tasks, the same
  samples, sampling and seed for every model.
The table: per variant, the mean over seeds (min–max). `ratio alprl[...]/<peer>` lines divide means (time and
memory below 1, tokens/s above 1: alprl ahead), against each peer and the best peer per figure; `peer ahead` lines
name every figure where a peer beats alprl. Exit status 1 when an alprl or trl[hf] run failed (a trl[vllm] crash
is reported, not failed), 2 on bad input.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from agents.engines import auto_engine  # noqa: E402
from app.eval_plan import model_parameters  # noqa: E402
from trainer.config.errors import ConfigError  # noqa: E402
from trainer.setup.build import build_config  # noqa: E402


def _load_sibling(name: str):
    """bench/<name>.py by path (bench/ is no package), also when this file is itself loaded by path."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


TRL = _load_sibling("trl_peer_trl")
WATCH = _load_sibling("process_watch")
Watched, watch, crash_line = WATCH.Watched, WATCH.watch, WATCH.crash_line
ENGINES = ("auto", "vllm", "hf")
FIGURES = [  # (record key, row label, which way is better: low | high | None (not a speed), ratio name)
    ("startup_s", "start-up s (launch → step 1)", "low", "start-up"),
    ("step_s", "step s (mean of steps 2..N)", "low", "step"),
    ("gen_s", "  generation s", "low", None),
    ("rest_s", "  rest s (update, sync)", "low", None),
    ("wall_s", "wall s (launch → exit)", "low", "wall"),
    ("peak_gib", "peak memory GiB (tree RSS)", "low", "memory"),
    ("gen_tokens_per_s", "generation tokens/s", "high", "tokens/s"),
    ("reward_mean", "reward (mean over steps)", None, None),
    ("eval_success", "held-out success", None, None),
]


class BenchError(Exception):
    """Bad input: one line on stderr, exit status 2."""


@dataclass
class Bench:
    """What every run of this invocation shares."""

    config: str
    overrides: list[str]
    steps: int
    seeds: list[int]
    variants: list[str]  # alprl[<engine>]..., trl[hf], trl[vllm]
    start: Path  # the warm start both trainers load
    start_given: bool  # --model: alprl gets model.path=, else the recipe's sft.output_dir (checked by alprl)
    work: Path
    eval_tasks: int
    eval_samples: int
    eval_engine: str
    timeout_s: float
    cfg: object = None
    mapping: list = field(default_factory=list)  # TRL.Mapping of trl[hf], then of trl[vllm] (the same without it)
    records: list[dict] = field(default_factory=list)

    def run_overrides(self, seed: int, out: Path) -> list[str]:
        """The alprl config of one run: the user's keys, then the bench's own (later wins)."""
        return [*self.overrides, f"steps={self.steps}", f"seed={seed}", "eval_tasks=0", f"save_every={self.steps}",
                f"output_dir={out}", *([f"model.path={self.start}"] if self.start_given else [])]


# ---------------------------------------------------------------------------------------------- figures


def step_figures(startup: float, steps: list[dict]) -> dict:
    """The per-run figures from each RL step's wall, generation seconds, sampled tokens and mean reward."""
    steady = steps[1:] or steps  # steady state: step 1 pays for warm-up (caches, allocator, first sync)
    wall, gen = (statistics.fmean(s[k] for s in steady) for k in ("wall_s", "gen_s"))
    return {"startup_s": startup, "step_s": wall, "gen_s": gen, "rest_s": wall - gen,
            "gen_tokens_per_s": sum(s["tokens"] for s in steady) / max(sum(s["gen_s"] for s in steady), 1e-9),
            "reward_mean": statistics.fmean(s["reward"] for s in steps), "per_step": steps}


def alprl_figures(run_dir: Path, w: Watched) -> dict:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    records = sorted((r for r in map(json.loads, lines) if "perf/step_s" in r), key=lambda r: r["step"])
    steps = [{"wall_s": r["perf/step_s"], "gen_s": r["perf/rollout_s"], "reward": r["rollout/reward"],
              "tokens": r["perf/rollout_tokens_per_s"] * r["perf/rollout_s"]} for r in records]
    return step_figures(w.arrivals[records[0]["step"]] - records[0]["perf/step_s"] - w.launch, steps)


# ------------------------------------------------------------------------------------------------- runs


def run_alprl(bench: Bench, engine: str, seed: int) -> dict:
    run_dir = bench.work / f"alprl-{engine}-seed{seed}"
    cmd = [sys.executable, "-m", "app.cli", "train", "--config", bench.config, "--no-progress",
           *bench.run_overrides(seed, run_dir), f"rollout.engine={engine}"]
    log = bench.work / f"{run_dir.name}.log"
    w = watch(cmd, log, bench.timeout_s, metrics=run_dir / "metrics.jsonl")
    record = {"variant": f"alprl[{engine}]", "seed": seed, "log": str(log), "wall_s": w.exit - w.launch,
              "peak_gib": w.peak_bytes / 2**30}
    if w.rc != 0:
        return record | {"status": crash_line(log)}
    final = run_dir / "checkpoints" / f"step_{bench.steps}"
    return record | {"status": "ok", "final_model": str(final)} | alprl_figures(run_dir, w)


def run_trl(bench: Bench, vllm: bool, seed: int) -> dict:
    name = f"trl-{'vllm' if vllm else 'hf'}-seed{seed}"
    out, log = bench.work / name, bench.work / f"{name}.log"
    out.mkdir(parents=True, exist_ok=True)
    spec = {"config": bench.config, "overrides": bench.run_overrides(seed, out), "model": str(bench.start),
            "steps": bench.steps, "vllm": vllm, "out_dir": str(out), "record": str(out / "record.json")}
    (out / "spec.json").write_text(json.dumps(spec, indent=1))
    cmd = [sys.executable, str(Path(__file__).with_name("trl_peer_trl.py")), str(out / "spec.json")]
    w = watch(cmd, log, bench.timeout_s)
    record = {"variant": f"trl[{'vllm' if vllm else 'hf'}]", "seed": seed, "log": str(log),
              "wall_s": w.exit - w.launch, "peak_gib": w.peak_bytes / 2**30}
    if w.rc != 0 or not (out / "record.json").is_file():
        return record | {"status": crash_line(log)}
    child = json.loads((out / "record.json").read_text())
    checks = {k: child[k] for k in ("prompts_checked", "order_checked", "final_model", "device")}
    return record | {"status": "ok"} | checks | step_figures(child["first_step_begin"] - w.launch, child["rl_steps"])


def held_out(bench: Bench, record: dict) -> float | None:
    """`alprl eval` success of a run's final model, with the same flags for every model (module docstring)."""
    r, e = bench.cfg.rollout, bench.cfg.env
    out = bench.work / f"eval-{record['variant']}-seed{record['seed']}"
    cmd = [sys.executable, "-m", "app.cli", "eval", "--model", record["final_model"], "--bench", "math",
           "--mode", "single", "--k", str(bench.eval_samples), "--tasks", str(bench.eval_tasks),
           "--engine", bench.eval_engine, "--seed", "0", "--no-run-config", "--no-progress", "--out", str(out),
           "--max-tokens", str(r.max_response_tokens), "--max-new-tokens", str(r.max_new_tokens),
           "--temperature", str(r.temperature), "--top-p", str(r.top_p), "--top-k", str(r.top_k),
           f"env.difficulty={e.difficulty}", f"env.task_types=[{','.join(e.task_types)}]"]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        record["eval_error"] = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
        return None
    return json.loads((out / "summary.json").read_text())["benchmarks"]["math"]["avg"]


def run_all(bench: Bench) -> None:
    """Every variant of every seed, alternating; progress on stdout as the runs end."""
    for seed in bench.seeds:
        for variant in bench.variants:
            kind, engine = variant[:-1].split("[")
            record = (run_alprl(bench, engine, seed) if kind == "alprl"
                      else run_trl(bench, engine == "vllm", seed))
            if bench.eval_tasks and record["status"] == "ok":
                record["eval_success"] = held_out(bench, record)
            bench.records.append(record)
            print(f"seed {seed} {variant}: {record['status']}, wall {record['wall_s']:.1f} s", flush=True)


# ------------------------------------------------------------------------------------------------ report


def summarize(records: list[dict], variants: list[str]) -> dict:
    """Per variant: runs ok, the distinct failures, and mean / min / max / n of each figure over its ok runs."""
    out = {}
    for variant in variants:
        mine = [r for r in records if r["variant"] == variant]
        ok = [r for r in mine if r["status"] == "ok"]
        figures = {}
        for key, *_ in FIGURES:
            values = [r[key] for r in ok if r.get(key) is not None]
            if values:
                figures[key] = {"mean": statistics.fmean(values), "min": min(values), "max": max(values),
                                "n": len(values)}
        out[variant] = {"runs": len(mine), "ok": len(ok), "figures": figures,
                        "failures": sorted({r["status"] for r in mine if r["status"] != "ok"})}
    return out


def _num(x: float) -> str:
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.2f}" if abs(x) >= 1 else f"{x:.3f}"


def table(summary: dict) -> str:
    variants = list(summary)
    lines = ["| figure | " + " | ".join(variants) + " |", "|---|" + "---|" * len(variants),
             "| runs ok | " + " | ".join(f"{s['ok']}/{s['runs']}" for s in summary.values()) + " |"]
    for key, label, *_ in FIGURES:
        cells = []
        for s in summary.values():
            f = s["figures"].get(key)
            cells.append("-" if f is None else _num(f["mean"]) if f["n"] < 2
                         else f"{_num(f['mean'])} ({_num(f['min'])}–{_num(f['max'])})")
        if any(c != "-" for c in cells):
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


RATED = [(key, name, better) for key, _, better, name in FIGURES if name]


def _ratios(mine: dict, theirs: dict) -> list[tuple[str, float, bool]]:
    """(figure, alprl mean / peer mean, whether the peer is ahead) for each rated figure both sides have."""
    out = []
    for key, name, better in RATED:
        if key in mine and key in theirs and theirs[key]["mean"]:
            ratio = mine[key]["mean"] / theirs[key]["mean"]
            out.append((name, ratio, ratio > 1 if better == "low" else ratio < 1))
    return out


def ratio_lines(summary: dict) -> list[str]:
    """alprl/peer per alprl variant, against each peer and the best peer per figure; then where a peer is ahead."""
    ours = [v for v in summary if v.startswith("alprl")]
    peers = [v for v in summary if not v.startswith("alprl") and summary[v]["figures"]]
    lines, ahead = [], []
    for mine in ours:
        figures = summary[mine]["figures"]
        for peer in peers:
            ratios = _ratios(figures, summary[peer]["figures"])
            lines.append(f"ratio {mine}/{peer}: " + ", ".join(f"{name} {r:.2f}x" for name, r, _ in ratios))
            ahead += [f"peer ahead: {peer} on {name} ({mine} {r:.2f}x)" for name, r, behind in ratios if behind]
        best = []
        for key, name, better in RATED:
            have = [(summary[p]["figures"][key]["mean"], p) for p in peers if key in summary[p]["figures"]]
            if key in figures and have:
                value, peer = (min if better == "low" else max)(have)
                best += [f"{name} {figures[key]['mean'] / value:.2f}x ({peer})"] if value else []
        if peers:
            lines.append(f"ratio {mine}/best peer: {', '.join(best)}")
    return lines + (ahead or (["peer ahead: on none of the rated figures"] if peers else []))


def report(bench: Bench, summary: dict) -> str:
    checks = [r for r in bench.records if r.get("prompts_checked")]
    out = [table(summary), "",
           "ratios divide means: for time and memory below 1 = alprl takes less; for tokens/s above 1 = alprl faster",
           *ratio_lines(summary)]
    if checks:
        out += [f"prompts checked token for token: TRL's tokenization equals alprl's prompt ids in "
                f"{len(checks)} TRL runs ({checks[0]['prompts_checked']} prompts each, every row of the dataset)",
                f"task order checked: each TRL generation played alprl's draws of the same step "
                f"({checks[0]['order_checked']} steps a run)"]
    for variant, s in summary.items():
        out += [f"{variant}: {failure}" for failure in s["failures"]]
    return "\n".join(out)


def header(bench: Bench) -> str:
    auto, why = auto_engine(model_parameters(Path(bench.start)))
    lines = [f"# alprl vs TRL GRPOTrainer: {bench.config} {' '.join(bench.overrides)}".rstrip(),
             f"steps {bench.steps}, seeds {','.join(map(str, bench.seeds))}, variants {', '.join(bench.variants)} "
             f"(alprl engine auto = {auto} here: {why}); warm start {bench.start}", "",
             "GRPOConfig from the alprl config (trl_peer_trl.trl_mapping):",
             *bench.mapping[0].lines(bench.mapping[1])]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------- input


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/trl_peer.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="configs/math_tiny.yaml", help="the alprl recipe (default %(default)s)")
    p.add_argument("--steps", type=int, default=10, help="RL steps per run (default %(default)s; the step figures "
                   "are means over steps 2..N)")
    p.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated seeds (default %(default)s)")
    p.add_argument("--alprl-engine", default="auto", help="alprl rollout engines, one column each, comma-separated "
                   f"from {', '.join(ENGINES)} (default %(default)s)")
    p.add_argument("--trl-vllm", action="store_true", help="also run TRL with vLLM colocate (a crash is reported)")
    p.add_argument("--model", default="", help="warm start for both trainers (an HF model dir); default: the "
                   "recipe's sft.output_dir")
    p.add_argument("--build-start", action="store_true", help="build the recipe's warm start with `alprl sft` "
                   "first if it is missing (minutes)")
    p.add_argument("--eval-tasks", type=int, default=0, help="held-out tasks for `alprl eval` on every final "
                   "model: the generated alprl/Math-v0 test split at the recipe's difficulty and task types "
                   "(default 0: skip)")
    p.add_argument("--eval-samples", type=int, default=2, help="samples per held-out task (default %(default)s)")
    p.add_argument("--eval-engine", default="auto", choices=ENGINES, help="engine of the held-out evaluation")
    p.add_argument("--timeout-s", type=float, default=3600, help="a run still going after this is killed")
    p.add_argument("--work", default="", help="where runs write (default: a temporary directory, removed after)")
    p.add_argument("--out", default="", help="also write the mapping, per-run records and summary to this JSON")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="alprl config overrides, for both trainers "
                   "(e.g. rollout.prompts_per_step=4 diagnostics.every=0)")
    return p.parse_args(argv)


def _int_list(text: str, what: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BenchError(f"{what}: expected comma-separated integers, got {text!r}") from None


def warm_start(args: argparse.Namespace, config: str) -> tuple[Path, bool]:
    """The warm start both trainers load, and whether --model named it; builds the recipe's with --build-start."""
    if args.model:
        start = Path(args.model).expanduser().resolve()
        if not (start / "config.json").is_file():
            raise BenchError(f"--model {args.model}: no config.json there; give a Hugging Face model directory")
        return start, True
    cfg = build_config(config, args.overrides)
    start = (REPO / cfg.sft.output_dir).resolve()
    if not (start / "config.json").is_file():
        if not args.build_start:
            raise BenchError(f"no warm start at {start}: build it with `alprl sft --config {config}` (minutes), "
                             f"pass --build-start to have the bench build it, or --model DIR")
        print(f"building the warm start in {start} (alprl sft)", flush=True)
        done = subprocess.run([sys.executable, "-m", "app.cli", "sft", "--config", config, "--no-progress",
                               *args.overrides], cwd=REPO)
        if done.returncode != 0 or not (start / "config.json").is_file():
            raise BenchError(f"`alprl sft --config {config}` failed (exit status {done.returncode})")
    from trainer.sft.cache import check_warm_start

    check_warm_start(cfg)  # a start built for another recipe: ConfigError naming the keys
    return start, False


def prepare(args: argparse.Namespace) -> Bench:
    """Validate every input before the first run; BenchError or ConfigError on bad input."""
    config = str(Path(args.config).resolve()) if Path(args.config).exists() else args.config
    engines = [e.strip() for e in args.alprl_engine.split(",") if e.strip()]
    unknown = [e for e in engines if e not in ENGINES]
    if unknown or not engines:
        raise BenchError(f"--alprl-engine: unknown engine {', '.join(unknown) or '(none)'}; valid: {', '.join(ENGINES)}")
    seeds = _int_list(args.seeds, "--seeds")
    if args.steps < 1 or not seeds:
        raise BenchError("--steps must be ≥ 1 and --seeds name at least one seed")
    if importlib.util.find_spec("trl") is None:
        raise BenchError("TRL is not installed: pip install -e '.[bench]' (trl==1.16.0)")
    start, given = warm_start(args, config)
    bench = Bench(config, list(args.overrides), args.steps, seeds,
                  [f"alprl[{e}]" for e in engines] + ["trl[hf]"] + (["trl[vllm]"] if args.trl_vllm else []),
                  start, given, Path(args.work).resolve(), args.eval_tasks, args.eval_samples, args.eval_engine,
                  args.timeout_s)
    bench.cfg = build_config(config, bench.run_overrides(seeds[0], bench.work / "unused"))  # as the runs read it
    try:
        bench.mapping = [TRL.trl_mapping(bench.cfg, steps=args.steps, vllm=vllm) for vllm in (False, args.trl_vllm)]
    except ValueError as exc:
        raise BenchError(str(exc)) from None
    if not args.work:  # made only once the input is known good, so an error leaves nothing behind
        bench.work = Path(tempfile.mkdtemp(prefix="trl_peer-"))
    bench.work.mkdir(parents=True, exist_ok=True)
    return bench


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        bench = prepare(args)
    except (BenchError, ConfigError) as exc:
        print(f"trl_peer: error: {exc}", file=sys.stderr)
        return 2
    print(header(bench), "\n", flush=True)
    try:
        run_all(bench)
        summary = summarize(bench.records, bench.variants)
        print("\n" + report(bench, summary))
        if args.out:
            Path(args.out).write_text(json.dumps({
                "config": bench.config, "overrides": bench.overrides, "steps": bench.steps, "seeds": bench.seeds,
                "mapping": {variant: [list(row) for row in mapping.rows] for variant, mapping
                            in zip(("trl[hf]", "trl[vllm]"), bench.mapping, strict=True) if variant in bench.variants},
                "unmatched": bench.mapping[0].unmatched,
                "records": bench.records, "summary": summary}, indent=1, default=str))
    finally:
        if not args.work:
            shutil.rmtree(bench.work, ignore_errors=True)
    stock_failed = any(r["status"] != "ok" for r in bench.records if r["variant"] != "trl[vllm]")
    return 1 if stock_failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
