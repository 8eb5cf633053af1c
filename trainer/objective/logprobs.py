"""Trainer-side log-probs and entropy of the response tokens.

Log-probs are fp32 log-softmax of logits / temperature, gathered at each row's response positions so the result
aligns with `Batch.response_ids`. With a sampler that truncates (`rollout.top_p` < 1 or `rollout.top_k` > 0) they
are renormalized over the set the sampler's rule keeps on these logits (trainer/objective/truncation.py: every
function here takes `top_p` / `top_k`, defaults keeping every token), so they are log-probs of the distribution
the sampler drew from; with neither, the full log-softmax, computed exactly as before. Entropies are always of
the full distribution.

`old_logprobs` is the batch stage (θ_old, no grad, unperturbed, in the update's micro-batch composition);
`compute_logprobs` is the forward of one micro-batch, which the update (trainer/update.py) calls with grad, so a
sampled token meets the model in this one module.

Batches live on the CPU. With the model on an accelerator, a micro-batch's ids go to the model's device and
its (B, T) log-probs and entropies come back (autograd follows the copy), so the (B, T, V) logits never leave
the device and everything after them (objective, corrections, metrics) runs on CPU tensors of size B × T.

Legend: B rows, L padded sequence width, T response width, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from agents.engines.sampling import keeps_all
from trainer.objective.truncation import TruncationProbe, truncated_token_logprobs
from trainer.objective.types import Batch

LogitsHook = Callable[[torch.Tensor, Batch], None]
"""Sees a micro-batch's response logits / τ, (b, T, V) without grad, and the micro-batch."""


def model_device(model: nn.Module) -> torch.device:
    """Where the model computes (the device of its first parameter, or of its local shard under FSDP)."""
    return next(model.parameters()).device


def response_logits(model: nn.Module, batch: Batch, temperature: float) -> torch.Tensor:
    """Logits predicting each response token, (B, T, V), fp32, divided by temperature, on the model's device. The
    LM head runs only from the first position that predicts a response token (`logits_to_keep`), so a long
    prompt costs no vocabulary-sized logits and no scatter of their gradient."""
    device = model_device(model)
    start = batch.response_start.to(device)
    width = batch.input_ids.shape[1]
    first = max(int(batch.response_start.min()) - 1, 0) if len(batch) else 0  # position predicting a response token
    out = model(input_ids=batch.input_ids.to(device), attention_mask=batch.attention_mask.to(device),
                use_cache=False, logits_to_keep=width - first)
    logits = out.logits  # (B, L - first, V); kept position q predicts token first + q + 1
    t = batch.response_ids.shape[1]
    offsets = torch.arange(t, device=device)[None, :]  # (1, T)
    index = (start[:, None] - 1 - first + offsets).clamp(max=logits.shape[1] - 1)  # (B, T)
    picked = logits.gather(1, index[:, :, None].expand(-1, -1, logits.shape[-1]))  # (B, T, V)
    return picked.float() / temperature


def token_logprobs(logits: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[token]: logits (B, T, V), token_ids (B, T) → (B, T)."""
    return logits.log_softmax(-1).gather(-1, token_ids[:, :, None]).squeeze(-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """H = logsumexp(z) − Σ softmax(z)·z, (B, T, V) → (B, T) (reference/algorithms.md §2.5)."""
    probs = logits.softmax(-1)
    return torch.logsumexp(logits, -1) - (probs * logits).sum(-1)


def compute_logprobs(model: nn.Module, batch: Batch, temperature: float, with_entropy: bool = False, *,
                     top_p: float = 1.0, top_k: int = 0, probe: TruncationProbe | None = None,
                     entropy_grad: bool = False, logits_hook: LogitsHook | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(logp (B, T), entropy (B, T) or None) on the batch's device; padding positions hold garbage — always use
    the mask. `top_p` / `top_k`: the sampler's truncation, replayed (`truncated_token_logprobs`); `probe` collects
    its metrics over the sampled tokens; `logits_hook(logits, batch)` sees the (B, T, V) logits / τ (no grad; the
    full-vocabulary KL, trainer/diagnostics/full_vocab_kl.py). The entropy carries a gradient only with
    `entropy_grad` (an entropy term in the loss); as a metric it costs no backward through the (B, T, V) softmax."""
    logits = response_logits(model, batch, temperature)
    if logits_hook is not None:
        logits_hook(logits.detach(), batch)
    ids = batch.response_ids.to(logits.device)
    if keeps_all(top_p, top_k):
        logp = token_logprobs(logits, ids)
    else:
        trunc = truncated_token_logprobs(logits, ids, top_p=top_p, top_k=top_k)
        logp = trunc.logp
        if probe is not None:
            probe.add(trunc, batch.loss_mask)
    entropy = None
    if with_entropy:  # the full distribution's
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            entropy = entropy_from_logits(logits if entropy_grad else logits.detach())
    home = batch.response_ids.device
    if logits.device != home:
        logp, entropy = logp.to(home), (entropy.to(home) if entropy is not None else None)
    return logp, entropy


def micro_batches(rows: torch.Tensor, size: int, batch: Batch) -> list[torch.Tensor]:
    """Micro-batches of `rows`, length-sorted so each is padded only to its own longest row.

    The loss uses mini-batch denominators, so grouping rows differently cannot change it.
    """
    lengths = (batch.response_start + batch.response_len)[rows]
    rows = rows[torch.argsort(lengths, stable=True)]
    return [rows[i: i + size] for i in range(0, len(rows), size)]


@torch.no_grad()
def clean_forward(model: nn.Module, batch: Batch, temperature: float, micro_batch_size: int,
                  with_entropy: bool = False, *, top_p: float = 1.0, top_k: int = 0,
                  probe: TruncationProbe | None = None,
                  logits_hook: LogitsHook | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(logp (B, T), entropy (B, T) or None) of the unperturbed model in eval mode, no grad; `top_p`, `top_k`,
    `probe`, `logits_hook` as in `compute_logprobs`."""
    was_training = model.training
    model.eval()
    out = torch.zeros_like(batch.rollout_logp)
    ent = torch.zeros_like(batch.rollout_logp) if with_entropy else None
    for rows in micro_batches(torch.arange(len(batch)), micro_batch_size, batch):
        sub = batch.select(rows)
        logp, entropy = compute_logprobs(model, sub, temperature, with_entropy=with_entropy, top_p=top_p,
                                         top_k=top_k, probe=probe, logits_hook=logits_hook)
        out[rows, : logp.shape[1]] = logp
        if ent is not None:
            ent[rows, : entropy.shape[1]] = entropy
    model.train(was_training)
    return out, ent


def old_logprobs(model: nn.Module, batch: Batch, temperature: float, micro_batch_size: int, *, top_p: float = 1.0,
                 top_k: int = 0, probe: TruncationProbe | None = None,
                 logits_hook: LogitsHook | None = None) -> torch.Tensor:
    """Trainer log-probs at θ_old for the whole batch, (B, T); same micro-batch composition as updates
    (`prepare_batch` in trainer/loop.py stores them as `batch.old_logp`). A `probe` collects the truncation's
    `rollout_corr/truncation_*` metrics (θ_old's kept set against the tokens the sampler drew); `logits_hook` sees each
    micro-batch's logits (the full-vocabulary KL)."""
    return clean_forward(model, batch, temperature, micro_batch_size, top_p=top_p, top_k=top_k, probe=probe,
                         logits_hook=logits_hook)[0]
