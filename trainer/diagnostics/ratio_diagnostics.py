"""The ratios of the ALP paper's Table 5, measured inside the update (reference/algorithms.md §4–§5).

On the sampled tokens (m = 1, finite log-probs) of the first and the last mini-batch of a step:

- `upd` r_upd = π_θ/π_θold, `mis` r_mis = π_θold/μ, `byp` r_byp = π_θ/μ, with π_θ the *clean* policy at the
  mini-batch's weights: on the first mini-batch θ = θ_old, so π_θ is `old_logp` itself; on a later mini-batch of
  a perturbed run it costs one extra no-grad forward of that mini-batch (`RatioProbe.observe`); unperturbed, the
  update forward is already clean.
- `loss`: the ratio the loss actually uses, from the update forward (with the noise of that very forward for
  ALP / SPrPO): its denominator comes from `LOSS_RATIO` (π_θold or μ), its level from the loss
  (`upd_level`; GSPO: geo, capped above at log 10), clamped at ±20 before exp as the loss does.

Each kind gives `{prefix}/{stat}` for stat ∈ `RATIO_STATS` (quantiles by `torch.quantile`, linear, on all
tokens of the mini-batch: at most two mini-batches a step; every k-th token past its 2^24 limit), `clip_frac` = the
fraction outside the *loss's* clip band [1 − clip_low, 1 + clip_high] for every kind (the band is defined
only for the loss ratio; upd/mis/byp are measured against it so they can be compared), and P2/P98 per μ
probability bin (`DIAG_PROB_BINS`; an empty bin is NaN, which the logger writes as null). Where the loss works
at sequence level (seq/geo `upd_level`, GSPO), the same statistics of the sequence ratios (`exp S_b` or
`exp S̄_b`, one per non-empty row) go to `diag/seq_ratio_{kind}{suffix}`.

`perturb/dp/*`: |Δp| = |exp(logp_δ) − exp(logp_clean)| of sampled tokens on the first mini-batch, where the
clean forward is `old_logp` (θ = θ_old), so no extra forward: P50, P75, P99. Per layer group
(`layer_group_prob_shift`, at most `DP_LAYER_GROUPS` groups of consecutive perturbed layers, named by their first
layer): `perturb/dp/layer{i}/p75` and `/p99` with only that group's noise (same σ), on `diagnostics.rows` rows of the first
micro-batch of the first mini-batch, at one no-grad forward of those rows per group.

What costs an extra forward (|Δp| per group; the clean π_θ of a perturbed later mini-batch, on `diagnostics.rows`
rows of each of its micro-batches, so its r_upd and r_byp are over that sample) runs only on the steps
`diagnostics.every` picks; the rest comes from forwards the update runs anyway and is logged every step.

Legend: b rows of a micro-batch, T response positions, N sampled tokens, S non-empty rows.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from agents.perturbation import LayerwisePerturbation
from trainer.config.algo_config import AlgoConfig
from trainer.objective.logprobs import compute_logprobs
from trainer.objective.losses import GSPO_LOG_RATIO_MAX, LOG_RATIO_CLAMP
from trainer.objective.types import Batch

DIAG_PROB_BINS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)  # edges of the μ-probability bins; the last bin includes 1
RATIO_QUANTILES = {"p2": 0.02, "p25": 0.25, "p50": 0.5, "p75": 0.75, "p98": 0.98}
RATIO_STATS = (*RATIO_QUANTILES, "min", "max", "clip_frac")
RATIO_KINDS = ("loss", "upd", "mis", "byp")
DP_QUANTILES = {"p50": 0.5, "p75": 0.75, "p99": 0.99}
DP_LAYER_GROUPS = 4  # |Δp| per group of consecutive perturbed layers: one no-grad forward of a micro-batch each
QUANTILE_LIMIT = 2**24  # torch.quantile refuses larger inputs (verl PR #3810)

# policy loss → (denominator of its ratio, fixed level or None for algo.upd_level, upper log cap);
# a test keeps it in step with POLICY_LOSSES and checks it against the mean ratio each loss reports
LOSS_RATIO: dict[str, tuple[str, str | None, float]] = {
    "ppo_clip": ("old", None, LOG_RATIO_CLAMP),
    "bypass": ("rollout", None, LOG_RATIO_CLAMP),
    "gspo": ("old", "geo", GSPO_LOG_RATIO_MAX),
    "quatro": ("old", None, LOG_RATIO_CLAMP),
    "cispo": ("old", "token", LOG_RATIO_CLAMP),
    "gmpo": ("old", "geo", LOG_RATIO_CLAMP),
    "is_reinforce": ("rollout", "token", LOG_RATIO_CLAMP),
    "dppo_tv": ("rollout", "token", LOG_RATIO_CLAMP),
    "dppo_kl": ("rollout", "token", LOG_RATIO_CLAMP),
    "sapo": ("old", "token", LOG_RATIO_CLAMP),
    "vespo": ("old", "seq", LOG_RATIO_CLAMP),  # W before its folded correction weights (actor/vespo_w_mean: after)
    # the prefix losses: the token ratio each prefix is built from; the prefix weight's own statistics are the
    # loss's metrics (actor/minpro_prefix_*, actor/ctpo_cum_ratio_mean)
    "minpro": ("rollout", "token", LOG_RATIO_CLAMP),
    "ctpo": ("old", "token", LOG_RATIO_CLAMP),
}


def loss_level(algo: AlgoConfig) -> str:
    """token | seq | geo: the level at which the configured loss forms its ratio."""
    fixed = LOSS_RATIO[algo.policy_loss][1]
    return fixed or algo.upd_level


def diag_suffixes(k: int, num_minibatches: int) -> tuple[str, ...]:
    """Key suffixes mini-batch k reports under: "" for the first, "_last" for the last (both when K = 1)."""
    return (("",) if k == 0 else ()) + (("_last",) if k == num_minibatches - 1 else ())


def _thin(x: Tensor) -> Tensor:
    """Every k-th element when x has more than `torch.quantile`'s limit of 2^24, else x itself; (N,) → (≤ 2^24,)."""
    return x if x.numel() <= QUANTILE_LIMIT else x[:: math.ceil(x.numel() / QUANTILE_LIMIT)]


