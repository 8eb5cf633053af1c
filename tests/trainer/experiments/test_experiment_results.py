"""`alprl experiment --results DIR` keeps finished cells in DIR/cells.tar.xz (app/experiments/results.py,
app/experiments/archive.py): a round trip gives the same report byte for byte, a rerun counts the archived cells as
finished, a cell kept as a folder merges with the archived ones, and the archive's bytes depend on the cells only.
Cells here are synthetic (no training): the files a real cell leaves, numbers made up."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from app.cli import parse_args
from app.experiments import run as experiment_run
from app.experiments.archive import ARCHIVE, read_archive, write_archive
from app.experiments.results import (
    CELL_FILE,
    archived_cells,
    kept_files,
    pack_results,
    restore_cells,
    sync_results,
    unpack_results,
)
from app.experiments.run import build_plan, run_experiment
from evaluation.reports import experiment_report
from evaluation.reports.experiment_report import write_experiment_report

STEPS = 4


def fake_cell(run: Path, info: dict, seed: int) -> dict:
    """A finished cell's directory as run_cell leaves it: the kept files, a checkpoint, then cell.json."""
    rng = np.random.default_rng(seed)
    run.mkdir(parents=True, exist_ok=True)
    (run / "cell_start.json").write_text(json.dumps({"overrides": info["overrides"]}, indent=2))
    (run / "run_meta.json").write_text(json.dumps({"started": "2026-12-01T00:00:00"}))
    records = [{"step": s, "rollout/reward": float(rng.random()), "rollout_corr/kl": 1e-3 * s,
                "diag/entropy": 0.5 - 0.1 * s} for s in range(1, STEPS + 1)]
    records[-1]["eval/success"] = 0.5
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run / "eval").mkdir(exist_ok=True)
    (run / "eval" / f"step_{STEPS}.jsonl").write_text("".join(
        json.dumps({"index": t, "sample": s, "won": bool(rng.random() < 0.5)}) + "\n" for t in range(6)
        for s in range(2)))
    (run / "diagnostics").mkdir(exist_ok=True)
    mu = rng.uniform(0.01, 1.0, 50)
    np.savez(run / "diagnostics" / f"scatter_step_{STEPS}.npz", train_p=mu.astype(np.float32),
             rollout_p=mu.astype(np.float32))
    (run / "checkpoints" / f"step_{STEPS}").mkdir(parents=True, exist_ok=True)
    (run / "checkpoints" / f"step_{STEPS}" / "model.safetensors").write_bytes(b"weights")  # never kept
    info = info | {"steps": STEPS, "final_eval": f"eval/step_{STEPS}.jsonl", "final_metrics": {"eval/success": 0.5},
                   "wall_s": 30.0}
    (run / CELL_FILE).write_text(json.dumps(info, indent=2))
    return info


def plan_of(tmp_path: Path, out: Path, seeds: str = "0"):
    model = tmp_path / "sft"
    model.mkdir(exist_ok=True)
    (model / "model.safetensors").write_bytes(b"the warm start")
    return build_plan(parse_args(["experiment", "alp", "--scale", "smoke", "--methods", "grpo,token_alp",
                                  "--settings", "lag2", "--seeds", seeds, "--out", str(out), f"model.path={model}"]))


def fake_run_cell(plan, cell) -> dict:
    info = {"cell": cell.name, "arm": cell.arm, "method": cell.method, "setting": cell.setting.name,
            "seed": cell.seed, "overrides": plan.cell_overrides(cell)}
    return fake_cell(plan.out / cell.name, info, cell.seed)


def no_training(plan, cell):
    pytest.fail(f"{cell.name} trained again")


@pytest.fixture
def fake_training(monkeypatch):
    monkeypatch.setattr(experiment_run, "run_cell", fake_run_cell)
    monkeypatch.setattr(experiment_run, "warm_start", lambda plan, show: None)


@pytest.fixture
def no_figures(monkeypatch):
    """report.html without its figures (seconds each): only the round trip compares them."""
    monkeypatch.setattr(experiment_report, "render_html", lambda out, data: "")


def test_a_round_trip_through_the_archive_rebuilds_the_same_report(tmp_path, fake_training):
    out, kept = tmp_path / "runs" / "alp", tmp_path / "docs" / "alp"
    run_experiment(plan_of(tmp_path, out, "0,1"), show_progress=False, results=kept)
    names = sorted(p.parent.name for p in out.glob(f"*/{CELL_FILE}"))
    assert len(names) == 4 and (kept / ARCHIVE).is_file()
    assert not [p for p in kept.iterdir() if p.is_dir()]  # no cell folder beside the archive
    archived = read_archive(kept / ARCHIVE)
    for name in names:  # byte for byte the kept files, and nothing else (no checkpoint)
        files = {p.as_posix(): (out / name / p).read_bytes() for p in kept_files(out / name)}
        assert archived[name] == files and "diagnostics/scatter_step_4.npz" in files

    rebuilt = unpack_results(kept, tmp_path / "rebuilt" / "alp")
    write_experiment_report(rebuilt)
    for report in ("report.json", "report.md", "report.html"):  # the figures too: Agg PNGs carry no date
        assert (rebuilt / report).read_bytes() == (out / report).read_bytes(), report
    assert (kept / "report.md").read_bytes() == (out / "report.md").read_bytes()


