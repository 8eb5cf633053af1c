"""`alprl eval`'s output directory: the settings a run started with, its per-sample records, and resume.

    <out>/settings.json   what decides the samples: model files, benchmarks (their files' fingerprints), env
                          sections, limits, sampling, seed, episodes per engine call, engine and dtype
    <out>/records.jsonl   one line per (benchmark, task index, sample), appended one engine call ("chunk") at a
                          time, flushed and fsynced, so a kill loses at most the chunk that was running

A rerun into the same directory continues: it must carry the same settings (else one error naming the keys that
differ; `force=True` starts over), the records of chunks a kill left incomplete (part of a chunk's lines, a cut last
line) are dropped, and the runner replays exactly the chunks that have no records. Chunk boundaries and sampling
seeds follow from the settings alone (`evaluation.evaluate.evaluation_chunks`), so the final records are the ones
one uninterrupted run writes.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

SETTINGS_FILE = "settings.json"
RECORDS_FILE = "records.jsonl"

ChunkKey = tuple[str, int]
"""(benchmark name, chunk start): one engine call's records."""


class SettingsMismatch(ValueError):
    """An output directory holds records made with other settings."""


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out |= _flat(item, f"{prefix}{key}.")
        return out or {prefix[:-1]: {}}
    return {prefix[:-1]: value}


def settings_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """'key: old -> new' for every dotted key whose value differs."""
    a, b = _flat(old), _flat(new)
    return [f"{key}: {a.get(key, '(none)')!r:.60} -> {b.get(key, '(none)')!r:.60}"
            for key in sorted(set(a) | set(b)) if a.get(key) != b.get(key)]


class RecordStore:
    """The records of one output directory (see the module docstring). `settings` must be JSON-serializable."""

    def __init__(self, out_dir: str | Path, settings: Mapping[str, Any], *, force: bool = False):
        self.dir = Path(out_dir)
        self.settings = json.loads(json.dumps(settings))  # the form it is read back in (tuples become lists)
        self.path = self.dir / RECORDS_FILE
        self.dir.mkdir(parents=True, exist_ok=True)
        settings_path = self.dir / SETTINGS_FILE
        if settings_path.is_file() and not force:
            diff = settings_diff(json.loads(settings_path.read_text()), self.settings)
            if diff:
                shown = "; ".join(diff[:4]) + (f"; and {len(diff) - 4} more" if len(diff) > 4 else "")
                raise SettingsMismatch(f"{self.dir} holds an evaluation with other settings ({shown}); pass --force "
                                       "to start it over, or another --out")
        elif force or not settings_path.is_file():
            self.path.unlink(missing_ok=True)
        tmp = settings_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.settings, indent=2))
        tmp.replace(settings_path)

    def _read(self) -> tuple[list[dict[str, Any]], bool]:
        """The complete lines of the records file, and whether a cut (unparsable) line was left out."""
        if not self.path.is_file():
            return [], False
        records, cut = [], False
        for line in self.path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:  # only a kill during a write leaves one
                cut = True
        return records, cut

    def keep_complete(self, expected: Mapping[ChunkKey, int]) -> dict[ChunkKey, list[dict[str, Any]]]:
        """The stored chunks that hold all `expected[key]` records; every other line is removed from the file."""
        records, cut = self._read()
        chunks: dict[ChunkKey, list[dict[str, Any]]] = defaultdict(list)
        for r in records:
            chunks[(r["bench"], int(r["chunk"]))].append(r)
        kept = {key: rs for key, rs in chunks.items() if len(rs) == expected.get(key)}
        if cut or len(kept) != len(chunks):
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text("".join(json.dumps(r) + "\n" for rs in kept.values() for r in rs))
            tmp.replace(self.path)
        return kept

    def append(self, bench: str, chunk: int, records: Sequence[Mapping[str, Any]]) -> None:
        """Store one chunk's records (one write, flushed to disk before returning)."""
        text = "".join(json.dumps({"bench": bench, "chunk": chunk, **r}) + "\n" for r in records)
        with open(self.path, "a") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())

    def by_benchmark(self) -> dict[str, list[dict[str, Any]]]:
        """Every stored record, per benchmark, in (task index, sample) order."""
        out: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in self._read()[0]:
            out[r["bench"]].append(r)
        return {name: sorted(rs, key=lambda r: (r["index"], r["sample"])) for name, rs in out.items()}