def ratio_stats(log_ratio: Tensor, mu_prob: Tensor | None, *, clip_low: float, clip_high: float,
                upper: float = LOG_RATIO_CLAMP) -> dict[str, float]:
    """Quantiles, min, max, out-of-band fraction and (with `mu_prob`) per-bin P2/P98 of r = exp(log_ratio).

    log_ratio: (N,) log-ratios of N tokens or sequences; clamped to [−20, `upper`] before exp. mu_prob: (N,)
    rollout probabilities μ of the same tokens, for `bin{j}/p2|p98`; None for sequences. Empty → {}.
    """
    if log_ratio.numel() == 0:
        return {}
    r = log_ratio.double().clamp(-LOG_RATIO_CLAMP, upper).exp()  # (N,)
    qs = torch.quantile(_thin(r), torch.tensor(list(RATIO_QUANTILES.values()), dtype=torch.float64))
    out = dict(zip(RATIO_QUANTILES, qs.tolist(), strict=True))
    out |= {"min": r.min().item(), "max": r.max().item(),
            "clip_frac": ((r < 1 - clip_low) | (r > 1 + clip_high)).double().mean().item()}
    if mu_prob is not None:
        edges = DIAG_PROB_BINS
        for j, (lo, hi) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
            inside = (mu_prob >= lo) & ((mu_prob < hi) if j < len(edges) - 2 else (mu_prob <= hi))  # (N,)
            p2 = p98 = math.nan
            if inside.any():
                p2, p98 = torch.quantile(_thin(r[inside]), torch.tensor([0.02, 0.98], dtype=torch.float64)).tolist()
            out |= {f"bin{j}/p2": p2, f"bin{j}/p98": p98}
    return out


