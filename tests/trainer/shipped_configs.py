"""The shipped configs with stand-ins for the dataset files they name.

A recipe such as configs/tir_qwen2.5_7b.yaml names local data files (env.dataset, env.eval_dataset) that validation
reads before anything starts; a test has none of the real ones, so it loads each recipe with small files written in
the layout the recipe's file has (a .parquet in verl's layout, a .jsonl in MATH500's), large enough for the recipe's
batch and evaluation sizes.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from trainer.config.train_config import CONFIG_DIR

ROWS = 600  # more than any recipe's prompts_per_step and eval_tasks


def shipped_configs() -> list[Path]:
    return sorted(CONFIG_DIR.glob("*.yaml"))


def _write_stand_in(path: Path) -> Path:
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows = [{"data_source": "stand-in", "prompt": [{"role": "user", "content": f"What is {i}+{i}?"}],
                 "reward_model": {"style": "rule", "ground_truth": str(2 * i)}, "extra_info": {"index": i}}
                for i in range(ROWS)]
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        path.write_text("".join(json.dumps({"problem": f"What is {i}+{i}?", "answer": str(2 * i),
                                            "unique_id": f"stand-in/{i}"}) + "\n" for i in range(ROWS)))
    return path


def data_overrides(config: Path, tmp_path: Path) -> list[str]:
    """key=value overrides pointing the config's dataset files at stand-ins in tmp_path ([] if it names none)."""
    env = (yaml.safe_load(config.read_text()) or {}).get("env") or {}
    out = []
    for key in ("dataset", "eval_dataset"):
        if env.get(key):
            stand_in = _write_stand_in(tmp_path / f"{config.stem}.{key}{Path(env[key]).suffix}")
            out.append(f"env.{key}={stand_in}")
    return out
