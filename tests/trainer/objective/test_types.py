import pytest
import torch

from agents.trajectory import Trajectory
from trainer.objective.types import collate


def _traj(prompt, sampled, obs, reward=1.0, group=0):
    t = Trajectory(prompt_ids=prompt, reward=reward, group_id=group)
    t.append(sampled, [-0.5] * len(sampled))
    t.append(obs, None)
    t.append([7], [-0.25])
    return t


def test_collate_keeps_ids_masks_and_logprobs():
    a = _traj([1, 2, 3], [10, 11], [20, 21, 22])
    b = _traj([1], [12], [23], reward=0.0, group=0)
    batch = collate([a, b], pad_id=0)
    assert batch.input_ids[0].tolist() == [1, 2, 3, 10, 11, 20, 21, 22, 7]
    assert batch.response_ids[1, :3].tolist() == [12, 23, 7]
    assert batch.loss_mask[0].tolist() == [1, 1, 0, 0, 0, 1]
    assert batch.rollout_logp[0].tolist() == [-0.5, -0.5, 0.0, 0.0, 0.0, -0.25]
    assert batch.loss_mask[1].tolist() == [1, 0, 1, 0, 0, 0]  # padding has mask 0
    assert batch.response_start.tolist() == [3, 1] and batch.response_len.tolist() == [6, 3]
    assert torch.equal(batch.rewards, torch.tensor([1.0, 0.0]))


def test_select_trims_padding():
    a = _traj([1, 2, 3], [10, 11], [20, 21, 22])
    b = _traj([1], [12], [23])
    sub = collate([a, b], pad_id=0).select([1])
    assert sub.input_ids.shape == (1, 4) and sub.response_ids.shape == (1, 3)


def test_misaligned_trajectory_rejected():
    t = Trajectory(prompt_ids=[1], response_ids=[2, 3], loss_mask=[1], rollout_logprobs=[0.0])
    with pytest.raises(ValueError, match="misaligned"):
        collate([t], pad_id=0)
    with pytest.raises(ValueError, match="log-probs"):
        Trajectory(prompt_ids=[1]).append([1, 2], [0.0])
