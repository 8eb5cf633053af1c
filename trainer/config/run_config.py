"""The run config a model directory was made with, written beside it.

Every checkpoint (and the SFT warm start) holds `alprl_config.yaml`: the resolved `TrainConfig`, every key with
its value, so it depends neither on the YAML file and overrides the run started from nor on later changes of a
default. trainer/setup/saved_config.py reads it back for evaluation.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from trainer.config.train_config import TrainConfig, to_dict

RUN_CONFIG_FILE = "alprl_config.yaml"


def write_run_config(directory: str | Path, cfg: TrainConfig) -> Path:
    """Write `cfg` (resolved) as `<directory>/alprl_config.yaml`; returns the path."""
    path = Path(directory) / RUN_CONFIG_FILE
    path.write_text("# the resolved alprl config this model was trained with (read by alprl eval / robustness)\n"
                    + yaml.safe_dump(to_dict(cfg), sort_keys=False))
    return path
