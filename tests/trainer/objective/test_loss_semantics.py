"""Which log-prob goes where: every policy loss and every correction mode against an independent formula.

`logp`, `old_logp` and `rollout_logp` are distinct tensors, so a loss or objective that reads the wrong one
fails; each case is also run with every pair of the three swapped, and must then miss the expected value.
The reference formulas below are plain Python over lists (reference/algorithms.md §2.2, §3.1–§3.4, §3.7),
written from the spec, not from the code under test.
"""

import itertools
import math

import pytest
import torch

from trainer.config.algo_config import AlgoConfig
from trainer.objective.corrections import compute_correction, correction_kwargs
from trainer.objective.losses import POLICY_LOSSES
from trainer.objective.types import Batch
from trainer.update import denominators, micro_batch_objective

MASK = [[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]]
OLD = [[-1.0, -0.6, -2.0, -0.3], [-0.4, -1.5, -0.8, -0.1], [-0.9, -0.2, -1.3, -0.7]]
D_UPD = [[0.15, -0.05, 0.1, 9.0], [-0.1, 0.2, 9.0, 9.0], [0.05, -0.15, 0.0, 0.2]]  # logp − old; 9.0 on padding
# old − rollout, chosen so C = 2 bands act: row 0 token/seq/geo above C; row 1 a token below 1/2, its
# product e^-1.2 = 0.30 below 1/2, its geometric mean e^-0.6 = 0.55 inside; row 2 inside everywhere
D_MIS = [[0.9, 0.5, 1.2, -4.0], [-0.3, -0.9, 3.0, 3.0], [0.2, -0.1, 0.05, 0.1]]
ADV = [1.0, -0.5, 2.0]
ARGS = ("logp", "old_logp", "rollout_logp")


def _tensors(upd_scale=1.0):
    old = torch.tensor(OLD)
    logp = old + upd_scale * torch.tensor(D_UPD)
    rollout = old - torch.tensor(D_MIS)
    mask = torch.tensor(MASK, dtype=torch.float32)
    adv = torch.tensor(ADV)[:, None] * mask
    return {"logp": logp, "old_logp": old, "rollout_logp": rollout}, mask, adv


def _swapped(lps, pair):
    out = dict(lps)
    out[pair[0]], out[pair[1]] = lps[pair[1]], lps[pair[0]]
    return out


def _rows(x):
    return x.tolist() if isinstance(x, torch.Tensor) else x


# ------------------------------------------------------------------ the reference formulas (plain Python)


def ref_level(deltas, keep, level):
    """Per-token log-ratio of one row at `level` (token | seq = Σ | geo = Σ / n) on kept tokens, 0 elsewhere."""
    kept = [d for d, k in zip(deltas, keep, strict=True) if k]
    if level == "token":
        return [d if k else 0.0 for d, k in zip(deltas, keep, strict=True)]
    value = sum(kept) / (len(kept) if level == "geo" else 1) if kept else 0.0
    return [value if k else 0.0 for k in keep]


def ref_dual_clip(log_r, a, lo, hi, c):
    """PPO dual clip, reference §2.2: max(−A r, −A clip(r)), then min with −c A when A < 0."""
    r = math.exp(max(-20.0, min(20.0, log_r)))
    loss = max(-a * r, -a * min(max(r, 1 - lo), 1 + hi))
    return min(loss, -c * a) if (c is not None and a < 0) else loss


# each entry's (ε_lo, ε_hi, c) as its preset sets them (configs/algorithms/, reference §3): grpo, seq_bypass, gspo,
# quatro, cispo, is_reinforce, gmpo, dppo_tv, dppo_kl, sapo
PRESET_CLIPS = {"ppo_clip": (0.2, 0.28, 3.0), "bypass": (0.5, 3.0, 3.0), "gspo": (3e-4, 4e-4, None),
                 "quatro": (None, None, None), "cispo": (1.0, 4.0, None), "is_reinforce": (1.0, 1.0, None),
                 "gmpo": (0.4, 0.4, None), "dppo_tv": (0.2, 0.2, None), "dppo_kl": (0.05, 0.05, None),
                 "sapo": (None, None, None)}
