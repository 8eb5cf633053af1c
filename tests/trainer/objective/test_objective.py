"""The objective's aggregation: Dr.GRPO's seq-mean-token-sum-norm through the objective and the update stage."""

import math
from types import SimpleNamespace

import pytest
import torch
from loss_batches import response_batch
from torch import nn

from trainer.config.algo_config import AlgoConfig
from trainer.objective.corrections import compute_correction, correction_kwargs, prepare_corrections
from trainer.objective.logprobs import compute_logprobs, old_logprobs
from trainer.objective.types import Batch
from trainer.update import UpdateSettings, denominators, micro_batch_objective, update_policy

NORM = "seq-mean-token-sum-norm"


def _worked_example(width=None):
    """Rows: 3 valid tokens with A = +1; 2 valid tokens (one padding) with A = −2; an empty row."""
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    old = torch.tensor([[-1.0, -0.5, -2.0], [-0.3, -1.1, 0.0], [0.0, 0.0, 0.0]])
    rollout = old - 0.05  # never read by ppo_clip without a correction
    delta = torch.tensor([[0.1, 0.0, -0.1], [0.2, 0.0, 7.0], [0.0, 0.0, 0.0]])  # Δ_upd; 7.0 sits on padding
    adv = torch.tensor([[1.0], [-2.0], [3.0]]) * mask
    batch = response_batch(old, rollout, mask, adv, width)
    logp = batch.old_logp + (delta if width is None else torch.cat([delta, torch.zeros(3, width - 3)], 1))
    return batch, logp


# Δ_upd in band [0.8, 1.28] everywhere, so ℓ = −A·r: row 0 −(e^0.1 + 1 + e^-0.1) = −3.0100083;
# row 1 A = −2: L1 = L2 = 2r (unclipped, < c·2 = 6) → 2(e^0.2 + 1) = 4.4428055; row 2 empty (not in B′ = 2).
# seq-mean-token-sum-norm with T_norm = 8: (−3.0100083 + 4.4428055) / (2 · 8) = 0.0895498
ROW_SUMS = (-(math.exp(0.1) + 1 + math.exp(-0.1)), 2 * (math.exp(0.2) + 1))
EXPECTED = sum(ROW_SUMS) / (2 * 8)


def _objective(algo, batch, logp, rows=None, **kw):
    rows = torch.arange(len(batch)) if rows is None else rows
    if batch.corr_keep is None:  # once per rollout batch, as prepare_batch does
        batch.corr_weights, batch.corr_keep, _ = prepare_corrections(algo, batch)
    n_tokens, n_seqs, _ = denominators(batch, torch.arange(len(batch)))  # mini-batch = the whole batch
    sub = batch.select(rows)
    lp = logp[rows][:, : sub.loss_mask.shape[1]]
    return micro_batch_objective(algo, sub, lp, torch.zeros_like(lp), n_tokens=n_tokens, n_seqs=n_seqs, **kw)[0]


def test_seq_mean_token_sum_norm_hand_computed_through_the_objective():
    batch, logp = _worked_example()
    assert EXPECTED == pytest.approx(0.0895498, abs=1e-7)
    by_field = _objective(AlgoConfig(loss_agg=NORM, loss_agg_norm_len=8), batch, logp)
    by_keyword = _objective(AlgoConfig(loss_agg=NORM), batch, logp, norm_len=8)
    assert by_field.item() == pytest.approx(EXPECTED, rel=1e-6)
    assert by_keyword.item() == pytest.approx(EXPECTED, rel=1e-6)
    # the keyword (the caller's resolved rollout.max_response_tokens) wins over the field
    assert _objective(AlgoConfig(loss_agg=NORM, loss_agg_norm_len=4), batch, logp, norm_len=8).item() == \
        pytest.approx(EXPECTED, rel=1e-6)
    # seq-mean-token-sum is the same sum without the constant: exactly T_norm times larger
    plain = _objective(AlgoConfig(loss_agg="seq-mean-token-sum"), batch, logp)
    assert plain.item() == pytest.approx(8 * EXPECTED, rel=1e-6)


def test_seq_mean_token_sum_norm_ignores_the_padded_width():
    # T_norm is a constant, not the batch's width: more padding columns leave the loss unchanged
    algo = AlgoConfig(loss_agg=NORM, loss_agg_norm_len=8)
    wide, logp = _worked_example(width=11)
    assert _objective(algo, wide, logp).item() == pytest.approx(EXPECTED, rel=1e-6)


def test_seq_mean_token_sum_norm_is_invariant_to_micro_batching():
    # mini-batch denominators (B′ = 2 of the whole mini-batch, T_norm = 8) in every micro-batch: the parts
    # are ROW_SUMS[0] / 16 and (ROW_SUMS[1] + 0) / 16, and add up to the whole
    algo = AlgoConfig(loss_agg=NORM, loss_agg_norm_len=8)
    batch, logp = _worked_example()
    first = _objective(algo, batch, logp, rows=torch.tensor([0]))
    rest = _objective(algo, batch, logp, rows=torch.tensor([1, 2]))
    assert first.item() == pytest.approx(ROW_SUMS[0] / 16, rel=1e-6)
    assert rest.item() == pytest.approx(ROW_SUMS[1] / 16, rel=1e-6)
    assert (first + rest).item() == pytest.approx(EXPECTED, rel=1e-6)


