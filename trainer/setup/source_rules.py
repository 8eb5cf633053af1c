"""The config rules of where a step's trajectories come from (`rollout.source`, `rollout.harness_concurrency`,
`env.harness`), kept beside trainer/setup/validation.py, which calls `source_rules` with its other rules.

With `rollout.source=harness` the harness is imported here, so a misspelled module or a function that is not async
fails before the run starts, in the config's one error line; so does a missing server (fastapi and uvicorn, the
`sandbox` extra).
"""

from __future__ import annotations

import importlib.util
from typing import Any

from agents.endpoint.harness import load_harness
from trainer.config.rollout_config import ROLLOUT_SOURCES


def source_rules(cfg: Any) -> list[str]:
    """Violations of the rollout-source keys of `cfg` (a `TrainConfig`), each naming the key."""
    r, e = cfg.rollout, cfg.env
    out = []
    if r.source not in ROLLOUT_SOURCES:
        out.append(f"rollout.source={r.source!r}; valid: {', '.join(ROLLOUT_SOURCES)}")
    if r.harness_concurrency < 0:
        out.append(f"rollout.harness_concurrency={r.harness_concurrency}; valid: >= 0 (0: every episode at once)")
    if e.harness and ":" not in e.harness:
        out.append(f"env.harness={e.harness!r}: expected module:function, e.g. agents.harnesses.tir_harness:play")
    if r.source != "harness":
        return out
    if not e.harness:
        out.append("rollout.source=harness needs env.harness=module:function, the async function that plays an "
                   "episode (e.g. agents.harnesses.tir_harness:play)")
    elif ":" in e.harness:
        try:
            load_harness(e.harness)
        except ValueError as err:
            out.append(str(err))
    missing = [m for m in ("fastapi", "uvicorn") if importlib.util.find_spec(m) is None]
    if missing:
        out.append(f"rollout.source=harness serves the policy endpoint with {' and '.join(missing)}, which do not "
                   "import: pip install -e '.[sandbox]'")
    return out
