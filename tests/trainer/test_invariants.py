"""One writer per invariant, on real parts (tiny Qwen2, the transformers engine, TIR env episodes):

- a batch field after `collate` is written by `prepare_batch` (trainer/loop.py) alone, an episode's whole loss
  mask by `Trajectory.mask_out` alone, and a sampled token's mask after sampling by `Trajectory.mask_stale` alone
  (`rollout.max_token_version_gap`);
- MIPU's validation batch is the training batch of the same trajectories, through the same `prepare_batch`, and
  its gap proxy reads what the validation pipeline always read (collate, group Â, one clean forward);
- an episode DAPO's overlong filter masks out leaves every loss input of the prepared batch, yet its reward still
  counts in its group's baseline;
- the objective never computes corrections per micro-batch: a batch without prepared ones is refused, saying what
  is missing and what to call.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
from pathlib import Path

import pytest
import torch
from engine_settings import hf_engine_kwargs

from agents.engines.hf import HFEngine
from agents.env_families import make_agent
from agents.models import build_tiny_model
from trainer.algorithms.dapo import overlong_shaping
from trainer.algorithms.mipu import episode_advantages, gap_proxy, validation_gap, validation_rollouts
from trainer.components import Components, build_optimizer, make_envs
from trainer.config.algo_config import AlgoConfig
from trainer.loop import prepare_batch
from trainer.objective.advantages import broadcast_advantages, group_advantages
from trainer.objective.corrections import prepare_corrections
from trainer.objective.logprobs import old_logprobs
from trainer.objective.types import Batch, collate
from trainer.runtime.distributed import SINGLE
from trainer.setup.build import build_config
from trainer.update import UpdateSettings, denominators, micro_batch_objective, update_policy

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["algorithm=mipu", "algo.kl_coef=0", "rollout.prompts_per_step=2", "rollout.group_size=2",
         "rollout.max_new_tokens=6", "rollout.max_response_tokens=12", "env.max_turns=1",
         "optim.micro_batch_size=3"]  # micro-batches of 3 over 4 rows: the old log-probs come in two pieces
REWARDS = [1.0, 0.0, 0.0, 1.0]  # an untrained model never solves a task: informative groups by hand
UPDATE_ONLY = {"corr_weights", "corr_keep", "quatro_targets", "ref_logp"}


@pytest.fixture(scope="module")
def parts(tiny_tokenizer):
    cfg = build_config(None, SMALL)
    model = build_tiny_model(tiny_tokenizer, hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                             intermediate_size=128, seed=0)
    engine = HFEngine(model, tiny_tokenizer, **hf_engine_kwargs())
    c = Components(model=model, tokenizer=tiny_tokenizer, engine=engine,
                   agent=make_agent(cfg.env, tiny_tokenizer), envs=make_envs(cfg, 4),
                   optimizer=build_optimizer(model, cfg))
    trajs = validation_rollouts(c, cfg, step=1)
    assert len(trajs) == len(REWARDS) and all(sum(t.loss_mask) > 0 for t in trajs)
    for t, reward in zip(trajs, REWARDS, strict=True):
        t.reward = reward
    yield cfg, c, trajs
    c.close()


def _writers(paths: list[Path], fields: set[str]) -> set[tuple[str, str]]:
    """(file, enclosing function) of every assignment to an attribute named in `fields`."""
    found = set()

    def walk(node: ast.AST, where: str, rel: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else where
            if isinstance(child, ast.Assign | ast.AugAssign | ast.AnnAssign):
                targets = child.targets if isinstance(child, ast.Assign) else [child.target]
                if any(isinstance(n, ast.Attribute) and n.attr in fields for t in targets for n in ast.walk(t)):
                    found.add((rel, inner))
            walk(child, inner, rel)

    for path in paths:
        walk(ast.parse(path.read_text()), "<module>", path.relative_to(ROOT).as_posix())
    return found


def test_each_batch_field_and_the_episode_mask_have_one_writer():
    sources = sorted((ROOT / "trainer").rglob("*.py")) + sorted((ROOT / "agents").rglob("*.py"))
    later = {f.name for f in dataclasses.fields(Batch)} - {"input_ids", "attention_mask", "response_start",
                                                           "response_len", "response_ids", "group_ids",
                                                           "episode_index"}
    assert {"advantages", "old_logp", "corr_weights", "corr_keep", "rewards", "loss_mask"} <= later
    batch_writers = {w for w in _writers(sources, later - {"loss_mask"}) if w[0].startswith("trainer/")}
    assert batch_writers == {("trainer/loop.py", "prepare_batch")}
    # the trajectory's lists are filled by `append` (extend), zeroed as a whole by `mask_out`, token by token past
    # the version bound by `mask_stale`, and handed to an earlier trace as they are by `start_trace` (which starts
    # the new trace empty) only
    assert _writers(sources, {"loss_mask", "rollout_logprobs"}) == {("agents/trajectory.py", "mask_out"),
                                                                     ("agents/trajectory.py", "mask_stale"),
                                                                     ("agents/trajectory.py", "start_trace")}


def test_mipu_validation_batch_is_the_training_batch_of_the_same_trajectories(parts):
    cfg, c, trajs = parts
    val, val_metrics = prepare_batch(c, cfg, copy.deepcopy(trajs), for_update=False)
    train, _ = prepare_batch(c, cfg, copy.deepcopy(trajs))
    for f in dataclasses.fields(Batch):
        ours, theirs = getattr(val, f.name), getattr(train, f.name)
        if f.name in UPDATE_ONLY:
            assert ours is None, f.name  # nothing the gap proxy does not read
        elif ours is None or theirs is None:  # a rollout field the batch does not hold (the sampler's top-k)
            assert ours is None and theirs is None, f.name
        else:
            assert torch.equal(ours, theirs), f.name
    assert train.corr_weights is not None and train.corr_keep is not None  # the preset's token TIS
    # under GiGPO too the validation batch keeps one Â per episode, as the gap proxy weighs whole episodes
    gigpo = dataclasses.replace(cfg, algo=dataclasses.replace(cfg.algo, advantage="gigpo"))
    assert torch.equal(prepare_batch(c, gigpo, copy.deepcopy(trajs), for_update=False)[0].advantages,
                       val.advantages)


def test_mipu_gap_proxy_reads_what_the_validation_pipeline_computed(parts):
    cfg, c, trajs = parts
    trajs = copy.deepcopy(trajs)
    trajs[2].mask_out("void_turn")  # a row without sampled tokens: out of the proxy, its reward in the baseline
    val, val_metrics = prepare_batch(c, cfg, copy.deepcopy(trajs), for_update=False)
    # the pipeline MIPU ran on its own before: collate → group Â (B,) → one clean forward at θ_{k+1}
    batch = collate(trajs, c.tokenizer.pad_token_id)
    adv, adv_metrics = group_advantages(batch.rewards, batch.group_ids, norm_by_std=cfg.algo.adv_norm_by_std,
                                        leave_one_out=cfg.algo.adv_leave_one_out)
    new_logp = old_logprobs(c.model, batch, cfg.rollout.temperature, cfg.optim.micro_batch_size)
    sampled = batch.loss_mask.sum(-1) > 0
    assert sampled.tolist() == [True, True, False, True] and adv[2] != 0
    assert torch.equal(val.old_logp, new_logp) and torch.equal(val.loss_mask, batch.loss_mask)
    assert torch.equal(episode_advantages(val)[sampled], adv[sampled]) and episode_advantages(val)[2] == 0
    assert torch.equal(broadcast_advantages(episode_advantages(val), val.loss_mask), val.advantages)
    expected, stats = gap_proxy(new_logp, batch.rollout_logp, batch.loss_mask, adv)
    t_post, metrics = validation_gap(val, val_metrics, SINGLE)
    assert stats["mipu/val_rows"] == 3.0 and t_post == expected
    assert metrics == stats | {"mipu/val_degenerate_frac": adv_metrics["adv/degenerate_group_frac"],
                               "mipu/val_reward": 0.5}


def test_an_overlong_episode_leaves_every_loss_input_but_keeps_its_baseline(parts):
    cfg, c, trajs = parts
    dapo = build_config(None, SMALL + ["algo.overlong_filter=true"])
    trajs = copy.deepcopy(trajs)
    trajs[0].info["budget_exhausted"] = True  # what the rollout records when an episode hits the budget
    metrics = overlong_shaping(dapo, trajs)
    assert metrics["dapo/overlong_filtered"] == 0.25 and trajs[0].info["loss_masked"]
    batch, _ = prepare_batch(c, dapo, trajs)
    for name in ("loss_mask", "rollout_logp", "advantages", "corr_weights", "corr_keep"):
        assert (getattr(batch, name)[0] == 0).all(), name
    assert (batch.loss_mask[1:].sum(-1) > 0).all()
    # its reward 1 still sits in group 0's baseline: its partner (reward 0) gets a negative advantage, where a
    # group of one would give it 0
    assert (batch.advantages[1][batch.loss_mask[1] > 0] < 0).all()
    n_tokens, _, _ = denominators(batch, torch.arange(len(batch)))
    assert n_tokens.item() == batch.loss_mask[1:].sum().item()  # nor does it count in the denominators


def _prepared_free_batch() -> tuple[Batch, torch.Tensor]:
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    old = torch.tensor([[-1.0, -0.5, 0.0], [-0.3, -1.1, -2.0]])
    batch = Batch(input_ids=torch.zeros(2, 4, dtype=torch.long), attention_mask=torch.ones(2, 4),
                  response_start=torch.ones(2, dtype=torch.long), response_len=torch.full((2,), 3),
                  response_ids=torch.zeros(2, 3, dtype=torch.long), loss_mask=mask, rollout_logp=old - 0.1,
                  rewards=torch.tensor([1.0, 0.0]), group_ids=torch.zeros(2, dtype=torch.long),
                  advantages=torch.tensor([[1.0], [-1.0]]) * mask, old_logp=old)
    return batch, old + 0.05


@pytest.mark.parametrize("algo", [AlgoConfig(), AlgoConfig(correction="tis", corr_upper=2.0)], ids=["none", "tis"])
def test_a_batch_without_prepared_corrections_is_refused(algo):
    batch, logp = _prepared_free_batch()
    n = torch.tensor(5.0), torch.tensor(2.0)
    for call in (lambda: micro_batch_objective(algo, batch, logp, torch.zeros_like(logp), n_tokens=n[0],
                                               n_seqs=n[1]),
                 lambda: denominators(batch, torch.arange(2))):
        with pytest.raises(ValueError, match=r"no corr_weights / corr_keep: call prepare_corrections\(algo, batch\)"):
            call()
    batch.corr_weights, batch.corr_keep, _ = prepare_corrections(algo, batch)  # the way out the error names
    loss, _ = micro_batch_objective(algo, batch, logp, torch.zeros_like(logp), n_tokens=n[0], n_seqs=n[1])
    assert torch.isfinite(loss)


def test_the_update_stage_refuses_an_unprepared_batch_before_stepping(parts):
    cfg, c, trajs = parts
    batch, _ = prepare_batch(c, cfg, copy.deepcopy(trajs))
    batch.corr_weights = batch.corr_keep = None
    before = {k: v.detach().clone() for k, v in c.model.named_parameters()}
    with pytest.raises(ValueError, match="prepare_corrections"):
        update_policy(c.model, c.optimizer, batch, torch.arange(len(batch)), UpdateSettings.from_config(cfg))
    assert all(torch.equal(v, before[k]) for k, v in c.model.named_parameters())
