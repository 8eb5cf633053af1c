"""MIPU step 2's decision on realistic gap proxies: |T̂| ~ 1e-3 around c = 1e-3 (reference §3.6: T̂ lives at
±2e-4 … ±8e-4), built from small log-prob and advantage tensors, and the sign convention of T̂.

Sign (derived in `trainer.algorithms.mipu.accepts`): with group-centred Â, T̂ = −mean(ρÂ) ≈ E_μ[Â] − E_π[Â],
so a deployed μ_{k+1} that puts more weight on positive-advantage responses than the trainer π_{k+1}
(ρ = π/μ < 1 there) gives T̂ > 0 and is accepted; the reverse gives T̂ < 0, rejected once below −c.
"""

import math

import pytest
import torch

from trainer.algorithms.mipu import acceptance_threshold, accepts, gap_proxy
from trainer.config.algo_config import AlgoConfig
from trainer.objective.advantages import group_advantages

# engine log-probs of 4 validation responses (2 groups of 2), lengths 3, 2, 3, 1; padding holds NaN
ROLLOUT = torch.tensor([[-1.21, -0.35, -2.07, math.nan], [-0.88, -1.64, math.nan, math.nan],
                        [-0.52, -3.10, -0.97, math.nan], [-1.45, math.nan, math.nan, math.nan]])
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
REWARDS = torch.tensor([1.0, 0.0, 0.0, 1.0])  # rows 0 and 3 correct: Â = ±(0.5 / (std 0.7071 + 1e-6))
A = 0.5 / (math.sqrt(0.5) + 1e-6)


def _validation(eps):
    """T̂ with log π_{k+1} − log μ_{k+1} averaging `eps` on row 0 (Â > 0) and 0 on the other rows.

    Row 0's token deltas are uneven ([eps + 2e-3, eps − 3e-3, eps + 1e-3]), rows 1 and 2 cancel within the
    row, row 3 is unchanged. Expected: T̂ = −(1/4)·Â_0·(e^eps − 1), all other ρ being 1.
    """
    delta = torch.tensor([[eps + 2e-3, eps - 3e-3, eps + 1e-3, 0.0], [4e-3, -4e-3, 0.0, 0.0],
                          [1e-3, 2e-3, -3e-3, 0.0], [0.0, 0.0, 0.0, 0.0]])
    new = ROLLOUT + delta  # (B, T); NaN stays on padding
    adv, _ = group_advantages(REWARDS, torch.tensor([0, 0, 1, 1]))
    assert adv.tolist() == pytest.approx([A, -A, -A, A], rel=1e-6)
    t_post, _ = gap_proxy(new, ROLLOUT, MASK, adv)
    return t_post, -A * math.expm1(eps) / 4


def _eps_for(t_target):
    """Row-0 mean log-ratio that puts T̂ at `t_target` (inverting the expected value above)."""
    return math.log1p(-4 * t_target / A)


def test_gap_proxy_hand_computed_at_the_threshold_scale():
    t_post, expected = _validation(_eps_for(-1.1e-3))  # eps ≈ 6.203e-3, T̂ = −1.1e-3
    assert t_post == pytest.approx(expected, abs=2e-8) and t_post == pytest.approx(-1.1e-3, abs=2e-8)


def test_sign_trainer_favouring_positive_samples_gives_a_negative_gap():
    # π_{k+1} above μ_{k+1} on the positive-advantage response (ρ_0 > 1): the deployed policy trails → T̂ < 0
    t_trainer_ahead, _ = _validation(5e-3)
    # μ_{k+1} above π_{k+1} there (ρ_0 < 1): the deployed policy is ahead → T̂ > 0, accepted even at c = 0
    t_deployed_ahead, _ = _validation(-5e-3)
    assert t_trainer_ahead < 0 < t_deployed_ahead
    assert accepts(t_deployed_ahead, 0.0) and not accepts(t_trainer_ahead, 0.0)


def test_acceptance_just_above_and_just_below_minus_c():
    c = acceptance_threshold(0, AlgoConfig().mipu_threshold_start, AlgoConfig().mipu_threshold_end,
                             AlgoConfig().mipu_anneal_steps)
    assert c == pytest.approx(1e-3)  # the default schedule starts at c_0 = 1e-3 (Qwen3-4B, reference §3.6)
    above, _ = _validation(_eps_for(-0.9e-3))  # T̂ = −0.9e-3 ≥ −1e-3
    below, _ = _validation(_eps_for(-1.1e-3))  # T̂ = −1.1e-3 < −1e-3
    assert above == pytest.approx(-0.9e-3, abs=2e-8) and below == pytest.approx(-1.1e-3, abs=2e-8)
    assert accepts(above, c) and not accepts(below, c)
    assert accepts(-c, c)  # the boundary itself is accepted (T̂ ≥ −c)


def test_the_same_candidate_is_rejected_once_the_threshold_has_annealed():
    # T̂ = −0.9e-3 passes c(0) = 1e-3, fails c(50) = 5e-4 and c(100) = 0 (linear to c_1 = 0 over 100 steps)
    t_post, _ = _validation(_eps_for(-0.9e-3))
    algo = AlgoConfig()
    start, end, steps = algo.mipu_threshold_start, algo.mipu_threshold_end, algo.mipu_anneal_steps
    schedule = [acceptance_threshold(k, start, end, steps) for k in (0, 50, 100)]
    assert schedule == pytest.approx([1e-3, 5e-4, 0.0])
    assert [accepts(t_post, c) for c in schedule] == [True, False, False]