def test_seq_mean_token_sum_norm_entropy_term_uses_the_same_constant():
    # H = 0.5 on every token: row sums 1.5 and 1.0 → agg = 2.5 / 16; loss = EXPECTED − 0.1 · 2.5 / 16
    algo = AlgoConfig(loss_agg=NORM, loss_agg_norm_len=8, entropy_coef=0.1)
    batch, logp = _worked_example()
    batch.corr_weights, batch.corr_keep, _ = prepare_corrections(algo, batch)
    n_tokens, n_seqs, _ = denominators(batch, torch.arange(3))
    entropy = torch.full_like(logp, 0.5)
    loss, _ = micro_batch_objective(algo, batch, logp, entropy, n_tokens=n_tokens, n_seqs=n_seqs)
    assert loss.item() == pytest.approx(EXPECTED - 0.1 * 2.5 / 16, rel=1e-6)


@pytest.mark.parametrize("norm_len", [None, 0])
def test_seq_mean_token_sum_norm_without_a_constant_says_how_to_set_it(norm_len):
    batch, logp = _worked_example()
    with pytest.raises(ValueError, match="loss_agg_norm_len"):
        _objective(AlgoConfig(loss_agg=NORM), batch, logp, norm_len=norm_len)


def test_seq_mean_token_sum_norm_with_verl_rejection_counts_survivors_only():
    # verl-semantics token MIS, C = 2, L = 1/2: row 0's first token has v = e^1 > 2 → rejected (w = 0, out of m′);
    # other tokens v = e^0.05 → w = e^0.05. Row 0 keeps tokens 2 and 3, row 1 both: B′ is still 2.
    # ℓ sums as ROW_SUMS without row 0's first token (−e^0.1), each token times w = e^0.05
    batch, logp = _worked_example()
    batch.old_logp[0, 0] = batch.rollout_logp[0, 0] + 1.0
    logp = logp.clone()
    logp[0, 0] = batch.old_logp[0, 0] + 0.1
    algo = AlgoConfig(loss_agg=NORM, loss_agg_norm_len=8, correction="mis", mis_semantics="verl", corr_upper=2.0)
    corr = compute_correction(batch.old_logp, batch.rollout_logp, batch.loss_mask, **correction_kwargs(algo))
    batch.corr_weights, batch.corr_keep = corr.weights, corr.keep
    expected = math.exp(0.05) * (ROW_SUMS[0] + math.exp(0.1) + ROW_SUMS[1]) / (2 * 8)
    assert _objective(algo, batch, logp).item() == pytest.approx(expected, rel=1e-5)


# ------------------------------------------------------------------------------ through update_policy


class _TableLM(nn.Module):
    """A bigram model (embedding → logits): enough for compute_logprobs and an optimizer step."""

    def __init__(self, vocab=7):
        super().__init__()
        self.table = nn.Embedding(vocab, vocab)
        nn.init.normal_(self.table.weight, generator=torch.Generator().manual_seed(0))

    def forward(self, input_ids, attention_mask=None, use_cache=False, logits_to_keep=0):
        logits = self.table(input_ids)  # (B, L, V)
        return SimpleNamespace(logits=logits[:, -logits_to_keep:] if logits_to_keep else logits)  # HF's semantics


def _lmresponse_batch():
    """Prompt token 1, responses of 3, 2 and 1 tokens (right-padded), advantages +1, −2, +0.5."""
    ids = torch.tensor([[1, 2, 3, 4], [1, 5, 6, 0], [1, 3, 0, 0]])
    lens = torch.tensor([3, 2, 1])
    mask = (torch.arange(3)[None, :] < lens[:, None]).float()  # (3, 3)
    adv = torch.tensor([[1.0], [-2.0], [0.5]]) * mask
    return Batch(input_ids=ids, attention_mask=(ids > 0).float(), response_start=torch.ones(3, dtype=torch.long),
                 response_len=lens, response_ids=ids[:, 1:], loss_mask=mask, rollout_logp=torch.zeros(3, 3),
                 rewards=torch.zeros(3), group_ids=torch.zeros(3, dtype=torch.long), advantages=adv)


def test_seq_mean_token_sum_norm_through_update_policy():
    # first mini-batch: logp = old_logp, r = 1, so ℓ = −A per valid token (dual clip inactive: 2 < 3·2);
    # row sums −1·3, +2·2, −0.5·1 → (−3 + 4 − 0.5) / (B′ = 3 · T_norm = 8) = 0.5 / 24, micro-batches of 1 row
    model = _TableLM()
    batch = _lmresponse_batch()
    batch.old_logp = old_logprobs(model, batch, temperature=1.0, micro_batch_size=1)
    algo = AlgoConfig(loss_agg=NORM, loss_agg_norm_len=8)
    batch.corr_weights, batch.corr_keep, _ = prepare_corrections(algo, batch)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = model.table.weight.detach().clone()
    out = update_policy(model, optimizer, batch, torch.arange(3),
                        UpdateSettings(algo, temperature=1.0, micro_batch_size=1, grad_clip=1e9))
    assert out["loss/policy"] == pytest.approx(0.5 / 24, rel=1e-5)
    assert out["actor/grad_norm_nonfinite"] == 0.0 and not torch.equal(model.table.weight, before)
    # the step is the gradient of that loss: ∂/∂logp_bt = −A_b / 24 on valid tokens
    model2 = _TableLM()
    logp, _ = compute_logprobs(model2, batch, 1.0)
    (-(batch.advantages * logp * batch.loss_mask).sum() / 24).backward()
    assert torch.allclose(before - 0.1 * model2.table.weight.grad, model.table.weight, atol=1e-6)
