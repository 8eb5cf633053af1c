"""One experiment's kept cells in one file, `DIR/cells.tar.xz` (what `alprl experiment --results DIR` writes).

A suite's cells are many small text files (metrics logs of a few MB, held-out records, ratio-scatter `.npz`)
whose keys and numbers repeat from cell to cell, so one solid xz stream over all of them is ~10x smaller than the
files and holds one file instead of hundreds (docs/experiments.md "Results folders" gives the sizes). The archive
stores each kept file byte for byte as `<cell>/<path in the cell>`; a report rebuilt from it is the report built
from the folders.

The archive is rewritten whole when a cell is added or replaced (an xz stream cannot be appended to): at a suite's
few tens of MB that takes seconds to a minute, once per finished cell. It is written deterministically (members in
name order, no times, owners or modes of the machine that wrote it), so the same cells give the same bytes and a
commit that adds no cell leaves it unchanged, and atomically (a temporary file renamed over the old one), so a
killed writer leaves the old archive whole.

Measured on two committed suites (`alp`, `long_lag4`) when the format was chosen: one archive per cell came out 42%
and 2.5% larger than one per suite, a zip with each file compressed alone (LZMA) 47% and 8%; presets 9 and 9e were at
most 2.1% smaller than preset 6 (xz's default: 94 MiB of memory to write, 9 MiB to read), and members grouped by file
kind instead of by cell at most 2.4%.
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Mapping
from pathlib import Path

ARCHIVE = "cells.tar.xz"
PRESET = 6

Cells = dict[str, dict[str, bytes]]
"""Cell name → {path inside the cell (posix) → the file's bytes}."""


def read_archive(path: Path) -> Cells:
    """Every member of the archive at `path`, grouped by cell ({} when there is no archive)."""
    cells: Cells = {}
    if not path.is_file():
        return cells
    with tarfile.open(path, "r:xz") as tar:
        for member in tar:
            if not member.isfile():
                continue
            cell, _, inner = member.name.partition("/")
            if not inner or ".." in Path(inner).parts:
                raise ValueError(f"{path}: member {member.name!r} is not <cell>/<file>")
            cells.setdefault(cell, {})[inner] = tar.extractfile(member).read()
    return cells


def write_archive(path: Path, cells: Mapping[str, Mapping[str, bytes]]) -> None:
    """Write `cells` as the archive at `path`, replacing it atomically; deterministic bytes for the same cells."""
    tmp = path.with_name(path.name + ".tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tmp, "w:xz", preset=PRESET, format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(f"{cell}/{inner}" for cell, files in cells.items() for inner in files):
            cell, _, inner = name.partition("/")
            data = cells[cell][inner]
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644  # nothing of the machine that wrote it
            tar.addfile(info, io.BytesIO(data))
    os.replace(tmp, path)


def folder_files(folder: Path) -> dict[str, bytes]:
    """Every file under `folder`, by its posix path inside it."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def write_folder(folder: Path, files: Mapping[str, bytes], last: str) -> None:
    """Write `files` under `folder`, the one named `last` after the others (a cell's `cell.json` marks it whole)."""
    for inner in sorted(files, key=lambda name: name == last):
        target = folder / inner
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(files[inner])