SAPO_TAUS = (1.0, 1.05)  # τ_pos, τ_neg (configs/algorithms/sapo.yaml)
PRESET_CLIPS |= {"vespo": (None, None, None), "minpro": (0.2, 0.28, 3.0), "ctpo": (None, None, None)}
VESPO_KERNEL = {"vespo_k_pos": 2.0, "vespo_lambda_pos": 3.0, "vespo_k_neg": 3.0, "vespo_lambda_neg": 2.0}  # vespo.yaml
CTPO_BOUNDS = {"ctpo_clip_low": 0.025, "ctpo_clip_high": 0.05, "ctpo_clip_dual": 0.05, "ctpo_power": 0.5}  # ctpo.yaml


def _kept(values, keep):
    return [v for v, k in zip(values, keep, strict=True) if k]


def _ref_vespo(logp, old, keep, a):
    """−φ(W)·A·log π, W = e^⟦Σ_kept (logp − old)⟧, φ = W^k·e^{λ(1−W)}, (k, λ) by the sign of A (arXiv 2602.10693)."""
    big_w = math.exp(max(-20.0, min(20.0, sum(_kept([x - y for x, y in zip(logp, old, strict=True)], keep)))))
    k, lam = ((VESPO_KERNEL["vespo_k_pos"], VESPO_KERNEL["vespo_lambda_pos"]) if a >= 0
              else (VESPO_KERNEL["vespo_k_neg"], VESPO_KERNEL["vespo_lambda_neg"]))
    phi = big_w ** k * math.exp(lam * (1 - big_w))
    return [-phi * a * x for x in logp]


def _ref_minpro(logp, rollout, keep, a, lo, hi, c):
    """min_{kept i<t} ρ_i (1 on the first kept token) × the dual clip of ρ_t, ρ = π_θ/μ (arXiv 2601.22718 [R])."""
    row, seen = [], []
    for x, y, k in zip(logp, rollout, keep, strict=True):
        prefix = math.exp(min(seen)) if seen else 1.0
        row.append(prefix * ref_dual_clip(x - y, a, lo, hi, c))
        if k:
            seen.append(max(-20.0, min(20.0, x - y)))
    return row


def _ref_ctpo(logp, old, keep, a):
    """Dual clip of the cumulative ratio e^{min(S_t, 10)} in log space within t^p-scaled bounds (arXiv 2605.07331)."""
    lo, hi, dual, power = (CTPO_BOUNDS[k] for k in ("ctpo_clip_low", "ctpo_clip_high", "ctpo_clip_dual", "ctpo_power"))
    row, total, position = [], 0.0, 0
    for x, y, k in zip(logp, old, keep, strict=True):
        if k:
            total += max(-20.0, min(20.0, x - y))
            position += 1
        s = max(position, 1) ** power
        log_r = min(total, 10.0)
        loss = max(-a * math.exp(log_r), -a * math.exp(min(max(log_r, -lo * s), hi * s)))
        row.append(min(loss, -a * math.exp(dual * s)) if a < 0 else loss)
    return row


def _dppo_valid(p, p_mu, a, lo, hi, divergence):
    """DPPO's trust region (arXiv 2602.04879): a token stays unless p_θ moved past δ from μ the way A pushes."""
    if divergence == "tv":
        return p - p_mu <= hi if a > 0 else p - p_mu >= -lo
    d = p_mu * math.log((p_mu + 1e-8) / (p + 1e-8)) + (1 - p_mu) * math.log((1 - p_mu + 1e-8) / (1 - p + 1e-8))
    return (d <= hi or p <= p_mu) if a > 0 else (d <= lo or p >= p_mu)


def _sg_weighted_log_pi(log_r, logp, a, lo, hi):
    """−sg(clip(r, 1 − ε_lo, 1 + ε_hi))·A·log π (CISPO, IS-REINFORCE)."""
    return -min(max(math.exp(max(-20.0, min(20.0, log_r))), 1 - lo), 1 + hi) * a * logp


