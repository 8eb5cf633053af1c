"""`perturb.sigma_mode=relative` through the trainer: the realized noise is logged beside σ, a resumed run
restores σ exactly, and a bad mode or combination is refused before anything starts."""

from __future__ import annotations

import json

import pytest
from tiny_tir import SMALL

from trainer.config.errors import ConfigError
from trainer.loop import train
from trainer.setup.build import build_config

pytestmark = pytest.mark.smoke

ALP = ["algorithm=token_alp", "perturb.sigma_mode=relative", "perturb.sigma_init=0.02", "perturb.lr=0.05",
       "rollout.prompts_per_step=2", "rollout.group_size=4", "save_every=1"]


def _cfg(out, sft_dir, *extra):
    return build_config(None, SMALL + [f"sft.output_dir={sft_dir}", f"output_dir={out}", *ALP, *extra])


def _sigmas(record):
    return {k: v for k, v in record.items() if k.startswith("perturb/sigma/")}


def test_relative_noise_is_logged_and_a_resumed_run_restores_sigma_exactly(tmp_path, sft_dir):
    full = train(_cfg(tmp_path / "full", sft_dir, "steps=2"), show_progress=False)
    first, second = full[0].metrics, full[1].metrics
    rel = {k: v for k, v in first.items() if k.startswith("perturb/rel_noise/layer_")}
    assert rel and all(v == pytest.approx(0.02, rel=0.25) for v in rel.values())  # bf16 rounding of a 2% noise
    assert _sigmas(first) != _sigmas(second)  # σ learns (lr 0.05), so restoring it is not trivially equal

    train(_cfg(tmp_path / "part", sft_dir, "steps=1"), show_progress=False)
    resumed = train(_cfg(tmp_path / "part", sft_dir, "steps=2"), resume=True, show_progress=False)
    assert [r.step for r in resumed] == [2]
    assert _sigmas(resumed[0].metrics) == _sigmas(second)  # bit for bit: σ after step 2 from the restored σ
    records = [json.loads(x) for x in (tmp_path / "part" / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["perturb/rel_noise_mean"] == pytest.approx(second["perturb/rel_noise_mean"])


def test_a_bad_sigma_mode_or_sprpo_with_relative_sigma_is_one_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="perturb.sigma_mode='percent'"):
        build_config(None, [f"output_dir={tmp_path}", "algorithm=token_alp", "perturb.sigma_mode=percent"])
    with pytest.raises(ConfigError, match="sprpo_adaptive=true allocates absolute"):
        build_config(None, [f"output_dir={tmp_path}", "algorithm=sprpo", "perturb.sigma_mode=relative"])
