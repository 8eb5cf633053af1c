"""How the TIR env runs a turn's code through a `sandbox.types.CodeRunner` (reference/environments.md §1).

Execution modes:
- `stateless` (default): each block runs alone in a fresh process; nothing persists between turns.
- `replay`: the program re-runs every earlier *successful* block of the episode with stdout/stderr suppressed,
  then prints a marker line and runs the new block, so variables persist at O(turns^2) cost. `random` (and
  `numpy`, when a block mentions it) is seeded first, so a replayed block sees the same random numbers as
  its first run. If the marker is missing from stdout (a replayed block failed, timed out or flooded the
  output) the new block is re-run stateless and the caller flags `replay_failed`.
- `session` (persistent interpreter through the sandbox's session API) is not offered: the `CodeRunner`
  protocol does not declare `session()` (`LocalExecutor` and `SandboxClient` have it, other runners need not), so
  the env would have to probe its runner for it.

Every block is run with `exec(compile(src, "<string>", "exec"))`, as `python -c` would, so error lines
(the last stderr line) read the same in both modes.
"""

from __future__ import annotations

from dataclasses import replace

from sandbox.client import SandboxAuthError
from sandbox.types import CodeRunner, ExecutionResult

EXEC_MODES = ("stateless", "replay")
REPLAY_MARKER = "__alprl_replay_done__"


def run_safely(runner: CodeRunner, code: str, *, timeout_s: float, memory_limit_mb: int) -> ExecutionResult:
    """`runner.run`, with any exception of the runner itself turned into a SandboxError result, but for a refused
    API key: that is the run's configuration, not one tool call's failure, so it ends the rollout (and the CLI
    prints it in one line)."""
    try:
        return runner.run(code, timeout_s=timeout_s, memory_limit_mb=memory_limit_mb)
    except SandboxAuthError:
        raise
    except Exception as exc:  # the env must never raise because the sandbox (client) failed
        return ExecutionResult("SandboxError", stderr=f"{type(exc).__name__}: {exc}")


def replay_program(previous: list[str], new: str, seed: int) -> str:
    """A program that silently re-runs `previous` blocks, prints the marker, then runs `new`."""
    uses_numpy = any("numpy" in block for block in [*previous, new])
    lines = ["import io as _alprl_io, random as _alprl_random, sys as _alprl_sys",
             f"_alprl_random.seed({seed})"]
    if uses_numpy:
        lines += ["try:", "    import numpy as _alprl_np", f"    _alprl_np.random.seed({seed})",
                  "except ImportError:", "    pass"]
    lines += ["_alprl_out, _alprl_err = _alprl_sys.stdout, _alprl_sys.stderr",
              "_alprl_sys.stdout, _alprl_sys.stderr = _alprl_io.StringIO(), _alprl_io.StringIO()"]
    lines += [f"exec(compile({block!r}, '<string>', 'exec'))" for block in previous]
    lines += ["_alprl_sys.stdout, _alprl_sys.stderr = _alprl_out, _alprl_err",
              f"print({REPLAY_MARKER!r}, flush=True)",
              f"exec(compile({new!r}, '<string>', 'exec'))"]
    return "\n".join(lines) + "\n"


def run_block(runner: CodeRunner, block: str, previous: list[str], *, mode: str, seed: int, timeout_s: float,
              memory_limit_mb: int) -> tuple[ExecutionResult, bool]:
    """Run one prepared block; returns (result as if the block ran alone, replay_failed)."""
    if mode == "stateless":
        return run_safely(runner, block, timeout_s=timeout_s, memory_limit_mb=memory_limit_mb), False
    program = replay_program(previous, block, seed)
    result = run_safely(runner, program, timeout_s=timeout_s, memory_limit_mb=memory_limit_mb)
    if result.status == "SandboxError":
        return result, False
    _, marker, after = result.stdout.partition(REPLAY_MARKER + "\n")
    if marker:
        return replace(result, stdout=after), False
    return run_safely(runner, block, timeout_s=timeout_s, memory_limit_mb=memory_limit_mb), True
