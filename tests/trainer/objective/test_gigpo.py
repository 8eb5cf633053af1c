"""GiGPO advantages (trainer/objective/gigpo.py, arXiv 2505.10978): worked examples computed by hand, the broadcast onto
each turn's sampled tokens, the loop's wiring on a collated batch, and the config rules of `algo.advantage`.

The household end-to-end step (`algorithm=gigpo` on configs/household_tiny.yaml) is in test_env_sft.py, beside
the other presets trained there on the same warm start.
"""

from __future__ import annotations

import math
import re

import pytest
import torch

from agents.trajectory import Trajectory
from trainer.config.errors import ConfigError
from trainer.config.train_config import CONFIG_DIR
from trainer.objective.advantages import broadcast_advantages, group_advantages
from trainer.objective.gigpo import (
    anchor_step_advantages,
    broadcast_step_advantages,
    gigpo_advantages,
    gigpo_token_advantages,
    step_returns,
)
from trainer.objective.types import collate
from trainer.setup.build import build_config

# Two groups. Group 0: a reaches X at step 1 and Y at step 2, b reaches Y at step 1, c reaches X then Z;
# group 1 (another task) reuses the key strings, which must not join group 0's step groups.
KEYS = [["S0", "X", "Y"], ["S0", "Y"], ["S0", "X", "Z"], ["S0", "X"], ["S0"]]
REWARDS = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0])
GROUPS = torch.tensor([0, 0, 0, 1, 1])


def _flat(rows):
    return [x for row in rows for x in row]


def test_step_returns_discount_the_outcome_from_the_last_step():
    assert step_returns([2.0, 1.0, 5.0], [3, 1, 0], 0.9) == [pytest.approx([1.62, 1.8, 2.0]), [1.0], []]
    assert step_returns([0.0], [3], 0.5, step_rewards=[[1.0, 0.0, 2.0]]) == [[1.5, 1.0, 2.0]]
    with pytest.raises(ValueError, match="3 steps but 2 step rewards"):
        step_returns([0.0], [3], 0.5, step_rewards=[[1.0, 2.0]])


def test_anchor_groups_by_state_within_a_group_mean_norm():
    returns = step_returns(REWARDS.tolist(), [len(k) for k in KEYS], 0.5)
    # a: 0.25 0.5 1 | b: 0.5 1 | c: 0 0 0 | d: 0.5 1 | e: 0
    adv, m = anchor_step_advantages(GROUPS.tolist(), KEYS, returns, norm_by_std=False)
    # (0,S0): 0.25 0.5 0 → mean 0.25; (0,X): 0.5 0 → mean 0.25; (0,Y): 1 at step 2 and 1 at step 1 → equal, 0;
    # (0,Z) and (1,X): singletons → 0; (1,S0): 0.5 0 → mean 0.25
    assert adv == [[0.0, 0.25, 0.0], [0.25, 0.0], [-0.25, -0.25, 0.0], [0.25, 0.0], [-0.25]]
    assert m["gigpo/anchor_states"] == 4  # (0,S0) (0,X) (0,Y) (1,S0)
    assert m["gigpo/anchor_group_size_mean"] == pytest.approx((3 + 2 + 2 + 2) / 4)
    assert m["gigpo/anchor_step_frac"] == pytest.approx(9 / 11)
    assert m["gigpo/step_adv_abs_mean"] == pytest.approx(6 * 0.25 / 11)


def test_anchor_groups_mean_std_norm_divide_by_the_unbiased_std():
    returns = step_returns(REWARDS.tolist(), [len(k) for k in KEYS], 0.5)
    adv, _ = anchor_step_advantages(GROUPS.tolist(), KEYS, returns, norm_by_std=True)
    half = 1 / math.sqrt(2)  # a pair (x, 0): centred ±x/2, std x/√2
    assert _flat(adv) == pytest.approx([0.0, half, 0.0, 1.0, 0.0, -1.0, -half, 0.0, half, 0.0, -half], abs=1e-5)


def test_a_state_visited_twice_in_one_episode_is_two_members():
    adv, m = anchor_step_advantages([0, 0], [["S", "A", "A"], ["S"]], [[0.25, 0.5, 1.0], [0.0]], norm_by_std=False)
    assert adv == [[0.125, -0.25, 0.25], [-0.125]] and m["gigpo/anchor_states"] == 2


def test_combined_advantage_is_episode_plus_weighted_step():
    adv, m = gigpo_advantages(REWARDS, GROUPS, KEYS, gamma=0.5, step_weight=2.0, step_norm="mean_norm",
                              episode_norm_by_std=False)
    third = 1 / 3  # group 0's episode advantages: 1/3, 1/3, −2/3; group 1's: ±1/2
    assert _flat(adv) == pytest.approx([third, third + 0.5, third, third + 0.5, third, -2 * third - 0.5,
                                        -2 * third - 0.5, -2 * third, 1.0, 0.5, -1.0])
    assert m["gigpo/anchor_states"] == 4 and "adv/degenerate_group_frac" in m
    no_step, _ = gigpo_advantages(REWARDS, GROUPS, KEYS, gamma=0.5, step_weight=0.0, step_norm="mean_std_norm")
    episode, _ = group_advantages(REWARDS, GROUPS)  # ω = 0: GRPO on every step
    assert no_step == [[pytest.approx(float(a))] * len(k) for a, k in zip(episode, KEYS, strict=True)]
    with pytest.raises(ValueError, match="step_norm='std'"):
        gigpo_advantages(REWARDS, GROUPS, KEYS, gamma=0.5, step_weight=1.0, step_norm="std")