def ref_policy_loss(name, lps, keep, adv, level="token", clips=None):
    """(B, T) nested lists of the per-token loss of registry entry `name`; clips (ε_lo, ε_hi, c), else the preset's."""
    lo, hi, c = clips or PRESET_CLIPS[name]
    logp, old, rollout = (_rows(lps[k]) for k in ARGS)
    out = []
    for b, row_keep in enumerate(keep):
        a = adv[b]
        if name == "bypass":  # r = π_θ / μ (§3.3)
            lr = ref_level([x - y for x, y in zip(logp[b], rollout[b], strict=True)], row_keep, level)
            row = [ref_dual_clip(v, a, lo, hi, c) for v in lr]
        elif name == "ppo_clip":  # r = π_θ / π_old (§3.1)
            lr = ref_level([x - y for x, y in zip(logp[b], old[b], strict=True)], row_keep, level)
            row = [ref_dual_clip(v, a, lo, hi, c) for v in lr]
        elif name == "gspo":  # geometric mean of π_θ / π_old, log s ≤ 10, no dual clip (§3.4)
            lr = ref_level([x - y for x, y in zip(logp[b], old[b], strict=True)], row_keep, "geo")
            row = [ref_dual_clip(min(v, 10.0), a, lo, hi, None) for v in lr]
        elif name == "quatro":  # −τ[r t − (r log r − r + 1)], τ = 1/√(2·0.02) = 5, |log r| ≤ 5, target t = A
            lr = ref_level([x - y for x, y in zip(logp[b], old[b], strict=True)], row_keep, "geo")
            row = []
            for v in lr:
                v = max(-5.0, min(5.0, v))
                r = math.exp(v)
                row.append(-5.0 * (r * a - (r * v - r + 1)) if a != 0 else 0.0)
        elif name in ("cispo", "is_reinforce"):  # the weight's denominator: π_old (CISPO) or μ (bypass)
            den = old[b] if name == "cispo" else rollout[b]
            row = [_sg_weighted_log_pi(x - y, x, a, lo, hi) for x, y in zip(logp[b], den, strict=True)]
        elif name in ("dppo_tv", "dppo_kl"):  # −A·r·1[valid], r = π_θ/μ
            row = [-a * math.exp(max(-20.0, min(20.0, x - y)))
                   * _dppo_valid(math.exp(x), math.exp(y), a, lo, hi, name.removeprefix("dppo_")) if k else 0.0
                   for x, y, k in zip(logp[b], rollout[b], row_keep, strict=True)]  # padding: log-probs > 0
        elif name == "sapo":  # −σ(τ(r − 1))·4/τ·A, r = π_θ/π_old, τ by the sign of A
            tau = SAPO_TAUS[0] if a > 0 else SAPO_TAUS[1]
            row = [-a * 4 / tau / (1 + math.exp(-tau * (math.exp(max(-20.0, min(20.0, x - y))) - 1)))
                   for x, y in zip(logp[b], old[b], strict=True)]
        elif name == "vespo":
            row = _ref_vespo(logp[b], old[b], row_keep, a)
        elif name == "minpro":
            row = _ref_minpro(logp[b], rollout[b], row_keep, a, lo, hi, c)
        elif name == "ctpo":
            row = _ref_ctpo(logp[b], old[b], row_keep, a)
        elif name == "gmpo":  # −A·exp(mean_t of the log ratio clipped pessimistically in log space)
            sign = (a > 0) - (a < 0)
            cs = [sign * min(sign * d, sign * max(-lo, min(hi, d)))
                  for d, k in zip((x - y for x, y in zip(logp[b], old[b], strict=True)), row_keep, strict=True) if k]
            s_b = math.exp(sum(cs) / len(cs)) if cs else 1.0
            row = [-a * s_b for _ in row_keep]
        else:
            raise KeyError(name)
        out.append([x if k else 0.0 for x, k in zip(row, row_keep, strict=True)])
    return out


