"""A copy of an experiment's results small enough to commit (`alprl experiment --results DIR`).

A cell's run directory holds its checkpoints (megabytes to gigabytes) beside the few small files its report reads,
and a new machine starts without `runs/`. With `--results DIR`, each finished cell's small files (`KEPT`: its
cell.json, start overrides, run metadata, metrics log, every held-out record, the ratio-scatter diagnostics the
figures draw and, in the robustness suite, its sweep records) go into DIR/cells.tar.xz as it finishes, byte for
byte (app/experiments/archive.py), and the report (report.json, report.md) to DIR. A later run with the same
`--results` writes the cells it finds there back into the output directory before it looks for unfinished cells,
so on a new machine they count as finished and only the rest train; the report is then rebuilt from the restored
files as if the cells had run there. A cell restored this way has no checkpoint: it cannot be resumed or
re-swept, only reported.

Cells kept as folders DIR/<cell>/ (the layout before the archive, or a cell copied in by hand) are read as well,
a folder winning over the archive's copy of the same cell; the next write folds them into the archive and removes
the folders (`pack_results` does only that).

The cells left to train must start from the same weights as the kept ones: DIR/warm_start.json records the digest
of the warm start's weights, and a rebuilt warm start that differs is refused (`check_warm_start`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from app.experiments.archive import ARCHIVE, Cells, folder_files, read_archive, write_archive, write_folder
from trainer.config.errors import ConfigError

CELL_FILE = "cell.json"
START_FILE = "cell_start.json"  # the overrides a cell started with: a half-done cell resumes only under the same
WARM_START_FILE = "warm_start.json"
PLAN_FILE = "experiment.json"
KEPT = (CELL_FILE, START_FILE, "run_meta.json", "metrics.jsonl")
REPORT_FILES = ("report.json", "report.md", PLAN_FILE)  # report.html (figures inline, ~1 MB) is rebuilt


def kept_files(run_dir: Path) -> list[Path]:
    """The files of a finished cell that its report reads, relative to `run_dir`."""
    info = json.loads((run_dir / CELL_FILE).read_text())
    names = [Path(name) for name in KEPT if (run_dir / name).is_file()]
    if info.get("final_eval"):
        names.append(Path(info["final_eval"]))
    for pattern in ("eval/step_*.jsonl", "diagnostics/scatter_step_*.npz"):  # what the report's figures read
        names += [path.relative_to(run_dir) for path in sorted(run_dir.glob(pattern))]
    sweep = run_dir / "robustness" / "records.jsonl"
    if sweep.is_file():
        names.append(sweep.relative_to(run_dir))
    return list(dict.fromkeys(names))


def loose_cells(results: Path) -> Cells:
    """The finished cells `results` keeps as folders <cell>/ (with a cell.json) rather than in its archive."""
    return {path.parent.name: folder_files(path.parent) for path in sorted(results.glob(f"*/{CELL_FILE}"))}


def archived_cells(results: Path) -> Cells:
    """The finished cells (those with a cell.json) in `results`' archive."""
    return {name: files for name, files in read_archive(results / ARCHIVE).items() if CELL_FILE in files}


def kept_cells(results: Path) -> Cells:
    """Every finished cell `results` keeps: the archive's, a folder's copy of the same cell winning."""
    return archived_cells(results) | loose_cells(results)


def moved_overrides(overrides: list[str], out: Path) -> list[str]:
    """A cell's overrides with the output directory it ran in (the parent of its `output_dir=`) replaced by `out`."""
    ran_in = next((str(Path(o.split("=", 1)[1]).parent) for o in overrides if o.startswith("output_dir=")), None)
    if ran_in is None or ran_in == str(out):
        return overrides
    return [o.replace(f"={ran_in}/", f"={out}/") for o in overrides]


def moved(text: bytes, out: Path) -> bytes:
    """A kept cell.json or cell_start.json as it is restored under `out` (`moved_overrides`)."""
    info = json.loads(text)
    info["overrides"] = moved_overrides(info["overrides"], out)
    return json.dumps(info, indent=2).encode()


