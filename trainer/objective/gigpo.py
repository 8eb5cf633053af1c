"""GiGPO advantages (Feng et al., arXiv 2505.10978): an episode-level group advantage plus a step-level one over
anchor states, broadcast onto each turn's sampled tokens.

    A(a_t^i) = A^E(τ_i) + ω · A^S(a_t^i)

A^E is the GRPO advantage of episode i in its group (trainer/objective/advantages.py). A^S groups, within one episode group,
every step (i, t) whose state key s_t^i is the same (an anchor state; the first state, the task's initial
observation, is shared by the whole group), and normalizes the steps' discounted returns R_t^i = Σ_{k≥t} γ^{k−t}
r_k^i within that step group: mean-centred (`mean_norm`) or also divided by the group's std (`mean_std_norm`).
A step group of one has no baseline: its A^S is 0. A state that one episode visits twice is two members. An
episode outside its group's statistics (`members`, trainer/objective/infra_failures.py: the infrastructure failed
it, or its group kept no baseline) joins no step group either, and gets 0 at both levels. An episode of several
traces (agents/trajectory.py) is one episode here: its steps are its traces' turns in order, each with its own anchor.

Legend: B episodes, N_i steps (turns) of episode i, T response positions. Step lists are Python lists (ragged).
"""

from __future__ import annotations

from collections import defaultdict

import torch

from agents.trajectory import Trajectory
from trainer.config.algo_config import AlgoConfig
from trainer.objective.advantages import group_advantages
from trainer.objective.types import Batch, EpisodeRows

STEP_NORMS = ("mean_std_norm", "mean_norm")
"""How A^S normalizes a step group's returns: centre and divide by the std (GRPO), or centre only."""


def step_returns(rewards: list[float], num_steps: list[int], gamma: float,
                 step_rewards: list[list[float]] | None = None) -> list[list[float]]:
    """Discounted returns R_t^i = Σ_{k≥t} γ^{k−t} r_k^i per step, (B,) lists of (N_i,) (arXiv 2505.10978 §3).

    Without `step_rewards` the episode's outcome reward is the reward of its last step, so R_t = γ^{N−1−t} · R.
    """
    if step_rewards is None:
        step_rewards = [[0.0] * (n - 1) + [float(r)] if n else [] for r, n in zip(rewards, num_steps, strict=True)]
    out = []
    for i, (r, n) in enumerate(zip(step_rewards, num_steps, strict=True)):
        if len(r) != n:
            raise ValueError(f"step_returns: episode {i} has {n} steps but {len(r)} step rewards")
        ret, acc = [0.0] * n, 0.0
        for t in reversed(range(n)):
            acc = r[t] + gamma * acc
            ret[t] = acc
        out.append(ret)
    return out


def anchor_step_advantages(group_ids: list[int], step_keys: list[list[str]], returns: list[list[float]], *,
                           norm_by_std: bool, eps: float = 1e-6,
                           members: list[bool] | None = None) -> tuple[list[list[float]], dict[str, float]]:
    """A^S per step, (B,) lists of (N_i,), from each episode's group id, step state keys and step returns.

    Step groups are keyed by (group id, state key); a group of one, or one whose returns are all equal, gets 0.
    Std is unbiased, as in `group_advantages`. `members` (B,): the episodes whose steps join step groups (default:
    all); the others' steps get 0.
    """
    steps: dict[tuple[int, str], list[tuple[int, int]]] = defaultdict(list)  # step group → [(episode, step)]
    for i, (g, keys) in enumerate(zip(group_ids, step_keys, strict=True)):
        if len(keys) != len(returns[i]):
            raise ValueError(f"anchor_step_advantages: episode {i} has {len(keys)} state keys but "
                             f"{len(returns[i])} step returns")
        if members is not None and not members[i]:
            continue
        for t, key in enumerate(keys):
            steps[(g, key)].append((i, t))
    adv = [[0.0] * len(keys) for keys in step_keys]
    anchors = [m for m in steps.values() if len(m) >= 2]
    for anchor in anchors:
        r = torch.tensor([returns[i][t] for i, t in anchor], dtype=torch.float64)  # (S,) the step group's returns
        centred = r - r.mean()
        if norm_by_std:
            centred = centred / (r.std() + eps)
        if torch.all(r == r[0]):
            centred = torch.zeros_like(r)
        for (i, t), a in zip(anchor, centred.tolist(), strict=True):
            adv[i][t] = a
    total = sum(len(keys) for keys in step_keys)
    in_anchors = sum(len(m) for m in anchors)
    flat = [abs(a) for row in adv for a in row]
    return adv, {"gigpo/anchor_states": float(len(anchors)),
                 "gigpo/anchor_group_size_mean": in_anchors / len(anchors) if anchors else 0.0,
                 "gigpo/anchor_step_frac": in_anchors / total if total else 0.0,
                 "gigpo/step_adv_abs_mean": sum(flat) / len(flat) if flat else 0.0}


