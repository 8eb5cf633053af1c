"""`alprl demo`: SFT warm start (cached) → held-out eval → GRPO → held-out eval → report.

Everything runs on CPU with the tiny embedded model; `configs/demo.yaml` holds the settings.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from evaluation.reports.run_report import write_report
from sandbox.deploy.local_server import serve_in_background
from trainer.config.train_config import TrainConfig
from trainer.loop import train
from trainer.sft.train import run_sft


def run_demo(cfg: TrainConfig, console: Console | None = None) -> dict[str, Any]:
    """Run the demo; code runs through the sandbox HTTP service (a local one is started if no URL is set)."""
    console = console or Console()
    if cfg.env.sandbox_url:
        return _run_demo(cfg, console)
    with serve_in_background(workers=2) as url:
        console.print(f"sandbox service started at {url} (set env.sandbox_url=<url> to use your own)")
        cfg.env.sandbox_url = url
        return _run_demo(cfg, console)


def _run_demo(cfg: TrainConfig, console: Console) -> dict[str, Any]:
    run_dir = Path(cfg.output_dir)
    start = time.monotonic()
    console.rule("[bold]1/3 SFT warm start (imperfect expert)")
    sft_dir = run_sft(cfg)
    if cfg.model.path:  # the SFT fine-tuned the checkpoint there; RL starts from the fine-tuned copy
        cfg.model.path = str(sft_dir)
    sft_meta = json.loads((sft_dir / "sft_meta.json").read_text())
    console.print(f"SFT model: {sft_dir}  ({sft_meta['num_parameters'] / 1e6:.2f} M parameters, "
                  f"expert data success {sft_meta['expert_success']:.2f})")
    console.rule("[bold]2/3 GRPO on the TIR environment")
    results = train(cfg, evaluate_at_start=True)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    before = next(r["eval/success"] for r in records if r["step"] == 0)
    after = results[-1].metrics["eval/success"]
    summary = {"held_out_success_sft": before, "held_out_success_rl": after,
               "improvement_points": 100 * (after - before), "rl_steps": cfg.steps,
               "eval_tasks": cfg.eval_tasks, "wall_time_min": (time.monotonic() - start) / 60,
               "sft_model": str(sft_dir), "final_checkpoint": str(run_dir / "checkpoints")}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    console.rule("[bold]3/3 Report")
    report = write_report(run_dir, title="alprl demo: tiny TIR agent, SFT → GRPO")
    console.print(f"held-out success: SFT start {before:.1%} → after RL {after:.1%} "
                  f"({summary['improvement_points']:+.1f} points) in {summary['wall_time_min']:.1f} min")
    console.print(f"report: {report}")
    return summary
