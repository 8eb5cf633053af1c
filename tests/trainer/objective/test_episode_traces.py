"""An episode of several traces is one episode to every statistic: its group's advantages, its sequence-level
correction, a sequence-mean loss, the mini-batch it lands in and GiGPO's steps are those of the same episode sampled
as one stream (agents/trajectory.py, trainer/objective/types.py). Hand-computed on a group of four episodes, one of
which the rollout split into three traces.

The split is the one a rollout makes: each new trace's prompt is the prompt the model was given for its next turn,
here the stream so far (so every sampled token has the same context, hence the same log-prob, in both layouts).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from agents.endpoint.recorder import CallRecord, Recorder
from agents.trajectory import Trajectory
from trainer.algorithms.quatro import quatro_targets
from trainer.loop import compute_advantages
from trainer.objective.corrections import prepare_corrections
from trainer.objective.gigpo import gigpo_token_advantages
from trainer.objective.losses import MULTI_TRACE_SEQ_REFUSAL
from trainer.objective.types import EpisodeRows, collate
from trainer.setup.build import build_config
from trainer.update import denominators, micro_batch_objective, minibatch_rows

PROMPT = [5, 6, 7]
# three turns of sampled tokens (log-probs given), each followed by an observation (masked)
TURNS = [([11, 12], [-0.5, -1.0]), ([13, 14, 15], [-0.25, -0.75, -1.5]), ([16], [-2.0])]
OBS = [[90, 91], [92]]
REWARDS = [1.0, 0.0, 0.0, 1.0]  # the group; episode 0 is the one that may be split


def episode(reward: float, split: bool, shift: float = 0.0, branch: int = 0) -> Trajectory:
    """Episode `TURNS` as one stream, or with a new trace before turns 2 and 3 (`split`), prompt = the stream so far;
    `shift` moves every sampled log-prob and `branch` names the states after the first (a different episode of the
    group: GiGPO's step groups are the episodes of one branch)."""
    traj = Trajectory(prompt_ids=list(PROMPT), group_id=0)
    for n, (ids, logps) in enumerate(TURNS):
        if split and n > 0:
            traj.start_trace(traj.prompt_ids + traj.response_ids, "compaction")
        traj.append_turn(ids, [lp + shift for lp in logps], state=f"s{n}" if n == 0 else f"s{n}-{branch}")
        if n < len(OBS):
            traj.append(OBS[n], None)
    traj.grade(reward)
    return traj


def group(split: bool) -> list[Trajectory]:
    return [episode(r, split and i == 0, shift=0.1 * i, branch=i % 2) for i, r in enumerate(REWARDS)]


def prepared(split: bool, *overrides: str):
    cfg = build_config(None, list(overrides))
    episodes = group(split)
    batch = collate(episodes, pad_id=0)
    batch.old_logp = batch.rollout_logp + 0.05 * batch.loss_mask  # θ_old above μ by 0.05 on every sampled token
    members = torch.ones(len(episodes), dtype=torch.bool)
    batch.advantages, metrics = compute_advantages(batch, cfg, episodes, members)
    batch.corr_weights, batch.corr_keep, _ = prepare_corrections(cfg.algo, batch)
    return cfg, episodes, batch, metrics


def sampled(batch, values: torch.Tensor, rows: list[int]) -> list[float]:
    """The values of `rows`' sampled tokens, in stream order."""
    return [float(values[r, t]) for r in rows for t in range(values.shape[1]) if batch.loss_mask[r, t] > 0]


def test_a_split_episode_is_three_rows_of_one_episode():
    episodes = group(split=True)
    assert [len(e.traces) for e in episodes] == [3, 1, 1, 1]
    split = episodes[0]
    assert split.info["traces"] == 3 and split.info["trace_starts"] == {"compaction": 2}
    assert [t.reward for t in split.traces] == [1.0, 1.0, 1.0]
    assert split.episode_sampled_tokens == 6 and split.num_sampled_tokens == 1
    batch = collate(episodes, pad_id=0)
    assert batch.episode_index.tolist() == [0, 0, 0, 1, 2, 3]
    assert batch.rewards.tolist() == [1.0, 1.0, 1.0, 0.0, 0.0, 1.0]
    second = split.traces[1]  # its prompt is the stream before turn 2: nothing of the stream is lost
    assert second.prompt_ids == PROMPT + TURNS[0][0] + OBS[0] and second.response_ids == TURNS[1][0] + OBS[1]


def test_group_statistics_count_the_episode_once_not_once_per_trace():
    # rewards (1, 0, 0, 1): mean 0.5, unbiased std √(1/3) = 0.57735, so A = ±0.5/0.57735 = ±0.866025
    _, _, whole, metrics = prepared(False)
    _, _, split, split_metrics = prepared(True)
    a = 0.5 / math.sqrt(1 / 3)
    assert sampled(split, split.advantages, [0, 1, 2]) == pytest.approx([a] * 6, abs=1e-5)  # std + 1e-6
    assert sampled(split, split.advantages, [3]) == pytest.approx([-a] * 6, abs=1e-5)
    assert sampled(split, split.advantages, [0, 1, 2]) == sampled(whole, whole.advantages, [0])
    assert split_metrics == metrics
    # counted per row instead, the split episode's 1 would weigh three times: mean (1+1+1+0+0+1)/6 = 2/3, std
    # √(4/15), and its A would be (1 − 2/3)/0.5164 = 0.645
    assert sampled(split, split.advantages, [0])[0] != pytest.approx(0.645497, abs=1e-4)


def test_the_sequence_level_correction_is_the_episodes_whole_product():
    # seq TIS (C = 2): each episode's v = exp(0.05 · 6 sampled tokens) = exp(0.3) = 1.34986, on every trace
    _, _, whole, _ = prepared(False, "algo.correction=tis", "algo.corr_level=seq", "algo.corr_upper=2.0")
    _, _, split, _ = prepared(True, "algo.correction=tis", "algo.corr_level=seq", "algo.corr_upper=2.0")
    assert sampled(split, split.corr_weights, [0, 1, 2]) == pytest.approx([math.exp(0.3)] * 6)
    assert sampled(split, split.corr_weights, [0, 1, 2]) == pytest.approx(sampled(whole, whole.corr_weights, [0]))
    # geo: the mean over the episode's 6 tokens, exp(0.05)
    _, _, geo, _ = prepared(True, "algo.correction=tis", "algo.corr_level=geo", "algo.corr_upper=2.0")
    assert sampled(geo, geo.corr_weights, [0, 1, 2]) == pytest.approx([math.exp(0.05)] * 6)


def test_a_veto_rejects_every_trace_of_the_episode():
    overrides = ("algo.correction=mis", "algo.corr_level=token", "algo.mis_semantics=verl", "algo.corr_veto=true",
                 "algo.corr_veto_threshold=0.5")
    cfg, episodes, batch, _ = prepared(True, *overrides)
    assert batch.corr_keep.sum() == batch.loss_mask.sum()  # no catastrophic token yet
    batch.old_logp[2, 0] = batch.rollout_logp[2, 0] - 1.0  # v = e^-1 < 0.5 on the third trace's only token
    _, keep, _ = prepare_corrections(cfg.algo, batch)
    assert keep[:3].sum() == 0 and keep[3:].sum() == batch.loss_mask[3:].sum()


@pytest.mark.parametrize("agg", ["seq-mean-token-mean", "seq-mean-token-sum", "token-mean"])
def test_a_sequence_mean_loss_weighs_the_episode_once(agg):
    """The objective of the split batch equals the one-stream batch's: same tokens, same log-probs, the episode one
    term of the sequence mean (a per-row mean would give the split episode's three traces three terms)."""
    def objective(split: bool) -> float:
        cfg, _, batch, _ = prepared(split, f"algo.loss_agg={agg}")
        rows = torch.arange(len(batch))
        n_tokens, n_seqs, seq_tokens = denominators(batch, rows)
        logp = batch.old_logp.clone().requires_grad_(True)  # on-policy: r = 1
        loss, _ = micro_batch_objective(cfg.algo, batch, logp, torch.zeros_like(logp), n_tokens=n_tokens,
                                        n_seqs=n_seqs, seq_tokens=seq_tokens)
        return loss.item()

    whole, split = objective(False), objective(True)
    assert split == pytest.approx(whole, rel=1e-6, abs=1e-6)
    if agg == "seq-mean-token-mean":
        # per row it would be (A + A + A + (−A) + (−A) + A)/6 = A/3 ≠ 0 = (A − A − A + A)/4 (ratio 1, −A·r per token)
        assert whole == pytest.approx(0.0, abs=1e-6)


def test_mini_batches_keep_an_episodes_traces_together():
    batch = collate(group(split=True), pad_id=0)
    for seed in range(5):
        chunks = minibatch_rows(len(batch), 2, torch.Generator().manual_seed(seed), batch.episode_index)
        assert sorted(torch.cat(chunks).tolist()) == list(range(len(batch)))
        holder = [k for k, rows in enumerate(chunks) if 0 in rows.tolist()]
        assert holder and {0, 1, 2} <= set(chunks[holder[0]].tolist())
    # one row an episode: the split is the one it always was (the same permutation of rows)
    whole = collate(group(split=False), pad_id=0)
    gen_a, gen_b = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert [c.tolist() for c in minibatch_rows(4, 2, gen_a, whole.episode_index)] == \
        [c.tolist() for c in torch.randperm(4, generator=gen_b).tensor_split(2)]


def test_gigpo_steps_run_across_the_traces_of_an_episode():
    cfg = build_config(None, ["algorithm=gigpo"])
    results = []
    for split in (False, True):
        episodes = group(split)
        batch = collate(episodes, pad_id=0)
        adv, _ = gigpo_token_advantages(batch, cfg.algo, episodes, torch.ones(4, dtype=torch.bool))
        results.append(sampled(batch, adv, [0, 1, 2] if split else [0]))
    assert results[1] == pytest.approx(results[0])
    assert len(set(round(a, 6) for a in results[0])) > 1  # the steps differ: GiGPO's step level acted


def test_quatro_targets_one_episode_and_refuses_the_seq_level():
    cfg = build_config(None, ["algorithm=quatro"])
    assert cfg.algo.upd_level == "geo"
    _, _, whole, _ = prepared(False, "algorithm=quatro")
    _, _, split, _ = prepared(True, "algorithm=quatro")
    members = torch.ones(4, dtype=torch.bool)
    targets, _ = quatro_targets(cfg.algo, split, members)
    reference, _ = quatro_targets(cfg.algo, whole, members)
    assert sampled(split, targets, [0, 1, 2]) == pytest.approx(sampled(whole, reference, [0]))
    seq = dataclasses.replace(cfg.algo, upd_level="seq")
    with pytest.raises(ValueError) as err:
        quatro_targets(seq, split, members)
    assert str(err.value) == MULTI_TRACE_SEQ_REFUSAL and "\n" not in str(err.value)
    quatro_targets(seq, whole, members)  # one trace an episode: defined as before


def test_a_sub_batch_numbers_its_episodes_from_zero():
    """A rank's or a micro-batch's rows (`Batch.select`) keep their episode numbers in the whole batch; the
    reductions renumber them, so a split episode's rows still reduce together."""
    batch = collate(group(split=True), pad_id=0).select([1, 2, 3, 5])
    assert batch.episode_index.tolist() == [0, 0, 1, 3]
    rows = EpisodeRows.of(batch.episode_index, len(batch))
    assert rows.index.tolist() == [0, 0, 1, 2] and rows.count == 3 and rows.first_rows().tolist() == [0, 2, 3]
    assert rows.total(torch.tensor([1.0, 2.0, 4.0, 8.0])).tolist() == [3.0, 3.0, 4.0, 8.0]


def test_a_harness_that_rewrites_its_history_twice_counts_once_in_its_group():
    """The policy endpoint's recorder (agents/endpoint/recorder.py): three calls whose prompts do not extend the
    episode's tokens make one episode of three traces; in a group of four its reward weighs once."""
    recorder = Recorder(max_response_tokens=64, decode=lambda ids: " ".join(map(str, ids)), open_episodes=True)
    log = recorder.get("ep-0")
    for n, prompt in enumerate([[5, 6, 7], [5, 8], [9]]):  # each call edits what came before
        recorder.record(log, CallRecord(n, prompt, [11 + n, 12 + n], [-0.5, -0.5], "stop"))
    rewritten = recorder.trajectory(log, 1.0, empty_prompt=[0])
    assert len(rewritten.traces) == 3 and rewritten.info["prefix_breaks"] == 2
    assert [t.prompt_ids for t in rewritten.traces] == [[5, 6, 7], [5, 8], [9]]
    others = [episode(r, False, shift=0.1 * i) for i, r in enumerate(REWARDS[1:], 1)]
    episodes = [rewritten, *others]
    batch = collate(episodes, pad_id=0)
    batch.old_logp = batch.rollout_logp.clone()
    adv, metrics = compute_advantages(batch, build_config(None, []), episodes, torch.ones(4, dtype=torch.bool))
    a = 0.5 / math.sqrt(1 / 3)  # rewards (1, 0, 0, 1), as the unsplit group
    assert sampled(batch, adv, [0, 1, 2]) == pytest.approx([a] * 6, abs=1e-5)
    assert metrics == prepared(False)[3]


def test_a_saved_episode_comes_back_with_its_traces():
    """Asynchronous rollouts save the batches sampled ahead as plain dicts (trainer/runtime/async_rollouts.py)."""
    saved = dataclasses.asdict(group(split=True)[0])
    back = Trajectory.from_dict(saved)
    assert [type(t) for t in back.traces] == [Trajectory] * 3
    assert dataclasses.asdict(back) == saved
    assert collate([back], 0).input_ids.tolist() == collate(group(split=True)[:1], 0).input_ids.tolist()
