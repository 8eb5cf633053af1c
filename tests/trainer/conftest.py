"""The tiny TIR warm start shared by the trainer tests (one SFT per test session)."""

from __future__ import annotations

import pytest
from tiny_tir import SMALL

from trainer.setup.build import build_config
from trainer.sft.train import run_sft


@pytest.fixture(scope="session")
def sft_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("sft")
    return run_sft(build_config(None, SMALL + [f"sft.output_dir={out}"]), show_progress=False)
