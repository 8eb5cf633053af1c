"""What LoRA costs against full fine-tuning on one recipe, the same rollout batch for every setting (docs/lora.md).

Runs in one window, alternating the settings so the machine's load falls on each alike:

1. one rollout batch (step 1's) sampled from the start model, which every setting's first policy is;
2. per repetition and setting, in one process: `prepare_batch` (the θ_old forward), `update` (the mini-batch
   forward + backward + AdamW steps) and the engine sync, timed; the order alternates between repetitions;
3. per setting, a fresh process: the same stages three times on the saved batch, its peak RSS (the kernel's
   VmHWM: ru_maxrss would carry this parent's over `exec`).

Whole training runs mix these costs with each policy's own episodes (a LoRA run samples other replies than a full
one), which is why the stages are timed on one batch. Prints a JSON summary (medians) and writes it to --out.

    python bench/lora_cost.py --config configs/demo.yaml --settings full,r32,r8 sft.output_dir=runs/demo/sft

A setting is `full` or `r<rank>`; LoRA settings run at --lora-lr (1e-3: ten times the demo's full fine-tuning lr).
Overrides after the options apply to every setting; torch runs on the recipe's torch_threads (1 where it sets none).
"""

from __future__ import annotations

import argparse
import json
import pickle
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def setting_overrides(setting: str, lora_lr: float) -> list[str]:
    """`full` → none; `r32` → LoRA at rank 32 and the LoRA learning rate."""
    if setting == "full":
        return []
    if not (setting.startswith("r") and setting[1:].isdigit() and int(setting[1:]) > 0):
        raise SystemExit(f"lora_cost: setting {setting!r}: expected full or r<rank>, e.g. r32")
    return [f"model.lora.r={int(setting[1:])}", f"optim.lr={lora_lr}"]


def build(config: str, overrides: list[str], out_dir: str):
    import torch

    from trainer.components import build_components
    from trainer.loop import seed_everything
    from trainer.setup.build import build_config

    cfg = build_config(config or None, ["rollout.engine=hf", *overrides, f"output_dir={out_dir}"])
    torch.set_num_threads(cfg.torch_threads or 1)
    seed_everything(cfg.seed)
    return build_components(cfg), cfg


def stages(c, cfg, trajs) -> tuple[float, float, float]:
    """Seconds of prepare_batch, update, sync on `trajs`."""
    from trainer.loop import prepare_batch, update

    t0 = time.perf_counter()
    batch, _ = prepare_batch(c, cfg, trajs)
    t1 = time.perf_counter()
    update(c, cfg, batch, 1)
    t2 = time.perf_counter()
    c.sync_engine()
    return t1 - t0, t2 - t1, time.perf_counter() - t2


def peak_child(args: argparse.Namespace, setting: str, batch_file: Path) -> dict:
    """Run `--child` for one setting in a fresh process; its JSON line."""
    cmd = [sys.executable, __file__, "--config", args.config, "--lora-lr", str(args.lora_lr), "--child", setting,
           "--batch", str(batch_file), *args.overrides]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=3600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode or not lines:
        raise SystemExit(f"lora_cost: the {setting} process failed: {proc.stderr[-2000:]}")
    return json.loads(lines[-1])


def peak_rss_gib() -> float:
    """This process's peak resident set size: VmHWM, which starts afresh at `exec` (Linux), else ru_maxrss."""
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2**20  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def child(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory() as work:
        c, cfg = build(args.config, [*args.overrides, *setting_overrides(args.child, args.lora_lr)], work)
        trajs = pickle.loads(Path(args.batch).read_bytes())
        built = peak_rss_gib()
        for _ in range(3):
            stages(c, cfg, trajs)
        peak = peak_rss_gib()
        c.close()
    print(json.dumps({"setting": args.child, "rss_after_build_gib": built, "peak_rss_gib": peak}))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="configs/demo.yaml", help="a recipe ('': the defaults)")
    p.add_argument("--settings", default="full,r32,r8", help="comma-separated: full, r<rank>")
    p.add_argument("--lora-lr", type=float, default=1e-3)
    p.add_argument("--reps", type=int, default=6)
    p.add_argument("--out", default="", help="write the JSON summary here too")
    p.add_argument("--child", default="", help=argparse.SUPPRESS)
    p.add_argument("--batch", default="", help=argparse.SUPPRESS)
    p.add_argument("overrides", nargs="*", help="key=value overrides for every setting")
    args = p.parse_args(argv)
    if args.child:
        return child(args)
    from trainer.loop import collect_rollouts

    settings = [s for s in args.settings.split(",") if s]
    with tempfile.TemporaryDirectory() as work:
        built = {s: build(args.config, [*args.overrides, *setting_overrides(s, args.lora_lr)], f"{work}/{s}")
                 for s in settings}
        c0, cfg0 = built[settings[0]]
        trajs = collect_rollouts(c0, cfg0, 1)  # every setting's first policy is the start model
        batch_file = Path(work) / "batch.pkl"
        batch_file.write_bytes(pickle.dumps(trajs))
        times = {s: {"prepare_s": [], "update_s": [], "sync_s": []} for s in settings}
        for rep in range(args.reps):
            for s in (settings if rep % 2 == 0 else settings[::-1]):
                for key, value in zip(times[s], stages(*built[s], trajs), strict=True):
                    times[s][key].append(value)
        for c, _ in built.values():
            c.close()
        peaks = [peak_child(args, s, batch_file) for s in settings]
    summary = {"episodes": len(trajs), "sampled_tokens": sum(int(sum(t.loss_mask)) for t in trajs),
               "reps": args.reps, "median_s": {s: {k: statistics.median(v) for k, v in d.items()}
                                               for s, d in times.items()},
               "peak_rss_gib": {r["setting"]: r["peak_rss_gib"] for r in peaks}}
    print(json.dumps(summary, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(summary | {"all_s": times}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
