"""`alprl eval`'s runner: every benchmark's test problems through one engine, stored chunk by chunk, resumable.

A `Benchmark` is a name, the `EvalSettings` it is played with (its env section serves the benchmark's problems:
a dataset file as the test split, or a built-in env's test split) and how many of its problems to play. Each is
evaluated by `evaluation.evaluate.evaluation_chunks`, the function training-time evaluation runs, so a checkpoint is
played with its run's prompt format, stop strings and limits; each chunk's records go to the `RecordStore` as the
engine call finishes, and chunks already stored are skipped (`evaluation.eval_store` says why that resumes
exactly). The engine is shared by all benchmarks (it starts once); each benchmark gets its own envs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from agents.engines.base import Engine
from evaluation.eval_store import ChunkKey, RecordStore
from evaluation.evaluate import EvalSettings, chunk_starts, evaluation_chunks

SPLIT = "test"


@dataclass(frozen=True)
class Benchmark:
    """One benchmark of an evaluation: test problems 0..num_tasks-1 of `settings.env`, `samples_per_task` each."""

    name: str
    settings: EvalSettings
    num_tasks: int
    source: str
    """Where the problems come from (the file, or the built-in env's test split), for reports."""
    ungradable: tuple[dict[str, Any], ...] = ()
    """The played problems whose gold math-verify cannot grade (graded as strings): {"file", "row", "index",
    "reason"} each, for reports (`envs.tir.problems.UngradableRow`)."""

    @property
    def episodes(self) -> int:
        return self.num_tasks * self.settings.samples_per_task

    def chunk_sizes(self) -> dict[int, int]:
        """Chunk start → its number of episodes, as `evaluation_chunks` plays them on `settings.make_envs`."""
        size = max(1, min(self.settings.num_envs, self.episodes))
        return {start: min(size, self.episodes - start) for start in chunk_starts(self.episodes, size)}


def expected_chunks(benchmarks: Sequence[Benchmark]) -> dict[ChunkKey, int]:
    return {(b.name, start): n for b in benchmarks for start, n in b.chunk_sizes().items()}


def stored_episodes(benchmarks: Sequence[Benchmark], store: RecordStore) -> int:
    """Episodes already in the store (complete chunks only; incomplete ones are dropped from it)."""
    return sum(len(rs) for rs in store.keep_complete(expected_chunks(benchmarks)).values())


def run_benchmarks(engine: Engine, tokenizer: Any, benchmarks: Sequence[Benchmark], store: RecordStore, *,
                   pool: ThreadPoolExecutor | None = None,
                   on_chunk: Callable[[str, list[dict[str, Any]]], None] | None = None) -> dict[str, list[dict]]:
    """Play every chunk of every benchmark that the store does not hold yet; returns all records per benchmark.

    on_chunk(benchmark name, records): after each chunk is stored (progress bars).
    """
    names = [b.name for b in benchmarks]
    if len(set(names)) != len(names):
        raise ValueError(f"benchmark names must differ, got {', '.join(names)}")
    done = store.keep_complete(expected_chunks(benchmarks))
    for bench in benchmarks:
        skip = {start for name, start in done if name == bench.name}
        if len(skip) == len(bench.chunk_sizes()):
            continue
        s = bench.settings
        envs = s.make_envs(bench.episodes)
        try:
            for start, records in evaluation_chunks(engine, s.make_agent(tokenizer), envs, SPLIT, bench.num_tasks,
                                                    s.limits, samples_per_task=s.samples_per_task,
                                                    greedy=s.greedy, seed=s.seed, pool=pool, skip=skip):
                store.append(bench.name, start, records)
                if on_chunk is not None:
                    on_chunk(bench.name, records)
        finally:
            for env in envs:
                env.close()
    stored = store.by_benchmark()
    return {name: stored.get(name, []) for name in names}