def test_broadcast_puts_each_turns_advantage_on_its_sampled_tokens_only():
    # row 0: turn (0,2), observation 2..4, turn (4,6), pad; row 1: one turn, then an observation token
    mask = torch.tensor([[1, 1, 0, 0, 1, 1, 0], [1, 1, 1, 0, 0, 0, 0]], dtype=torch.float32)
    out = broadcast_step_advantages([[0.5, -1.0], [2.0]], [[(0, 2), (4, 6)], [(0, 3)]], mask)
    assert out.tolist() == [[0.5, 0.5, 0.0, 0.0, -1.0, -1.0, 0.0], [2.0, 2.0, 2.0, 0.0, 0.0, 0.0, 0.0]]
    masked_out = broadcast_step_advantages([[0.5, -1.0], [2.0]], [[(0, 2), (4, 6)], [(0, 3)]], torch.zeros(2, 7))
    assert masked_out.abs().sum() == 0  # an episode the rollout masked out trains on nothing
    with pytest.raises(ValueError, match="row 1 has 2 step advantages but 1 turn spans"):
        broadcast_step_advantages([[0.5, -1.0], [2.0, 1.0]], [[(0, 2), (4, 6)], [(0, 3)]], mask)


def _trajectory(keys, reward, group):
    """Two sampled tokens per turn, each followed by one observation token."""
    t = Trajectory(prompt_ids=[1, 2], reward=reward, group_id=group)
    for key in keys:
        t.append_turn([3, 4], [-0.1, -0.2], key)
        t.append([9], None)
    return t


def test_batch_advantages_follow_the_turns_of_the_collated_trajectories():
    trajs = [_trajectory(k, float(r), int(g)) for k, r, g in zip(KEYS, REWARDS, GROUPS, strict=True)]
    batch = collate(trajs, pad_id=0)
    algo = build_config(None, ["algorithm=gigpo", "algo.gigpo_gamma=0.5", "algo.gigpo_step_norm=mean_norm",
                               "algo.adv_norm_by_std=false", "algo.gigpo_step_weight=2"]).algo
    adv, metrics = gigpo_token_advantages(batch, algo, trajs)
    steps, _ = gigpo_advantages(REWARDS, GROUPS, KEYS, gamma=0.5, step_weight=2.0, step_norm="mean_norm",
                                episode_norm_by_std=False)
    assert adv.shape == batch.loss_mask.shape and metrics["gigpo/anchor_states"] == 4
    for b, row in enumerate(steps):
        expected = [x for a in row for x in (a, a, 0.0)]  # turn tokens, then the observation token
        assert adv[b, : len(expected)].tolist() == pytest.approx(expected)
        assert adv[b, len(expected):].abs().sum() == 0  # padding
    assert not torch.allclose(adv, broadcast_advantages(group_advantages(REWARDS, GROUPS)[0], batch.loss_mask))
    with pytest.raises(ValueError, match="4 episodes for a batch of 5"):
        gigpo_token_advantages(batch, algo, trajs[:4])


def test_the_preset_fills_the_gigpo_knobs_on_the_household_recipe():
    cfg = build_config(CONFIG_DIR / "household_tiny.yaml", ["algorithm=gigpo"])
    a = cfg.algo
    assert (a.name, a.advantage, a.gigpo_gamma, a.gigpo_step_weight, a.gigpo_step_norm) == \
        ("gigpo", "gigpo", 0.95, 1.0, "mean_std_norm")
    assert build_config(None).algo.advantage == "grpo"  # the default run is GRPO


@pytest.mark.parametrize(("overrides", "message"), [
    (["algo.advantage=gae"], "algo.advantage='gae' is not an advantage estimator; valid: grpo, gigpo"),
    (["algo.gigpo_step_norm=std"], "algo.gigpo_step_norm='std' is not a GiGPO step normalization"),
    (["algo.gigpo_gamma=1.5"], "algo.gigpo_gamma=1.5 is out of range; allowed: a discount in [0, 1]"),
    (["algo.gigpo_step_weight=-1"], "algo.gigpo_step_weight=-1.0 is out of range"),
    (["algorithm=gigpo", "env.id=alprl/Math-v0"], "algo.advantage='gigpo' needs a multi-turn env; alprl/Math-v0"),
])
def test_config_refuses_bad_gigpo_settings(overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        build_config(None, overrides)
