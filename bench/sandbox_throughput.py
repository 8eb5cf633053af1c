"""Sandbox throughput: alprl's /run_code next to a peer /run_code service and a naive `python -c`, same rounds.

    python bench/sandbox_throughput.py [--peer URL] [--requests 2000] [--latency-requests 500] [--concurrency 8]
                                       [--naive 80] [--rounds 4] [--workers N] [--programs print,numpy]
                                       [--container IMAGE | --no-container] [--no-pool]

Starts a real alprl server (`sandbox.deploy.local_server`, its default isolation: every layer the machine allows) and
measures on loopback, for each program (`print(6 * 7)`, and a small numpy program):
  1. latency: sequential POST /run_code on one keep-alive connection → p50 / p99 (ms);
  2. throughput: `--concurrency` keep-alive connections driven by one asyncio thread → executions/s, and the
     client's own CPU per request;
  3. peer (`--peer URL`): the same two measures against any service that speaks SandboxFusion's API
     (POST {"code", "language": "python"} → {"status", "run_result": {"stdout", ...}}), e.g. a real
     SandboxFusion server (docs/sandbox.md, "Performance", says how one was set up) or another alprl server;
  4. naive: `subprocess.run([python, "-c", code])`, sequentially and with the same concurrency, where `python`
     is a plain interpreter (see below);
  5. container: where a Docker engine answers and the image exists (`make sandbox-image`), the same service in
     the compose file's hardened container (its flags read from docker-compose.yml: uid slots, six
     capabilities, read-only root, limits), on a published port;
  6. pool: the same runs through an in-process `sandbox.execution.pool.Pool` (what `make_runner(None)` uses), no HTTP.
During the throughput phases the bench also sums the CPU time of alprl's server process tree (the server, its
zygotes, the runs they reaped; /proc) and, with `--peer-pid PID`, of a local peer's, and prints the server-side
CPU per execution: on a machine shared with other work that figure moves much less than wall-clock rates do.
Every side is measured once warm (alprl: `warming` in /v1/info is 0; each HTTP side gets a sequential warm-up).
All phases alternate within each of `--rounds` rounds (alprl, then the peer, then the rest, in that order every
round) and are summed, so load from other processes on a shared machine hits every side alike; the printed
ratios (alprl/peer, alprl/naive) come from those same rounds. Targets (docs/sandbox.md): alprl ≥ 8× a real
SandboxFusion server on throughput, with alprl's full isolation; p50 ≤ 5 ms.

The naive interpreter. The project venv's `python` is a poor baseline: its editable-install finder (a .pth that
site imports at every start) roughly doubles a bare start (~36 ms against ~17 ms here), which flatters every
"× naive" figure. So the baseline is a plain interpreter of the same version, and the bench measures two
candidates at start-up, alternating, and takes the faster that runs the program correctly:
  - `python -I -S`: the base interpreter isolated and without `site` (only the stdlib: cannot import numpy);
  - a plain venv without editable installs (made in a temporary directory; a one-line .pth appends the
    directory numpy lives in, so the numpy program imports the same numpy as everyone else).
It prints each candidate's median start time (and the project venv's, for comparison) and which one it used.
The load generator shares the machine with the servers it measures, so it is made to cost little CPU: latency
uses the standard library's http.client on one connection; throughput a minimal asyncio HTTP/1.1 client (about
half the CPU per request of one http.client thread per connection); its CPU per request is printed per side.

Where a run's CPU goes (2026-12-02, T2 server, 2 workers, print(6 * 7) at concurrency 8, idle machine; /proc CPU
times per execution): client 0.30 ms, server process 1.10 ms, zygotes 1.21 ms (0.95 of it kernel: fork and the
copy-on-write faults of its own pages while a child lives), the forked runs 2.08 ms. This machine is a
Firecracker VM where one copy-on-write fault costs ~4 us: a run takes ~250 of them (~115 before its first line:
fork's return path and `random`'s at-fork reseed, ~45), so touched pages, not our Python, set the price.
Floors measured alongside: fork + trivial exec + exit of an interpreter with the light preloads, nothing else,
~700/s per core (~1,030/s with no preloads: fork and exit cost scales with the parent's anonymous pages); the
in-process pool without HTTP (printed by this script) ~19x the old (project-venv) naive; uvicorn + FastAPI with a
backend that answers at once, 2,260 req/s, of which the hand-off to the run thread costs ~0.36 ms a request
(3,770 req/s without it). Since then (2026-12-05, docs/sandbox.md): runs driven on the server's event loop, a
6.75 MB zygote started without `site`, fewer pages touched between forks; per execution the server process
0.60 ms, the zygote 0.62-0.68, the run 1.17-1.35: 8.2-8.6x SandboxFusion on print(6 * 7).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling sandbox_baselines, also when loaded by path
from sandbox_baselines import (  # noqa: E402  (bench/ is on sys.path: the script's own folder)
    PROGRAMS,
    RUN_TIMEOUT_S,
    Program,
    choose_naive,
    cpu_delta,
    cpu_snapshot,
    make_plain_venv,
    naive_throughput,
)

from sandbox.deploy.compose_flags import docker_run_flags, service_config  # noqa: E402
from sandbox.deploy.local_server import start_server  # noqa: E402

# kept for callers of the old module-level names
CODE = PROGRAMS["print"].code
BODY = PROGRAMS["print"].body


# ---------------------------------------------------------------------------------------------- HTTP sides

@dataclass
class HttpSide:
    """One /run_code service: host, port, optional path prefix and Basic auth taken from its URL."""

    label: str
    host: str
    port: int
    prefix: str = ""
    headers: dict = field(default_factory=lambda: {"Content-Type": "application/json"})
    failures: list = field(default_factory=list)  # bad answers: counted in the rates, printed, exit status 1

    @classmethod
    def from_url(cls, label: str, url: str) -> HttpSide:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme != "http":
            raise SystemExit(f"--peer: only http:// URLs are measured (got {url!r})")
        side = cls(label, parts.hostname or "127.0.0.1", parts.port or 80, parts.path.rstrip("/"))
        if parts.path.rstrip("/").endswith("/run_code"):  # verl-style endpoint given whole
            side.prefix = parts.path.rstrip("/")[: -len("/run_code")]
        if parts.username is not None:
            token = base64.b64encode(f"{parts.username}:{parts.password or ''}".encode()).decode()
            side.headers["Authorization"] = f"Basic {token}"
        return side

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}{self.prefix}"

    def connect(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=60)

    def run(self, conn: http.client.HTTPConnection, prog: Program) -> None:
        conn.request("POST", f"{self.prefix}/run_code", body=prog.body, headers=self.headers)
        resp = conn.getresponse()
        self.check(prog, resp.status, resp.read())

    def check(self, prog: Program, status: int, raw: bytes) -> None:
        try:
            data = json.loads(raw)
        except ValueError:
            raise RuntimeError(f"{self.label}: not JSON ({status}): {raw[:300]!r}") from None
        stdout = (data.get("run_result") or {}).get("stdout") if isinstance(data, dict) else None
        if status != 200 or stdout != prog.expected:
            self.failures.append(f"{prog.name}: HTTP {status} {str(data)[:300]}")

    def latency_ms(self, prog: Program, n: int) -> list[float]:
        conn, samples = self.connect(), []
        for _ in range(n):
            start = time.perf_counter()
            self.run(conn, prog)
            samples.append((time.perf_counter() - start) * 1e3)
        conn.close()
        return samples

    def throughput(self, prog: Program, n: int, concurrency: int) -> tuple[float, float]:
        """(executions/s, the client's own CPU seconds) over `concurrency` keep-alive connections.

        One asyncio thread drives them with a minimal HTTP/1.1 client: on a small machine the load generator
        takes CPU from the server it measures, and this one takes about half what `concurrency` http.client
        threads did (0.15 against 0.28 ms a request here), the same for every side."""
        cpu, start = sum(os.times()[:2]), time.perf_counter()
        asyncio.run(self._drive(prog, _split(n, concurrency)))
        return n / (time.perf_counter() - start), sum(os.times()[:2]) - cpu

    async def _drive(self, prog: Program, counts: list[int]) -> None:
        head = "".join(f"{k}: {v}\r\n" for k, v in self.headers.items())
        request = (f"POST {self.prefix}/run_code HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n{head}"
                   f"Content-Length: {len(prog.body)}\r\n\r\n").encode() + prog.body

        async def connection(count: int) -> None:
            reader, writer = await asyncio.open_connection(self.host, self.port)
            try:
                for _ in range(count):
                    writer.write(request)
                    self.check(prog, *await _read_response(reader))
            finally:
                writer.close()

        await asyncio.gather(*(connection(c) for c in counts if c))

    def info(self) -> dict | None:
        """GET /v1/info as JSON (alprl answers it; a SandboxFusion server does not)."""
        try:
            body = _get(self.host, self.port, f"{self.prefix}/v1/info", self.headers)
            data = json.loads(body)
            return data if isinstance(data, dict) and "tier" in data else None
        except (OSError, ValueError, http.client.HTTPException):
            return None


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """(status, body) of one HTTP/1.1 response: a Content-Length body, or a chunked one."""
    lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    status = int(lines[0].split()[1])
    if "chunked" in fields.get("transfer-encoding", ""):
        body = bytearray()
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            body += (await reader.readexactly(size + 2))[:-2]
        await reader.readuntil(b"\r\n")  # the empty trailer
        return status, bytes(body)
    return status, await reader.readexactly(int(fields.get("content-length", 0)))


def _split(n: int, k: int) -> list[int]:
    return [n // k + (i < n % k) for i in range(k)]


def start_container(image: str, workers: int) -> tuple[str, int] | None:
    """The service in a hardened container (docker-compose.yml's sandbox flags) on a free port; None without it."""
    import shutil
    import socket

    if shutil.which("docker") is None or subprocess.run(["docker", "image", "inspect", image],
                                                        capture_output=True).returncode != 0:
        return None
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # the compose file's own hardening and limits (one writer); only the port and the sizes differ
    flags = docker_run_flags("sandbox", environment={"SANDBOX_WORKERS": str(workers or os.cpu_count()),
                                                     "SANDBOX_MAX_QUEUE": "4096", "SANDBOX_API_KEY": ""})
    command = service_config("sandbox")["command"]
    out = subprocess.run(["docker", "run", "-d", "--rm", *flags, "-p", f"127.0.0.1:{port}:8080", image, *command],
                         capture_output=True, text=True)
    if out.returncode != 0:
        print(f"container: not measured ({out.stderr.strip()[:200]})")
        return None
    container = out.stdout.strip()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            _get("127.0.0.1", port, "/v1/ping")
            return container, port
        except OSError:
            time.sleep(0.3)
    subprocess.run(["docker", "rm", "-f", container], capture_output=True)
    return None


# ---------------------------------------------------------------------------------------------- in-process pool

def pool_throughput(pool, prog: Program, n: int, concurrency: int) -> float:
    """The same runs through `sandbox.execution.pool.Pool` in this process: the server's work without HTTP."""
    from sandbox.execution.pool import RunRequest

    req = RunRequest(prog.code, timeout_s=5)

    def worker(count: int) -> None:
        for _ in range(count):
            if pool.run(req).stdout != prog.expected:
                raise RuntimeError(f"bad answer from the pool to {prog.name}")

    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool_threads:
        list(pool_threads.map(worker, _split(n, concurrency)))
    return n / (time.perf_counter() - start)


def start_pool(workers: int):
    """An in-process pool set up as the server's (its own slot uids), measured once its heavy zygotes are up."""
    from sandbox.execution.pool import Pool
    from sandbox.settings import Settings

    pool = Pool(Settings.from_env(workers=workers or os.cpu_count(), max_sessions=0,
                                  uid_base=20000 + (os.getpid() % 400) * 100), allow_unsafe=True)
    deadline = time.monotonic() + 120
    while pool.info()["warming"] and time.monotonic() < deadline:
        time.sleep(0.2)
    return pool


def pct(sorted_ms: list[float], q: float) -> float:
    return sorted_ms[min(len(sorted_ms) - 1, int(q * len(sorted_ms)))]


class Totals:
    """Executions and seconds per (program, side), summed over rounds; latency samples pooled likewise."""

    def __init__(self):
        self.rate: dict[tuple[str, str], list[float]] = {}
        self.lat: dict[tuple[str, str], list[float]] = {}
        self.cpu: dict[tuple[str, str], list[float]] = {}  # executions, server s, descendants s, reaped s
        self.client: dict[tuple[str, str], list[float]] = {}  # executions, the load generator's CPU s

    def add_cpu(self, prog: str, side: str, n: int, parts: tuple[float, float, float]) -> None:
        acc = self.cpu.setdefault((prog, side), [0, 0.0, 0.0, 0.0])
        acc[0] += n
        for i, v in enumerate(parts, 1):
            acc[i] += v

    def add_client(self, prog: str, side: str, n: int, seconds: float) -> None:
        acc = self.client.setdefault((prog, side), [0, 0.0])
        acc[0] += n
        acc[1] += seconds

    def add(self, prog: str, side: str, n: int, rate: float) -> None:
        acc = self.rate.setdefault((prog, side), [0, 0.0])
        acc[0] += n
        acc[1] += n / rate

    def add_lat(self, prog: str, side: str, samples: list[float]) -> None:
        self.lat.setdefault((prog, side), []).extend(samples)

    def get(self, prog: str, side: str) -> float | None:
        acc = self.rate.get((prog, side))
        return acc[0] / acc[1] if acc else None

    def p(self, prog: str, side: str) -> tuple[float, float, int]:
        s = sorted(self.lat[(prog, side)])
        return pct(s, 0.50), pct(s, 0.99), len(s)


def describe(info: dict | None) -> str:
    if info is None:
        return "isolation not reported (no alprl /v1/info)"
    return f"{info.get('workers')} workers, isolation {info.get('tier')} {info.get('layers')}"


def main(argv: list[str] | None = None) -> int:
    global RUN_TIMEOUT_S
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peer", help="base URL of another /run_code service (SandboxFusion's API), measured in the "
                                   "same rounds: http://host:port (user:key@ for Basic auth)")
    ap.add_argument("--peer-pid", type=int, help="pid of the peer's server process on this machine: its CPU (and its "
                                                 "children's) per execution is printed next to alprl's")
    ap.add_argument("--programs", default="print,numpy", help=f"comma list of {', '.join(PROGRAMS)}")
    ap.add_argument("--requests", type=int, default=2000, help="HTTP executions per side and program (throughput)")
    ap.add_argument("--latency-requests", type=int, default=500, help="sequential executions for p50/p99 per "
                                                                      "side and program")
    ap.add_argument("--concurrency", type=int, default=8, help="client threads (throughput phases)")
    ap.add_argument("--naive", type=int, default=80, help="naive subprocess executions per naive phase and program")
    ap.add_argument("--workers", type=int, default=0, help="server workers (0 = CPUs)")
    ap.add_argument("--rounds", type=int, default=4, help="alternating rounds")
    ap.add_argument("--run-timeout", type=float, default=RUN_TIMEOUT_S, help="run_timeout sent with every request (s)")
    ap.add_argument("--warmup", type=int, default=50, help="sequential warm-up executions per HTTP side and program")
    ap.add_argument("--container", default="alprl/sandbox:latest", help="image for the container figure")
    ap.add_argument("--no-container", action="store_true", help="skip the container figure")
    ap.add_argument("--no-pool", action="store_true", help="skip the in-process pool figure (no HTTP)")
    args = ap.parse_args(argv)
    try:
        programs = [PROGRAMS[p.strip()] for p in args.programs.split(",") if p.strip()]
    except KeyError as e:
        ap.error(f"--programs: unknown {e}; known: {', '.join(PROGRAMS)}")
    prog_keys = {p.name: k for k, p in PROGRAMS.items()}
    RUN_TIMEOUT_S = args.run_timeout

    tmp = tempfile.TemporaryDirectory(prefix="alprl-bench-venv-")
    naive_cmds, naive_lines = choose_naive(programs, make_plain_venv(tmp.name))
    peer = HttpSide.from_url("peer", args.peer) if args.peer else None
    totals = Totals()

    started = None if args.no_container else start_container(args.container, args.workers)
    container = HttpSide("container", "127.0.0.1", started[1]) if started else None
    pool = None if args.no_pool else start_pool(args.workers)
    rounds = max(1, args.rounds)
    n, m = max(1, args.requests // rounds), max(1, args.naive // rounds)
    nl = max(1, args.latency_requests // rounds)
    try:
        with start_server(workers=args.workers, max_queue=4 * args.concurrency + 64, max_sessions=0) as server:
            alprl = HttpSide.from_url("alprl", server.url)
            info = wait_until_warm(alprl.host, alprl.port)
            c_info = wait_until_warm("127.0.0.1", container.port) if container else None
            http_sides = [s for s in (alprl, peer, container) if s is not None]
            peer_info = peer.info() if peer else None
            cpu_roots = {"alprl": server.proc.pid}
            if peer is not None and args.peer_pid:
                cpu_roots["peer"] = args.peer_pid
            for prog in programs:  # warm-up: connections, zygote pages, allocator, the peer's own caches
                for side in http_sides:
                    side.latency_ms(prog, args.warmup)
            for _ in range(rounds):
                for prog in programs:
                    for side in http_sides:
                        totals.add_lat(prog.name, side.label, side.latency_ms(prog, nl))
                    for side in http_sides:
                        root = cpu_roots.get(side.label)
                        before = cpu_snapshot(root) if root else None
                        rate, client_s = side.throughput(prog, n, args.concurrency)
                        totals.add(prog.name, side.label, n, rate)
                        totals.add_client(prog.name, side.label, n, client_s)
                        if root:
                            totals.add_cpu(prog.name, side.label, n, cpu_delta(root, before, cpu_snapshot(root)))
                    cmd = naive_cmds[prog.name]
                    totals.add(prog.name, "naive_seq", m, naive_throughput(cmd, prog, m, 1))
                    totals.add(prog.name, "naive_par", m, naive_throughput(cmd, prog, m, args.concurrency))
                    if pool is not None:
                        totals.add(prog.name, "pool", n, pool_throughput(pool, prog, n, args.concurrency))
    finally:
        if pool is not None:
            pool.close()
        if started is not None:
            subprocess.run(["docker", "rm", "-f", started[0]], capture_output=True)
        tmp.cleanup()

    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the end; "
          f"{rounds} alternating rounds, concurrency {args.concurrency}")
    print(f"alprl: {describe(info)}")
    if peer is not None:
        print(f"peer: {peer.url}, {describe(peer_info)}")
    for line in naive_lines:
        print(line)
    for prog in programs:
        name = prog.name
        naive_seq, naive_par = totals.get(name, "naive_seq"), totals.get(name, "naive_par")
        print(f"\n== {name} (--programs {prog_keys[name]}) ==")
        rates = {}
        for side in http_sides:
            rates[side.label] = totals.get(name, side.label)
            p50, p99, cnt = totals.p(name, side.label)
            runs, client_s = totals.client[(name, side.label)]
            print(f"{side.label:>9}: {rates[side.label]:8.1f} exec/s (n={n * rounds})   "
                  f"p50 {p50:7.2f} ms   p99 {p99:7.2f} ms (sequential, n={cnt})   "
                  f"client CPU {client_s / runs * 1e3:.2f} ms/request")
        print(f"{'naive':>9}: {naive_seq:8.1f} exec/s sequential, {naive_par:8.1f} exec/s at concurrency "
              f"{args.concurrency} (n={m * rounds} each)")
        a = rates["alprl"]
        for label in ("alprl", "peer"):
            acc = totals.cpu.get((name, label))
            if acc:
                k = acc[0] / 1e3
                print(f"{label:>9}: server-side CPU per execution {sum(acc[1:]) / k:6.2f} ms (server process "
                      f"{acc[1] / k:.2f}, its live children {acc[2] / k:.2f}, reaped processes {acc[3] / k:.2f})")
        if ("peer" in cpu_roots) and (name, "peer") in totals.cpu:
            cpu_a, cpu_p = totals.cpu[(name, "alprl")], totals.cpu[(name, "peer")]
            if sum(cpu_a[1:]) > 0:
                print(f"ratio CPU per execution peer/alprl ({name}): "
                      f"{(sum(cpu_p[1:]) / cpu_p[0]) / (sum(cpu_a[1:]) / cpu_a[0]):5.2f}x")
            else:  # a few fast executions can use less than one of /proc's clock ticks (10 ms) in all
                print(f"ratio CPU per execution peer/alprl ({name}): n/a (alprl's CPU below /proc's resolution; "
                      "raise --requests)")
        if peer is not None:
            ap50, ap99, _ = totals.p(name, "alprl")
            pp50, pp99, _ = totals.p(name, "peer")
            print(f"ratio alprl/peer ({name}): {a / rates['peer']:5.2f}x throughput   (target >= 8x against "
                  f"SandboxFusion)")
            print(f"latency peer/alprl ({name}): p50 {pp50 / ap50:5.2f}x   p99 {pp99 / ap99:5.2f}x")
        print(f"ratio alprl/naive ({name}): {a / naive_seq:5.2f}x sequential naive, {a / naive_par:5.2f}x naive at the "
              f"same concurrency")
        print(f"p50 target <= 5 ms ({name}): {'met' if totals.p(name, 'alprl')[0] <= 5 else 'NOT met'}")
        if pool is not None:
            pool_rate = totals.get(name, "pool")
            print(f"in-process pool without HTTP (sandbox.execution.pool.Pool, same workers): {pool_rate:.1f} exec/s = "
                  f"{pool_rate / naive_seq:.1f}x naive sequential (the ceiling of the HTTP figure)")
        if container is not None:
            c_rate = rates["container"]
            print(f"container ({args.container}, {describe(c_info)}): {c_rate:.1f} exec/s = "
                  f"{c_rate / naive_seq:.1f}x naive sequential, {c_rate / a:.2f}x the in-process server")
    if container is None and not args.no_container:
        print("\ncontainer: not measured (no Docker engine or no image; `make sandbox-image` builds it)")
    failed = [(side.label, side.failures) for side in http_sides if side.failures]
    for label, failures in failed:
        print(f"\n{label}: {len(failures)} bad answers (counted in its rate), first: {failures[0]}")
    return 1 if failed else 0


def wait_until_warm(host: str, port: int, timeout_s: float = 120.0) -> dict:
    """Steady state only: the heavy zygotes (numpy, sympy) import in the background after start and would
    otherwise take CPU from the first measured phases."""
    deadline = time.monotonic() + timeout_s
    while True:
        info = json.loads(_get(host, port, "/v1/info"))
        if not info.get("warming") or time.monotonic() > deadline:
            return info
        time.sleep(0.2)


def _get(host: str, port: int, path: str, headers: dict | None = None) -> bytes:
    conn = http.client.HTTPConnection(host, port, timeout=30)
    conn.request("GET", path, headers=headers or {})
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    if resp.status != 200:
        raise OSError(f"GET {path}: {resp.status}")
    return body


if __name__ == "__main__":
    sys.exit(main())