def ref_correction(lps, mask, *, correction="none", corr_level="token", corr_upper=5.0, corr_lower=None,
                   mis_semantics="paper", corr_k1_quirk=False, corr_veto=False, corr_veto_threshold=1e-4,
                   corr_batch_norm=False, **_):
    """(w, m′) nested lists (reference §3.2): v from old − rollout at the level, then tis/mis, veto, norm."""
    old, rollout = _rows(lps["old_logp"]), _rows(lps["rollout_logp"])
    upper = corr_upper
    lower = (0.0 if mis_semantics == "paper" else 1.0 / upper) if corr_lower is None else corr_lower
    w, keep = [], []
    for b, row_mask in enumerate(mask):
        d = [o - r for o, r in zip(old[b], rollout[b], strict=True)]
        log_v = ref_level(d, row_mask, corr_level)
        w_row, k_row = [], []
        for t, m in enumerate(row_mask):
            lv = log_v[t]
            v = math.exp(max(-20.0, min(20.0, lv)))
            test = -lv if corr_k1_quirk else lv
            low_ok = lower == 0 or test >= math.log(lower)
            band = low_ok and test <= math.log(upper)
            if correction == "none":
                wt, kt = 1.0, 1.0
            elif correction == "tis":
                wt, kt = min(v, upper), 1.0
            elif mis_semantics == "paper":
                wt, kt = v * band, 1.0
            else:
                wt, kt = min(v, upper) * band, float(band)
            w_row.append(wt * m)
            k_row.append(kt * m)
        if corr_veto and any(m and x < math.log(corr_veto_threshold) for x, m in zip(d, row_mask, strict=True)):
            w_row = [0.0] * len(w_row) if mis_semantics == "paper" else w_row
            k_row = k_row if mis_semantics == "paper" else [0.0] * len(k_row)
        w.append(w_row)
        keep.append(k_row)
    if corr_batch_norm:
        if corr_level == "token":
            vals = [x for wr, kr in zip(w, keep, strict=True) for x, k in zip(wr, kr, strict=True) if k]
        else:
            vals = [sum(x * k for x, k in zip(wr, kr, strict=True)) / sum(kr)
                    for wr, kr in zip(w, keep, strict=True) if sum(kr)]
        mean = sum(vals) / len(vals)
        if mean > 1e-8:
            w = [[x / mean for x in wr] for wr in w]
    return [[x * k for x, k in zip(wr, kr, strict=True)] for wr, kr in zip(w, keep, strict=True)], keep


def ref_aggregate(loss, keep, mode):
    """token-mean or seq-mean-token-mean over m′ (reference §2.3), empty rows left out."""
    if mode == "token-mean":
        return sum(x * k for lr, kr in zip(loss, keep, strict=True) for x, k in zip(lr, kr, strict=True)) / max(
            sum(map(sum, keep)), 1)
    rows = [sum(x * k for x, k in zip(lr, kr, strict=True)) / sum(kr) for lr, kr in zip(loss, keep, strict=True)
            if sum(kr)]
    return sum(rows) / max(len(rows), 1)


def ref_objective(algo_kwargs, lps, mask, adv):
    algo = {**vars(AlgoConfig()), **algo_kwargs}
    w, keep = ref_correction(lps, mask, **algo)
    clips = (algo["clip_low"], algo["clip_high"], algo["clip_dual"])
    loss = ref_policy_loss(algo["policy_loss"], lps, keep, adv, algo["upd_level"], clips)
    weighted = [[x * y for x, y in zip(lr, wr, strict=True)] for lr, wr in zip(loss, w, strict=True)]
    return ref_aggregate(weighted, keep, algo["loss_agg"])


# ------------------------------------------------------------------ worked examples, then the registry


def test_each_loss_reads_its_own_log_probs_hand_computed():
    # one row, old = [−1, −2], logp = [−0.9, −2.5], rollout = [−1.5, −1.0], A = [+1, −1]
    old, logp, rollout = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-0.9, -2.5]]), torch.tensor([[-1.5, -1.0]])
    adv, mask = torch.tensor([[1.0, -1.0]]), torch.ones(1, 2)
    # ppo_clip (ε 0.2/0.28): r = e^[0.1, −0.5] = [1.10517, 0.60653]; A = −1 and r < 0.8 → max(0.6065, 0.8) = 0.8
    ppo, _ = POLICY_LOSSES["ppo_clip"](logp, old, rollout, adv, mask, clip_low=0.2, clip_high=0.28, clip_dual=3.0,
                                       upd_level="token")
    assert torch.allclose(ppo, torch.tensor([[-1.1051709, 0.8]]), atol=1e-6)
    # bypass (ε 0.5/3.0): r = e^(logp − rollout) = e^[0.6, −1.5] = [1.82212, 0.22313] → [−1.82212, max(0.223, 0.5)]
    byp, _ = POLICY_LOSSES["bypass"](logp, old, rollout, adv, mask, clip_low=0.5, clip_high=3.0, clip_dual=3.0,
                                     upd_level="token")
    assert torch.allclose(byp, torch.tensor([[-1.8221188, 0.5]]), atol=1e-6)
    # gspo (ε 3e-4/4e-4): S̄ = (0.1 − 0.5)/2 = −0.2, s = 0.81873 on both; A = +1 → max(−0.8187, −0.9997) = −0.81873;
    # A = −1 → max(0.8187, 0.9997) = 0.9997 (no dual clip)
    gs, _ = POLICY_LOSSES["gspo"](logp, old, rollout, adv, mask, clip_low=3e-4, clip_high=4e-4)
    assert torch.allclose(gs, torch.tensor([[-0.8187308, 0.9997]]), atol=1e-6)
    # quatro (geo, |log r| ≤ 5), δ = 0.02 → τ = 5, target t = 0.3: r = 0.81873, r log r − r + 1 = 0.017523,
    # ℓ = −5·(0.81873·0.3 − 0.017523) = −1.14048 on both tokens
    qu, _ = POLICY_LOSSES["quatro"](logp, old, rollout, torch.full((1, 2), 0.3), mask, upd_level="geo",
                                    quatro_delta=0.02, quatro_log_ratio_clamp=5.0, quatro_grpo_scale=True)
    assert torch.allclose(qu, torch.full((1, 2), -1.1404806), atol=1e-6)


