"""Synthetic run directories for the run-report tests: metrics.jsonl with the keys trainer/ logs (issue 17's
contract), scatter samples and per-sample evaluations, written to disk as a real run leaves them."""

import json
from pathlib import Path

import numpy as np

STATS = ("p2", "p25", "p50", "p75", "p98", "min", "max", "clip_frac")


def write_jsonl(path: Path, records) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _ratio_stats(step: int, spread: float) -> dict:
    out = {}
    for kind in ("loss", "upd", "mis", "byp"):
        for suffix, widen in (("", 1.0), ("_last", 1.5)):
            w = spread * widen * (1 + step / 10)
            out |= {f"diag/ratio_{kind}{suffix}/{s}": v for s, v in zip(STATS, (
                1 - w, 1 - w / 4, 1.0, 1 + w / 4, 1 + w, 1 - 2 * w, 1 + 2 * w, 0.01 * step), strict=True)}
            for j in range(5):  # the lowest-μ bin is widest; bin 2 is empty at step 1
                empty = step == 1 and j == 2
                out[f"diag/ratio_{kind}{suffix}/bin{j}/p2"] = None if empty else 1 - w * (5 - j)
                out[f"diag/ratio_{kind}{suffix}/bin{j}/p98"] = None if empty else 1 + w * (5 - j)
    return out


def full_run(path: Path, steps: int = 6, spread: float = 0.02, seed: int = 0) -> Path:
    """A run with every diagnostic: ratio envelopes, dynamics, σ per layer, |Δp|, scatter samples, a 4-sample eval."""
    rng = np.random.default_rng(seed)
    records = [{"step": 0, "eval/success": 0.4}]
    for step in range(1, steps + 1):
        rec = {"step": step, "rollout/reward": 0.3 + 0.05 * step, "diag/grad_norm_preclip": 1.0 / step,
               "actor/grad_norm": 0.5 / step, "diag/entropy": 0.8 - 0.05 * step, "rollout_corr/kl": 1e-3 * step,
               "diag/policy_kl_k1": 2e-3, "diag/policy_kl_k3": 1.5e-3, "perturb/dp/p50": 0.01,
               "perturb/dp/p75": 0.02 + 0.001 * step, "perturb/dp/p99": 0.1,
               "perturb/sigma/layer_0": 0.01 * step, "perturb/sigma/layer_1": 0.02, "loss/policy": 0.1}
        records.append(rec | _ratio_stats(step, spread))
        if step in (1, steps):
            mu = rng.uniform(0.01, 1.0, 3000)
            train = np.clip(mu + rng.normal(0, 0.03, mu.shape), 0, 1)
            (path / "diagnostics").mkdir(parents=True, exist_ok=True)
            np.savez(path / "diagnostics" / f"scatter_step_{step}.npz", train_p=train.astype(np.float32),
                     rollout_p=mu.astype(np.float32))
    records[-1]["eval/success"] = 0.5
    write_jsonl(path / "metrics.jsonl", records)
    write_jsonl(path / "eval" / "step_0.jsonl", [{"index": t, "sample": s, "won": t < 4} for t in range(10)
                                                 for s in range(4)])
    # task t is won by samples s < wins[t]: with n = 4, pass@1 = mean(c)/4, pass@2 and pass@4 follow eq. 1
    wins = [4, 3, 2, 1, 1, 0, 0, 0, 0, 0]
    write_jsonl(path / "eval" / f"step_{steps}.jsonl", [{"index": t, "sample": s, "won": s < wins[t]}
                                                        for t in range(10) for s in range(4)])
    return path


def old_run(path: Path) -> Path:
    """A run from before issue 17: reward, the old grad norm and rollout_corr/kl only; one sample per task."""
    write_jsonl(path / "metrics.jsonl", [{"step": s, "rollout/reward": 0.1 * s, "actor/grad_norm": 1.0,
                                          "rollout_corr/kl": 0.001, "loss/policy": 0.1} for s in range(1, 4)])
    write_jsonl(path / "eval" / "step_3.jsonl", [{"index": t, "won": t % 2 == 0} for t in range(6)])
    return path
