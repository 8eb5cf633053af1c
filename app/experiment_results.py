"""A copy of an experiment's results small enough to commit (`alprl experiment --results DIR`).

A cell's run directory holds its checkpoints (megabytes to gigabytes) beside the few small files its report reads,
and a new machine starts without `runs/`. With `--results DIR`, each finished cell's small files (`KEPT`: its
cell.json, start overrides, run metadata, metrics log, final held-out records and, in the robustness suite, its
sweep records) are copied to DIR/<cell>/ as it finishes, and the report (report.json, report.md) to DIR. A later run with the same `--results` copies the cells it finds there back into the output
directory before it looks for unfinished cells, so on a new machine they count as finished and only the rest
train; the report is then rebuilt from the restored files as if the cells had run there. A cell restored this way
has no checkpoint: it cannot be resumed or re-swept, only reported.

The cells left to train must start from the same weights as the kept ones: DIR/warm_start.json records the digest
of the warm start's weights, and a rebuilt warm start that differs is refused (`check_warm_start`).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from trainer.config.errors import ConfigError

CELL_FILE = "cell.json"
START_FILE = "cell_start.json"  # the overrides a cell started with: a half-done cell resumes only under the same
WARM_START_FILE = "warm_start.json"
KEPT = (CELL_FILE, START_FILE, "run_meta.json", "metrics.jsonl")
REPORT_FILES = ("report.json", "report.md", "experiment.json")  # report.html (figures inline, ~1 MB) is rebuilt


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


def save_cell(run_dir: Path, results: Path) -> None:
    """Copy one finished cell's kept files to results/<cell>/ (cell.json last, so a copy cut short is not taken
    for a finished cell)."""
    target = results / run_dir.name
    names = kept_files(run_dir)
    for name in sorted(names, key=lambda n: n.name == CELL_FILE):
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(run_dir / name, target / name)


def save_report(out: Path, results: Path) -> None:
    results.mkdir(parents=True, exist_ok=True)
    for name in REPORT_FILES:
        if (out / name).is_file():
            shutil.copy2(out / name, results / name)


def restore_cells(results: Path, out: Path, cell_names: list[str]) -> list[str]:
    """Copy each of `cell_names` that `results` holds finished and `out` does not into `out`; returns their names.

    A cell that `out` holds finished stays as it is (its checkpoints beside it); a half-done one in `out` gives way
    to the finished copy. Paths under the output directory the cell ran in (its `output_dir`, a warm start built
    there) are rewritten to `out`, so the cell counts as finished under this run's overrides."""
    restored = []
    for name in cell_names:
        source, target = results / name, out / name
        if not (source / CELL_FILE).is_file() or (target / CELL_FILE).is_file():
            continue
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(source, target)
        for kept in (target / START_FILE, target / CELL_FILE):  # the cell file last: it marks the cell finished
            if kept.is_file():
                info = json.loads(kept.read_text())
                info["overrides"] = moved_overrides(info["overrides"], out)
                kept.write_text(json.dumps(info, indent=2))
        restored.append(name)
    return restored


def moved_overrides(overrides: list[str], out: Path) -> list[str]:
    """A cell's overrides with the output directory it ran in (the parent of its `output_dir=`) replaced by `out`."""
    ran_in = next((str(Path(o.split("=", 1)[1]).parent) for o in overrides if o.startswith("output_dir=")), None)
    if ran_in is None or ran_in == str(out):
        return overrides
    return [o.replace(f"={ran_in}/", f"={out}/") for o in overrides]


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


def sync_results(out: Path, results: Path, cell_names: list[str]) -> int:
    """Copy every finished cell of `out` that `results` lacks or holds older, and the report; returns how many cells
    were copied (what `alprl experiment --results` runs after each cell)."""
    copied = 0
    for name in cell_names:
        done = out / name / CELL_FILE
        if not done.is_file():
            continue
        kept = results / name / CELL_FILE
        if kept.is_file() and kept.read_bytes() == done.read_bytes():
            continue
        save_cell(out / name, results)
        copied += 1
    save_report(out, results)
    return copied