def group_sample(group_ids: Tensor, max_rows: int) -> Tensor:
    """Row indices (R,) of whole groups, evenly spaced over the groups, at most `max_rows` rows but at least one
    group; every row when `max_rows` is 0 or covers the batch. group_ids (B,)."""
    n = group_ids.numel()
    if max_rows <= 0 or max_rows >= n:
        return torch.arange(n)
    groups = torch.unique(group_ids)  # (G,) sorted
    k = max(1, min(len(groups), int(max_rows * len(groups) // n)))  # groups of the mean size that fit
    chosen = groups[torch.linspace(0, len(groups) - 1, k).round().long()]
    return torch.isin(group_ids, chosen).nonzero().squeeze(1)


def spaced_rows(n: int, max_rows: int) -> Tensor:
    """`max_rows` row indices evenly spaced over 0..n−1 (all when max_rows is 0 or ≥ n): over length-sorted rows
    (a micro-batch) short and long rows alike."""
    if max_rows <= 0 or max_rows >= n:
        return torch.arange(n)
    return torch.linspace(0, n - 1, max_rows).round().long().unique()


class RatioProbe:
    """Table 5's diagnostics of one mini-batch, attached to `update_policy` (trainer/update.py) as its only hook:
    `observe` after each micro-batch's backward, `report` once the step is taken. Without a probe the update runs
    no diagnostic forward and logs no `diag/*` or `perturb/dp/*` key.

    suffixes: the key suffixes this mini-batch reports under (`diag_suffixes`: "" first, "_last" last); the first
    mini-batch is at θ = θ_old, so its clean π_θ is `old_logp`. extra_forwards: a diagnostics step
    (`diagnostics.every`), which pays for the forwards the module docstring lists; max_rows: `diagnostics.rows`,
    the rows of a micro-batch those forwards cover (0: all).
    """

    def __init__(self, algo: AlgoConfig, suffixes: tuple[str, ...] = ("",), *, extra_forwards: bool = False,
                 max_rows: int = 0) -> None:
        self.algo = algo
        self.level = loss_level(algo)
        self.suffixes = suffixes
        self.extra_forwards = extra_forwards
        self.max_rows = max_rows
        self.micro_batches = 0  # observed so far
        self.tokens: dict[str, list[Tensor]] = {k: [] for k in (*RATIO_KINDS, "dp")}
        self.mu: dict[str, list[Tensor]] = {k: [] for k in RATIO_KINDS}  # μ of each kind's tokens, for the bins
        self.seqs: dict[str, list[Tensor]] = {k: [] for k in RATIO_KINDS}
        self.extra: dict[str, float] = {}  # first mini-batch only: `layer_group_prob_shift`

    def observe(self, model: torch.nn.Module, sub: Batch, logp: Tensor, perturbation: LayerwisePerturbation | None,
                seed: int, temperature: float, *, top_p: float = 1.0, top_k: int = 0) -> None:
        """One micro-batch `sub` (b, T) after its update forward `logp` (b, T) and backward, `seed` the noise seed
        of that forward. On the first micro-batch of the first mini-batch of a perturbed diagnostics step, |Δp| per
        layer group (`layer_group_prob_shift`); then the clean π_θ (`_clean_logp`) and the four ratios (`add`).
        Extra forwards replay the sampler's truncation `top_p` / `top_k` as the update forward does."""
        perturbed = perturbation is not None
        if perturbed and self.micro_batches == 0 and "" in self.suffixes and self.extra_forwards:
            self.extra |= layer_group_prob_shift(model, sub.select(spaced_rows(len(sub), self.max_rows)),
                                                 perturbation, seed, temperature, top_p=top_p, top_k=top_k)
        clean, rows = self._clean_logp(model, sub, logp, temperature, perturbed, top_p=top_p, top_k=top_k)
        self.add(logp, clean, sub.old_logp, sub.rollout_logp, sub.loss_mask, perturbed=perturbed, clean_rows=rows)
        self.micro_batches += 1

    def _clean_logp(self, model: torch.nn.Module, sub: Batch, logp: Tensor, temperature: float,
                    perturbed: bool, *, top_p: float, top_k: int) -> tuple[Tensor | None, Tensor | None]:
        """(π_θ without noise, the rows of `sub` it covers or None for all): the update forward itself when
        unperturbed; on the first mini-batch θ = θ_old, so `old_logp`; otherwise, with `extra_forwards`, one
        no-grad forward outside the noise of `max_rows` evenly spaced rows (r, T'); else (None, None)."""
        if not perturbed:
            return logp.detach(), None
        if "" in self.suffixes:
            return sub.old_logp, None
        if not self.extra_forwards:
            return None, None
        rows = spaced_rows(len(sub), self.max_rows)
        with torch.no_grad():
            return compute_logprobs(model, sub.select(rows), temperature, top_p=top_p, top_k=top_k)[0], rows

    def add(self, logp: Tensor, clean_logp: Tensor | None, old_logp: Tensor, rollout_logp: Tensor,
            mask: Tensor, *, perturbed: bool, clean_rows: Tensor | None = None) -> None:
        """One micro-batch, all (b, T): update-forward logp, clean π_θ (None: not measured this step, so no
        r_upd, r_byp, |Δp|), π_θold, μ, loss mask. `clean_rows`: clean_logp (r, T') holds only these rows of the
        micro-batch (a sample), trimmed to their width T' ≤ T."""
        logp = logp.detach()
        m = (mask > 0) & torch.isfinite(logp) & torch.isfinite(old_logp) & torch.isfinite(rollout_logp)  # (b, T)
        denom = old_logp if LOSS_RATIO[self.algo.policy_loss][0] == "old" else rollout_logp
        self._add_kind("loss", logp - denom, rollout_logp, m)
        self._add_kind("mis", old_logp - rollout_logp, rollout_logp, m)
        if clean_logp is None:
            return
        if clean_rows is not None:  # the sampled rows, cut to the clean forward's width
            width = clean_logp.shape[1]
            logp, old_logp, rollout_logp, m = (x[clean_rows, :width] for x in (logp, old_logp, rollout_logp, m))
        self._add_kind("upd", clean_logp - old_logp, rollout_logp, m)
        self._add_kind("byp", clean_logp - rollout_logp, rollout_logp, m)
        if perturbed:
            self.tokens["dp"].append((logp.double()[m].exp() - clean_logp.double()[m].exp()).abs())

    def _add_kind(self, kind: str, delta: Tensor, rollout_logp: Tensor, m: Tensor) -> None:
        """Tokens (and sequences) of one ratio kind; delta, rollout_logp, m (b, T)."""
        d = torch.where(m, delta.double(), 0.0)  # (b, T)
        self.tokens[kind].append(d[m])
        self.mu[kind].append(rollout_logp.double()[m].exp())
        if self.level != "token":
            rows = m.sum(-1) > 0  # (b,)
            seq = d.sum(-1)[rows]  # (S,) S_b
            self.seqs[kind].append(seq / m.sum(-1)[rows] if self.level == "geo" else seq)

    def report(self) -> dict[str, float]:
        """The metrics of every suffix of this mini-batch, in the order of `suffixes`."""
        out: dict[str, float] = {}
        for suffix in self.suffixes:
            out |= self.metrics(suffix)
        return out

    def metrics(self, suffix: str) -> dict[str, float]:
        """`diag/ratio_{kind}{suffix}/*`, `diag/seq_ratio_{kind}{suffix}/*`, and on the first mini-batch
        (suffix "") `perturb/dp/*` and `extra`."""
        band = {"clip_low": self.algo.clip_low, "clip_high": self.algo.clip_high}
        upper = LOSS_RATIO[self.algo.policy_loss][2]
        out: dict[str, float] = {}
        for kind in RATIO_KINDS:
            if not self.tokens[kind]:  # r_upd, r_byp of a perturbed later mini-batch off a diagnostics step
                continue
            cap = upper if kind == "loss" else LOG_RATIO_CLAMP
            stats = ratio_stats(torch.cat(self.tokens[kind]), torch.cat(self.mu[kind]), upper=cap, **band)
            out |= {f"diag/ratio_{kind}{suffix}/{k}": v for k, v in stats.items()}
            if self.seqs[kind]:
                stats = ratio_stats(torch.cat(self.seqs[kind]), None, upper=cap, **band)
                out |= {f"diag/seq_ratio_{kind}{suffix}/{k}": v for k, v in stats.items()}
        dp = torch.cat(self.tokens["dp"]) if self.tokens["dp"] else torch.zeros(0)
        if suffix == "" and dp.numel():
            qs = torch.quantile(_thin(dp), torch.tensor(list(DP_QUANTILES.values()), dtype=torch.float64))
            out |= {f"perturb/dp/{k}": v for k, v in zip(DP_QUANTILES, qs.tolist(), strict=True)}
        return out | (self.extra if suffix == "" else {})


@torch.no_grad()
def layer_group_prob_shift(model: torch.nn.Module, sub: Batch, perturbation: LayerwisePerturbation, seed: int,
                           temperature: float, *, top_p: float = 1.0, top_k: int = 0) -> dict[str, float]:
    """`perturb/dp/layer{i}/p75`, `/p99`: |exp(logp with group i's noise alone) − exp(old_logp)| at θ = θ_old.

    `sub` (b, T) must hold rows of the first mini-batch (θ = θ_old, so `old_logp` is the clean forward); `seed`
    is the seed of their update forward: on that micro-batch whole, each layer draws the ε it drew there; on a
    sample of its rows the draw has another shape, so ε is a fresh draw of the same distribution.
    """
    ids = perturbation.layer_ids
    if not ids:  # logits-only: one σ, the overall |Δp| is already its own
        return {}
    groups = [g.tolist() for g in torch.tensor(ids).tensor_split(min(DP_LAYER_GROUPS, len(ids)))]
    m = (sub.loss_mask > 0) & torch.isfinite(sub.old_logp)  # (b, T)
    out: dict[str, float] = {}
    start = 0  # slot of the group's first layer in log σ (layer_ids are sorted, so groups are consecutive slots)
    for group in groups:
        probe = LayerwisePerturbation(model, layers=group, sigma_init=0.0, learnable=False, logits_only=False,
                                      sigma_mode="relative" if perturbation.relative else "absolute")
        probe.log_sigma.copy_(perturbation.log_sigma.detach()[start: start + len(group)])  # (len(group),)
        start += len(group)
        with probe.active(seed=seed):
            logp, _ = compute_logprobs(model, sub, temperature, top_p=top_p, top_k=top_k)  # (b, T)
        dp = (logp.double()[m].exp() - sub.old_logp.double()[m].exp()).abs()
        if dp.numel():
            qs = torch.quantile(_thin(dp), torch.tensor([0.75, 0.99], dtype=torch.float64)).tolist()
            out[f"perturb/dp/layer{group[0]}/p75"], out[f"perturb/dp/layer{group[0]}/p99"] = qs
    return out