def test_the_archive_bytes_depend_on_the_cells_only(tmp_path):
    cells = {"b__x__seed0": {CELL_FILE: b"{}", "eval/step_1.jsonl": b"1\n"}, "a__x__seed0": {CELL_FILE: b"[]"}}
    write_archive(tmp_path / "one.tar.xz", cells)
    write_archive(tmp_path / "two.tar.xz", dict(reversed(cells.items())))
    assert (tmp_path / "one.tar.xz").read_bytes() == (tmp_path / "two.tar.xz").read_bytes()
    assert read_archive(tmp_path / "one.tar.xz") == cells
    assert not list(tmp_path.glob("*.tmp"))


def test_a_rerun_with_results_counts_the_archived_cells_as_finished(tmp_path, fake_training, no_figures,
                                                                    monkeypatch):
    out, kept = tmp_path / "runs" / "alp", tmp_path / "docs" / "alp"
    run_experiment(plan_of(tmp_path, out), show_progress=False, results=kept)
    report, archive = (out / "report.json").read_bytes(), (kept / ARCHIVE).read_bytes()

    shutil.rmtree(tmp_path / "runs")  # a new machine: only the committed folder is left
    monkeypatch.setattr(experiment_run, "run_cell", no_training)
    run_experiment(plan_of(tmp_path, out), show_progress=False, results=kept)
    assert (out / "report.json").read_bytes() == report
    assert (kept / ARCHIVE).read_bytes() == archive  # restored cells are not written back

    # in another --out with one more seed: the seed-0 cells are restored (paths moved there), only seed 1 trains
    trained = []

    def train_and_record(plan, cell):
        trained.append(cell.name)
        return fake_run_cell(plan, cell)

    monkeypatch.setattr(experiment_run, "run_cell", train_and_record)
    elsewhere = tmp_path / "elsewhere"
    run_experiment(plan_of(tmp_path, elsewhere, "0,1"), show_progress=False, results=kept)
    assert trained == ["grpo__lag2__seed1", "token_alp__lag2__seed1"]
    restored = json.loads((elsewhere / "grpo__lag2__seed0" / CELL_FILE).read_text())
    assert f"output_dir={elsewhere}/grpo__lag2__seed0" in restored["overrides"]
    cells = archived_cells(kept)
    assert sorted(cells) == ["grpo__lag2__seed0", "grpo__lag2__seed1", "token_alp__lag2__seed0",
                             "token_alp__lag2__seed1"]
    assert f"output_dir={out}/grpo__lag2__seed0".encode() in cells["grpo__lag2__seed0"][CELL_FILE]  # as it ran
    assert json.loads((kept / "report.json").read_text())["cells_finished"] == 4


def test_an_archived_cell_and_a_cell_kept_as_a_folder_merge(tmp_path, fake_training, no_figures):
    out, kept = tmp_path / "runs" / "alp", tmp_path / "docs" / "alp"
    plan = plan_of(tmp_path, out)
    run_experiment(plan, show_progress=False, results=kept)
    # a cell kept as a folder, as before the archive (or copied in by hand): token_alp's, moved out of the archive
    cells = archived_cells(kept)
    loose = cells.pop("token_alp__lag2__seed0")
    write_archive(kept / ARCHIVE, cells)
    for inner, data in loose.items():
        (kept / "token_alp__lag2__seed0" / inner).parent.mkdir(parents=True, exist_ok=True)
        (kept / "token_alp__lag2__seed0" / inner).write_bytes(data)

    names = [c.name for c in plan.cells]
    fresh = tmp_path / "fresh"
    assert restore_cells(kept, fresh, names) == names  # both are read
    assert (fresh / "token_alp__lag2__seed0" / "diagnostics" / f"scatter_step_{STEPS}.npz").read_bytes() \
        == loose[f"diagnostics/scatter_step_{STEPS}.npz"]

    # the next write folds the folder into the archive and removes it
    assert sync_results(fresh, kept, names) == 0  # both restored: nothing new to keep ...
    assert sorted(archived_cells(kept)) == sorted(names)  # ... but the folder is folded in
    assert not (kept / "token_alp__lag2__seed0").exists()
    assert archived_cells(kept)["token_alp__lag2__seed0"] == loose
    assert pack_results(kept) == 0  # nothing left to fold


def test_a_folder_wins_over_the_archived_copy_of_its_cell(tmp_path):
    kept = tmp_path / "kept"
    info = {"cell": "grpo__lag2__seed0", "arm": "grpo/lag2", "method": "grpo", "setting": "lag2", "seed": 0,
            "overrides": [f"output_dir={tmp_path}/run/grpo__lag2__seed0"]}
    fake_cell(tmp_path / "run" / "grpo__lag2__seed0", info, seed=0)
    sync_results(tmp_path / "run", kept, ["grpo__lag2__seed0"])
    newer = fake_cell(kept / "grpo__lag2__seed0", info | {"note": "rerun"}, seed=1)
    shutil.rmtree(kept / "grpo__lag2__seed0" / "checkpoints")
    assert pack_results(kept) == 1
    assert json.loads(archived_cells(kept)["grpo__lag2__seed0"][CELL_FILE]) == newer
