"""Provenance of an experiment (app/experiments/provenance.py): cells run from a commit on main with clean tracked
files, or the command is refused in one line unless --exploratory (recorded; every comparison then reads
exploratory); the comparisons' declaration (a hash of what the report judges, its time and commit) is written to
experiment.json before the first cell starts and kept while it holds; a plan changed after a cell finished is
refused. Real git repositories for `on_main`; cells faked as in test_experiment_results.py (no training)."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from test_experiment_results import fake_training, no_figures, plan_of  # noqa: F401  (fixtures)

from app.experiments.provenance import MAIN_BRANCH, check_source, declaration, judged_hash, on_main
from app.experiments.run import run_experiment
from trainer.config.errors import ConfigError

CLEAN = {"commit": "a" * 40, "dirty": False}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def repo(tmp_path) -> tuple[Path, str, str]:
    """A repository with a commit on main and one on a branch beside it: (path, on main, off main)."""
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", MAIN_BRANCH)
    git(root, "config", "user.email", "t@example.com")
    git(root, "config", "user.name", "t")
    (root / "f").write_text("1")
    git(root, "add", "f")
    git(root, "commit", "-q", "-m", "one")
    first = git(root, "rev-parse", "HEAD")
    git(root, "checkout", "-q", "-b", "side")
    (root / "f").write_text("2")
    git(root, "commit", "-q", "-am", "two")
    return root, first, git(root, "rev-parse", "HEAD")


def test_a_commit_must_be_on_main_and_the_tracked_files_clean(repo):
    root, ours, side = repo
    assert on_main(ours, root) and not on_main(side, root)
    assert check_source(False, {"commit": ours, "dirty": False}, root) == {"commit": ours, "dirty": False,
                                                                          "on_main": True}
    for source, why in [({"commit": side, "dirty": False}, f"commit {side[:7]} is not on main"),
                        ({"commit": ours, "dirty": True}, f"tracked files differ from {ours[:7]}")]:
        with pytest.raises(ConfigError) as err:
            check_source(False, source, root)
        assert why in str(err.value) and "--exploratory" in str(err.value) and "\n" not in str(err.value)
        assert check_source(True, source, root)["exploratory"] == why
    with pytest.raises(ConfigError, match="does not run from a git checkout"):
        check_source(False, None, root / "nowhere")


def test_the_declaration_is_kept_while_the_plan_holds_and_refused_once_results_exist():
    plan = {"suite": "alp", "arms": ["a", "b"], "comparisons": [["a", "b"]], "primary": [["a", "b"]],
            "cells": [{"name": "a__s__seed0"}], "steps": 4}
    then = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
    first = declaration(plan, None, CLEAN, cells_finished=0, now=then)
    assert first == {"hash": judged_hash(plan), "at": "2026-12-07T12:00:00+00:00", "commit": CLEAN["commit"]}
    more_seeds = {**plan, "steps": 8, "cells": [{"name": "a__s__seed0"}, {"name": "a__s__seed1"}]}
    assert declaration(more_seeds, {"declared": first}, CLEAN, cells_finished=1) == first  # not judged: kept
    changed = {**plan, "primary": []}
    assert declaration(changed, {"declared": first}, CLEAN, cells_finished=0)["hash"] != first["hash"]
    with pytest.raises(ConfigError, match="1 finished cell.*primary family changed since they ran"):
        declaration(changed, {"declared": first}, CLEAN, cells_finished=1)
    late = declaration(plan, {}, CLEAN, cells_finished=3, now=then)  # begun before declarations were recorded
    assert late["after_cells"] == 3


def test_experiment_json_and_the_report_say_when_and_from_what(tmp_path, fake_training, no_figures):  # noqa: F811
    out = tmp_path / "runs" / "alp"
    run_experiment(plan_of(tmp_path, out), show_progress=False, source={**CLEAN, "on_main": True})
    described = json.loads((out / "experiment.json").read_text())
    assert described["source"]["on_main"] and described["declared"]["commit"] == CLEAN["commit"]
    report = (out / "report.md").read_text()
    assert "before the first cell ran; cells from `aaaaaaa`." in report
    assert json.loads((out / "report.json").read_text())["provenance"]["declared"] == described["declared"]
    # exploratory cells: recorded, and every comparison reads exploratory
    other = tmp_path / "runs" / "alp_x"
    run_experiment(plan_of(tmp_path, other), show_progress=False,
                   source={**CLEAN, "dirty": True, "on_main": True, "exploratory": "tracked files differ"})
    data = json.loads((other / "report.json").read_text())
    assert all(c["family"] != "primary" for c in data["comparisons"])
    assert "exploratory (tracked files differ): every comparison reads exploratory" in (other / "report.md").read_text()


def test_a_committed_experiment_without_records_reports_as_before(tmp_path, fake_training, no_figures):  # noqa: F811
    out = tmp_path / "runs" / "alp"
    run_experiment(plan_of(tmp_path, out), show_progress=False)  # no source: as before provenance existed
    assert "declared" not in json.loads((out / "experiment.json").read_text())
    assert "provenance" not in json.loads((out / "report.json").read_text())
    assert "Comparisons declared" not in (out / "report.md").read_text()
