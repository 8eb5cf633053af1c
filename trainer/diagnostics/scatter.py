"""Scatter samples of trainer vs rollout token probabilities (ALP paper Fig. 10).

On the steps `is_periodic_step` picks (every `diagnostics.scatter_every` steps, the first and the last), a fixed-size
seeded sample of the sampled tokens' (π_train(θ_old), μ) probabilities is written to
`<run>/diagnostics/scatter_step_<k>.npz` (arrays `train_p`, `rollout_p`, float32, same length ≤ `scatter_points`)
and its Pearson r is logged as `diag/scatter_pearson_r`. The sample, not the whole batch, is kept so a run's
directory stays small; the seed derives from (seed, step) so a resumed run writes the same file. `evaluation/reports/run_report.py`
draws them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from envs.splits import derive_seed


def is_periodic_step(step: int, every: int, first: int, last: int) -> bool:
    """The first and last step always; every `every`-th step in between (every = 0: only those two)."""
    return step in (first, last) or (every > 0 and step % every == 0)


def scatter_sample(old_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor, *, seed: int,
                   max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """(train_p, rollout_p) of at most `max_points` sampled tokens, drawn without replacement with `seed`.

    old_logp, rollout_logp, mask: (B, T); tokens outside the mask or with a non-finite log-prob are left out."""
    if old_logp.shape != rollout_logp.shape or old_logp.shape != mask.shape:
        raise ValueError(f"scatter_sample: shapes differ {tuple(old_logp.shape)}, {tuple(rollout_logp.shape)}, "
                         f"{tuple(mask.shape)}")
    keep = (mask > 0) & torch.isfinite(old_logp) & torch.isfinite(rollout_logp)  # (B, T)
    train = old_logp.detach().double()[keep].exp().cpu().numpy()  # (N,)
    rollout = rollout_logp.detach().double()[keep].exp().cpu().numpy()  # (N,)
    if len(train) > max_points:
        idx = np.sort(np.random.default_rng(seed).choice(len(train), size=max_points, replace=False))
        train, rollout = train[idx], rollout[idx]
    return train.astype(np.float32), rollout.astype(np.float32)


def pearson_r(x: np.ndarray, y: np.ndarray) -> float | None:
    """Pearson correlation; None with fewer than 2 points or a constant side (r is undefined there)."""
    if len(x) < 2 or np.std(x) == 0 or np.std(y) == 0:
        return None
    return float(np.corrcoef(x.astype(np.float64), y.astype(np.float64))[0, 1])


def save_scatter(run_dir: str | Path, step: int, old_logp: torch.Tensor, rollout_logp: torch.Tensor,
                 mask: torch.Tensor, *, seed: int, max_points: int) -> dict[str, float]:
    """Write `<run>/diagnostics/scatter_step_<step>.npz`; returns `{"diag/scatter_pearson_r": r}` (empty when r is
    undefined, e.g. a batch without sampled tokens)."""
    train, rollout = scatter_sample(old_logp, rollout_logp, mask, seed=derive_seed("scatter", seed, step),
                                    max_points=max_points)
    out = Path(run_dir) / "diagnostics"
    out.mkdir(parents=True, exist_ok=True)
    np.savez(out / f"scatter_step_{step}.npz", train_p=train, rollout_p=rollout)
    r = pearson_r(train, rollout)
    return {} if r is None else {"diag/scatter_pearson_r": r}