LEVELS = ("token", "seq", "geo")
LOSS_CASES = [("ppo_clip", lv) for lv in LEVELS] + [("bypass", lv) for lv in LEVELS] + [
    ("gspo", "geo"), ("quatro", "geo"), ("cispo", "token"), ("is_reinforce", "token"), ("gmpo", "geo"),
    ("dppo_tv", "token"), ("dppo_kl", "token"), ("sapo", "token"), ("vespo", "seq"), ("minpro", "token"),
    ("ctpo", "token")]
UPD_SCALE = {"gspo": 1e-3}  # GSPO's band is ±4e-4: smaller steps keep some ratios inside it


def _registry_call(name, level, lps, mask, adv):
    # no entry states a default: every hyperparameter is passed, the reference formulas' values
    if name == "quatro":
        kwargs = {"upd_level": level, "quatro_delta": 0.02, "quatro_log_ratio_clamp": 5.0, "quatro_grpo_scale": True}
    elif name == "sapo":
        kwargs = {"sapo_tau_pos": SAPO_TAUS[0], "sapo_tau_neg": SAPO_TAUS[1]}
    elif name in ("vespo", "ctpo"):
        kwargs = dict(VESPO_KERNEL if name == "vespo" else CTPO_BOUNDS)
    else:
        kwargs = dict(zip(("clip_low", "clip_high"), PRESET_CLIPS[name][:2], strict=True))
    if name in ("ppo_clip", "bypass"):
        kwargs |= {"upd_level": level, "clip_dual": PRESET_CLIPS[name][2]}
    if name == "minpro":
        kwargs |= {"clip_dual": PRESET_CLIPS[name][2]}
    loss, _ = POLICY_LOSSES[name](lps["logp"], lps["old_logp"], lps["rollout_logp"], adv, mask, **kwargs)
    return loss


def test_loss_cases_cover_the_registry():
    assert {name for name, _ in LOSS_CASES} == set(POLICY_LOSSES)


@pytest.mark.parametrize("name,level", LOSS_CASES)
def test_registry_loss_matches_the_reference_formula(name, level):
    lps, mask, adv = _tensors(UPD_SCALE.get(name, 1.0))
    expected = ref_policy_loss(name, lps, MASK, ADV, level)
    assert torch.allclose(_registry_call(name, level, lps, mask, adv), torch.tensor(expected), atol=1e-5)


@pytest.mark.parametrize("pair", list(itertools.combinations(ARGS, 2)), ids="<->".join)
@pytest.mark.parametrize("name,level", LOSS_CASES)
def test_registry_loss_fails_when_two_log_probs_are_swapped(name, level, pair):
    lps, mask, adv = _tensors(UPD_SCALE.get(name, 1.0))
    expected = torch.tensor(ref_policy_loss(name, lps, MASK, ADV, level))
    swapped = _swapped(lps, pair)
    got = _registry_call(name, level, swapped, mask, adv)
    assert torch.allclose(got, torch.tensor(ref_policy_loss(name, swapped, MASK, ADV, level)), atol=1e-5)
    assert (got - expected).abs().max() > 1e-4  # the swap is visible against the expected value


# ------------------------------------------------------------------ corrections through the objective

