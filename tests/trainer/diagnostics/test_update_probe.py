"""Table 5's `RatioProbe` only watches `update_policy`: attached or not, the step is the same, bit for bit.

A tiny Qwen2 policy, 8 rows in micro-batches of 3, two mini-batch steps as the loop runs them (the first probed
with suffix "", the second with "_last", both on a diagnostics step, so every extra forward runs: |Δp| per layer
group, the clean π_θ of a perturbed later mini-batch). Same weights, log σ, optimizer state and global RNG after
both steps; same values under every key the unprobed step logs; `diag/*` and `perturb/dp/*` only with the probe.
"""

from __future__ import annotations

import pytest
import torch
from tiny_update import prepared_batch, tiny_model

from trainer.components import build_optimizer, build_perturbation
from trainer.diagnostics.ratio_diagnostics import RatioProbe, diag_suffixes
from trainer.setup.build import build_config
from trainer.update import UpdateSettings, update_policy

PROBE_PREFIXES = ("diag/", "perturb/dp/")


def two_steps(preset: str, probed: bool):
    """Metrics of both mini-batch steps and the state after them: (records, weights, log σ, optimizer state)."""
    cfg = build_config(None, [f"algorithm={preset}"])
    model = tiny_model()
    batch = prepared_batch(model, cfg, 3)
    pert = build_perturbation(model, cfg)
    optimizer = build_optimizer(model, cfg, pert)
    settings = UpdateSettings(cfg.algo, temperature=1.0, micro_batch_size=3, grad_clip=1.0, norm_len=32)
    torch.manual_seed(123)  # the global RNG the probe must not touch
    records = []
    for k, rows in enumerate(torch.randperm(8, generator=torch.Generator().manual_seed(3)).tensor_split(2)):
        probe = RatioProbe(cfg.algo, diag_suffixes(k, 2), extra_forwards=True, max_rows=2) if probed else None
        records.append(update_policy(model, optimizer, batch, rows, settings, perturbation=pert,
                                     noise_base=100 + k, probe=probe))
    state = [v.clone() for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
    weights = {k: v.detach().clone() for k, v in model.named_parameters()}
    return records, weights, (pert.log_sigma.detach().clone() if pert else None), state, torch.get_rng_state()


@pytest.mark.parametrize("preset", ["grpo", "seq_alp"])
def test_a_probe_changes_no_bit_of_the_step(preset):
    plain, probed = two_steps(preset, probed=False), two_steps(preset, probed=True)
    assert plain[1].keys() == probed[1].keys()
    assert all(torch.equal(v, probed[1][k]) for k, v in plain[1].items()), "weights differ"
    assert (plain[2] is None) == (preset == "grpo")
    assert plain[2] is None or torch.equal(plain[2], probed[2]), "log sigma differs"
    assert all(torch.equal(a, b) for a, b in zip(plain[3], probed[3], strict=True)), "optimizer state differs"
    assert torch.equal(plain[4], probed[4]), "the probe moved the global RNG"
    for k, (without, with_probe) in enumerate(zip(plain[0], probed[0], strict=True)):
        assert not any(key.startswith(PROBE_PREFIXES) for key in without)
        shared = {key: v for key, v in with_probe.items() if not key.startswith(PROBE_PREFIXES)}
        assert list(shared.items()) == list(without.items()), k  # same keys, same order, same floats
        suffix = "" if k == 0 else "_last"
        assert f"diag/ratio_loss{suffix}/p50" in with_probe and f"diag/ratio_upd{suffix}/p50" in with_probe
    if preset == "seq_alp":  # |Δp| overall and per layer group: the first mini-batch only
        assert {"perturb/dp/p75", "perturb/dp/layer0/p75"} <= probed[0][0].keys()
        assert not any(key.startswith("perturb/dp/") for key in probed[0][1])