def restore_cells(results: Path, out: Path, cell_names: list[str]) -> list[str]:
    """Write each of `cell_names` that `results` keeps finished and `out` does not into `out`; returns their names.

    A cell that `out` holds finished stays as it is (its checkpoints beside it); a half-done one in `out` gives way
    to the finished copy. Paths under the output directory the cell ran in (its `output_dir`, a warm start built
    there) are rewritten to `out`, so the cell counts as finished under this run's overrides."""
    kept = kept_cells(results)
    restored = []
    for name in cell_names:
        files, target = kept.get(name), out / name
        if files is None or (target / CELL_FILE).is_file():
            continue
        if target.exists():
            shutil.rmtree(target)
        relocated = {inner: moved(data, out) if inner in (START_FILE, CELL_FILE) else data
                     for inner, data in files.items()}
        write_folder(target, relocated, last=CELL_FILE)  # the cell file last: it marks the cell finished
        restored.append(name)
    return restored


def save_report(out: Path, results: Path) -> None:
    results.mkdir(parents=True, exist_ok=True)
    for name in REPORT_FILES:
        if (out / name).is_file():
            shutil.copy2(out / name, results / name)


def store_cells(results: Path, new: Cells) -> int:
    """Write `new` into `results`' archive beside the cells it holds, folding in the cells kept as folders (then
    removed); rewrites nothing when there is nothing to add. Returns how many cells were added or replaced."""
    loose = loose_cells(results)
    if not new and not loose:
        return 0
    write_archive(results / ARCHIVE, archived_cells(results) | loose | new)
    for name in loose:  # only once the archive holding them is in place
        shutil.rmtree(results / name)
    return len(set(loose) | set(new))


def pack_results(results: Path) -> int:
    """Fold the cells `results` keeps as folders into its archive (a results folder of the layout before the
    archive, converted by the same writer as a run's); returns how many were folded."""
    return store_cells(results, {})


def sync_results(out: Path, results: Path, cell_names: list[str]) -> int:
    """Keep every finished cell of `out` that `results` lacks or holds another version of, and the report; returns
    how many cells were kept (what `alprl experiment --results` runs after each cell). A cell restored from
    `results` is the kept one with its paths moved to `out`: it is not written back."""
    kept = kept_cells(results)
    new: Cells = {}
    for name in cell_names:
        done = out / name / CELL_FILE
        if not done.is_file():
            continue
        old = kept.get(name, {}).get(CELL_FILE)
        if old is not None and done.read_bytes() in (old, moved(old, out)):
            continue
        new[name] = {path.as_posix(): (out / name / path).read_bytes() for path in kept_files(out / name)}
    store_cells(results, new)
    save_report(out, results)
    return len(new)


def unpack_results(results: Path, out: Path) -> Path:
    """An experiment directory at `out` rebuilt from `results`: its plan and every kept cell, and likewise each
    experiment its plan compares with (`compare_with`, relative paths, unpacked at the same place relative to
    `out`); returns `out`. What a report is rebuilt from without `alprl experiment` (app/experiments/rebuild.py)."""
    plan = json.loads((results / PLAN_FILE).read_text())
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy2(results / PLAN_FILE, out / PLAN_FILE)
    restore_cells(results, out, sorted(kept_cells(results)))
    for other in plan.get("compare_with", []):
        target = Path(os.path.normpath(out / other))
        if not (target / PLAN_FILE).is_file():
            unpack_results(Path(os.path.normpath(results / other)), target)
    return out


def model_digest(model_dir: Path) -> str:
    """sha256 over the weight files of a saved model (their names and bytes, in name order)."""
    digest = hashlib.sha256()
    for path in sorted(model_dir.glob("*.safetensors")):
        digest.update(path.name.encode())
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def check_warm_start(model_dir: Path, results: Path) -> None:
    """Record the warm start's digest in `results` the first time; later, refuse a warm start with other weights
    (ConfigError), since cells that trained from different starts cannot be compared pair by pair."""
    found = model_digest(model_dir)
    record = results / WARM_START_FILE
    if record.is_file():
        kept = json.loads(record.read_text())
        if kept["sha256"] != found:
            raise ConfigError(f"the warm start {model_dir} (sha256 {found[:12]}) is not the one the cells in "
                             f"{results} trained from ({kept['sha256'][:12]}, {kept['path']}); put that one at "
                             f"model.path=, or keep this experiment's results in another --results directory")
        return
    results.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"path": str(model_dir), "sha256": found}, indent=2))