def gigpo_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, step_keys: list[list[str]], *,
                     gamma: float, step_weight: float, step_norm: str, episode_norm_by_std: bool = True,
                     leave_one_out: bool = False, step_rewards: list[list[float]] | None = None,
                     members: torch.Tensor | None = None) -> tuple[list[list[float]], dict[str, float]]:
    """A^E(τ_i) + ω · A^S(a_t^i) per step, (B,) lists of (N_i,), from rewards (B,), group ids (B,) and each
    episode's step state keys (arXiv 2505.10978, the combined advantage); metrics of both levels. `members`
    (B,) bool: the episodes that count at both levels (default: all)."""
    if step_norm not in STEP_NORMS:
        raise ValueError(f"gigpo_advantages: step_norm={step_norm!r}; valid: {', '.join(STEP_NORMS)}")
    episode_adv, metrics = group_advantages(rewards, group_ids, members=members, norm_by_std=episode_norm_by_std,
                                            leave_one_out=leave_one_out)
    returns = step_returns(rewards.tolist(), [len(k) for k in step_keys], gamma, step_rewards)
    step_adv, step_metrics = anchor_step_advantages(group_ids.tolist(), step_keys, returns,
                                                    norm_by_std=step_norm == "mean_std_norm",
                                                    members=None if members is None else members.tolist())
    combined = [[float(a_e) + step_weight * a_s for a_s in row]
                for a_e, row in zip(episode_adv.tolist(), step_adv, strict=True)]
    return combined, metrics | step_metrics


def broadcast_step_advantages(step_adv: list[list[float]], turn_spans: list[list[tuple[int, int]]],
                              loss_mask: torch.Tensor) -> torch.Tensor:
    """A_bt = A_{b,n(t)} · m_bt: each step's advantage on its turn's span of response positions, (B, T).
    Observation/tool tokens (m = 0, and positions outside every turn) carry none."""
    out = torch.zeros_like(loss_mask, dtype=torch.float32)  # (B, T)
    for b, (row, spans) in enumerate(zip(step_adv, turn_spans, strict=True)):
        if len(row) != len(spans):
            raise ValueError(f"broadcast_step_advantages: row {b} has {len(row)} step advantages but "
                             f"{len(spans)} turn spans")
        for a, (start, end) in zip(row, spans, strict=True):
            out[b, start:end] = a
    return out * loss_mask


def gigpo_token_advantages(batch: Batch, algo: AlgoConfig, episodes: list[Trajectory],
                           members: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """GiGPO advantages of a batch's rows on their sampled tokens, (B, T), with the `algo.gigpo_*` knobs; the outcome
    reward (after any shaping) is the last step's. `episodes`: the E episodes the batch was collated from, in order;
    an episode's steps are its traces' turns in order (each keeps its anchor state), and each trace's turns get their
    steps' advantages. `members` (E,): the episodes that count (`gigpo_advantages`)."""
    rows = EpisodeRows.of(batch.episode_index, len(batch))
    if len(episodes) != rows.count:
        raise ValueError(f"gigpo_token_advantages: {len(episodes)} episodes for a batch of {rows.count}")
    first = rows.first_rows()  # (E,) a row of each episode: its reward and group are the episode's
    keys = [[key for trace in e.traces for key in trace.turn_states] for e in episodes]
    steps, metrics = gigpo_advantages(batch.rewards[first], batch.group_ids[first], keys,
                                      gamma=algo.gigpo_gamma, step_weight=algo.gigpo_step_weight,
                                      step_norm=algo.gigpo_step_norm, episode_norm_by_std=algo.adv_norm_by_std,
                                      leave_one_out=algo.adv_leave_one_out, members=members)
    trace_steps, trace_spans = [], []  # per row: the slice of its episode's steps that are its turns
    for episode, episode_steps in zip(episodes, steps, strict=True):
        done = 0
        for trace in episode.traces:
            trace_steps.append(episode_steps[done: done + len(trace.turn_spans)])
            trace_spans.append(trace.turn_spans)
            done += len(trace.turn_spans)
    return broadcast_step_advantages(trace_steps, trace_spans, batch.loss_mask), metrics