CORRECTION_CASES = {
    "none": {},
    **{f"tis_{lv}": dict(correction="tis", corr_level=lv, corr_upper=2.0) for lv in ("token", "seq", "geo")},
    **{f"mis_{sem}_{lv}": dict(correction="mis", corr_level=lv, corr_upper=2.0, mis_semantics=sem)
       for sem in ("paper", "verl") for lv in ("token", "seq", "geo")},
    "mis_verl_k1_quirk": dict(correction="mis", corr_upper=1.4, corr_lower=0.6, mis_semantics="verl",
                              corr_k1_quirk=True),
    **{f"veto_{sem}": dict(correction="tis", corr_upper=2.0, corr_veto=True, corr_veto_threshold=0.45,
                           mis_semantics=sem) for sem in ("paper", "verl")},
    "veto_without_correction": dict(corr_veto=True, corr_veto_threshold=0.45),
    **{f"batch_norm_{lv}": dict(correction="tis", corr_level=lv, corr_upper=2.0, corr_batch_norm=True)
       for lv in ("token", "seq")},
    "seq_mis_seq_update": dict(correction="mis", corr_level="seq", corr_upper=2.0, mis_semantics="verl",
                               upd_level="seq", clip_low=0.5, clip_high=3.0),
    "gspo_seq_mis": dict(policy_loss="gspo", loss_agg="seq-mean-token-mean", clip_low=3e-4, clip_high=4e-4,
                         correction="mis", corr_level="seq", corr_upper=2.0),
    "bypass_seq": dict(policy_loss="bypass", upd_level="seq", clip_low=0.5, clip_high=3.0),
}


def _objective(algo_kwargs, lps, mask, adv, prepared):
    algo = AlgoConfig(**algo_kwargs)
    batch = Batch(input_ids=torch.zeros(3, 5, dtype=torch.long), attention_mask=torch.ones(3, 5),
                  response_start=torch.ones(3, dtype=torch.long), response_len=torch.full((3,), 4),
                  response_ids=torch.zeros(3, 4, dtype=torch.long), loss_mask=mask,
                  rollout_logp=lps["rollout_logp"], rewards=torch.zeros(3), group_ids=torch.zeros(3, dtype=torch.long),
                  advantages=adv, old_logp=lps["old_logp"])
    if prepared:  # once per rollout batch, as prepare_batch does
        corr = compute_correction(batch.old_logp, batch.rollout_logp, mask, **correction_kwargs(algo))
        batch.corr_weights, batch.corr_keep = corr.weights, corr.keep
    n_tokens, n_seqs, _ = denominators(batch, torch.arange(3))
    loss, _ = micro_batch_objective(algo, batch, lps["logp"], torch.zeros_like(mask), n_tokens=n_tokens,
                                    n_seqs=n_seqs)
    return loss.item()


def _case(name):
    kwargs = CORRECTION_CASES[name]
    scale = 1e-3 if kwargs.get("policy_loss") == "gspo" else 1.0
    return kwargs, *_tensors(scale)


@pytest.mark.parametrize("case", sorted(CORRECTION_CASES))
def test_objective_matches_the_reference_formula(case):
    kwargs, lps, mask, adv = _case(case)
    expected = ref_objective(kwargs, lps, MASK, ADV)
    assert _objective(kwargs, lps, mask, adv, prepared=True) == pytest.approx(expected, rel=1e-5, abs=1e-7)
    with pytest.raises(ValueError, match="prepare_corrections"):  # never recomputed per micro-batch
        _objective(kwargs, lps, mask, adv, prepared=False)


CORRECTING = sorted(c for c, kw in CORRECTION_CASES.items() if "correction" in kw or "corr_veto" in kw)


@pytest.mark.parametrize("case", CORRECTING)
def test_each_correction_changes_the_objective(case):
    # no case is vacuous on these inputs: each one moves the objective away from the uncorrected one
    kwargs, lps, _, _ = _case(case)
    plain = {k: v for k, v in kwargs.items() if not k.startswith("corr") and k not in ("mis_semantics",)}
    assert abs(ref_objective(kwargs, lps, MASK, ADV) - ref_objective(plain, lps, MASK, ADV)) > 1e-4


@pytest.mark.parametrize("pair", list(itertools.combinations(ARGS, 2)), ids="<->".join)
@pytest.mark.parametrize("case", sorted(CORRECTION_CASES))
def test_objective_fails_when_two_log_probs_are_swapped(case, pair):
    kwargs, lps, mask, adv = _case(case)
    expected = ref_objective(kwargs, lps, MASK, ADV)
    swapped = _swapped(lps, pair)
    got = _objective(kwargs, swapped, mask, adv, prepared=True)
    assert got == pytest.approx(ref_objective(kwargs, swapped, MASK, ADV), rel=1e-5, abs=1e-7)
    assert abs(got - expected) > 1e-5 * max(1.0, abs(expected))
