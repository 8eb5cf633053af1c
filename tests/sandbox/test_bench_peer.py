"""bench/sandbox_throughput.py with tiny counts and `--peer` aimed at a second alprl server.

Checks the report's shape only (which naive interpreter it used, a peer ratio line per program); no figure is
asserted, since timings on a shared machine say nothing about correctness.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
from conftest import fresh_uid_base

from sandbox.deploy.local_server import ServerStartError, start_server

BENCH = Path(__file__).resolve().parents[2] / "bench" / "sandbox_throughput.py"


def _load_bench():
    spec = importlib.util.spec_from_file_location("sandbox_throughput_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_bench_measures_a_peer_in_the_same_rounds(capsys):
    bench = _load_bench()
    try:
        with start_server(workers=1, max_sessions=0, uid_base=fresh_uid_base()) as peer:
            # 16 requests a round: fewer can use less than one /proc clock tick (10 ms) of alprl CPU in all
            rc = bench.main(["--peer", peer.url, "--peer-pid", str(peer.proc.pid), "--requests", "16",
                             "--latency-requests", "2", "--naive", "2",
                             "--rounds", "2", "--warmup", "1", "--concurrency", "2", "--workers", "1",
                             "--no-pool", "--no-container"])
    except ServerStartError as exc:
        if "ALPRL_SANDBOX_ALLOW_UNSAFE" in str(exc):
            pytest.skip("no uid switch or namespaces on this machine: the bench's server needs root or userns")
        raise
    out = capsys.readouterr().out
    assert rc == 0, out
    assert f"peer: {peer.url}, 1 workers, isolation " in out
    for name in ("print(6 * 7)", "numpy"):
        assert re.search(rf"^ratio alprl/peer \({re.escape(name)}\): +\d+\.\d+x throughput", out, re.M), out
        assert re.search(rf"^ratio alprl/naive \({re.escape(name)}\): +\d+\.\d+x sequential naive", out, re.M), out
        assert re.search(rf"^latency peer/alprl \({re.escape(name)}\): p50 +\d+\.\d+x", out, re.M), out
        assert re.search(r"^ +peer: +\d+\.\d+ exec/s.* client CPU \d+\.\d+ ms/request$", out, re.M), out
        assert re.search(rf"^ratio CPU per execution peer/alprl \({re.escape(name)}\): +\d+\.\d+x", out, re.M), out
    # the baseline is a plain interpreter, never the project venv with its editable-install finder
    assert "naive baseline for print(6 * 7): " in out and "naive baseline for numpy: " in out
    assert "project venv (not used" in out
