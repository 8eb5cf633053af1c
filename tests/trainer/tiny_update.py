"""A tiny random Qwen2 and a prepared rollout batch for tests that call `update_policy` directly (no engine, no env).
"""

from __future__ import annotations

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from agents.trajectory import Trajectory
from trainer.config.train_config import TrainConfig
from trainer.objective.advantages import broadcast_advantages, group_advantages
from trainer.objective.corrections import prepare_corrections
from trainer.objective.logprobs import old_logprobs
from trainer.objective.types import Batch, collate


def tiny_model() -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, intermediate_size=64, tie_word_embeddings=True)
    return Qwen2ForCausalLM(cfg).train()


def prepared_batch(model: Qwen2ForCausalLM, cfg: TrainConfig, micro_batch_size: int) -> Batch:
    """8 rows of random tokens and lengths in 2 groups, rollout log-probs off θ_old's by a little noise, advantages
    and the corrections of `cfg.algo` prepared (old log-probs in micro-batches of `micro_batch_size`)."""
    gen = torch.Generator().manual_seed(1)
    trajs = []
    for i in range(8):
        n = int(torch.randint(6, 16, (1,), generator=gen))
        trajs.append(Trajectory(prompt_ids=torch.randint(1, 128, (5,), generator=gen).tolist(),
                                response_ids=torch.randint(1, 128, (n,), generator=gen).tolist(), loss_mask=[1] * n,
                                rollout_logprobs=[0.0] * n, reward=float(i % 3 == 0), group_id=i // 4))
    batch = collate(trajs, pad_id=0)
    batch.old_logp = old_logprobs(model, batch, 1.0, micro_batch_size)
    batch.rollout_logp = (batch.old_logp + 0.05 * torch.randn(batch.old_logp.shape, generator=gen)) * batch.loss_mask
    adv, _ = group_advantages(batch.rewards, batch.group_ids)
    batch.advantages = broadcast_advantages(adv, batch.loss_mask)
    batch.corr_weights, batch.corr_keep, _ = prepare_corrections(cfg.algo, batch)
    return batch
