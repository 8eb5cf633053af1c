"""Every committed experiment's report.json and report.md, and every figure docs/experiments.md cites from a suite
with kept cells, is what the code draws again from docs/experiments/<suite>/cells.tar.xz alone, byte for byte
(app/experiments/rebuild.py; `python -m app.experiments.rebuild` prints the same verdicts). A change to the report's
code that moves a committed number fails here: regenerate the reports (`alprl experiment ... --results`) with it.
Minutes on the 2-core machine (every report's bootstrap and figures), one experiment a test."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from app.experiments.archive import ARCHIVE
from app.experiments.rebuild import (
    CITED_FIGURES,
    UNKEPT_FIGURES,
    check_experiment,
    experiments,
    failures,
    horizon_image,
)
from app.experiments.results import PLAN_FILE, unpack_results

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = ROOT / "docs" / "experiments"


def test_no_cell_is_kept_as_a_folder():
    # the archive is the one layout under docs/: the next `alprl experiment --results DIR` run folds a cell folder
    # into DIR's archive, and so does app/experiments/results.py's `pack_results(DIR)` alone
    for plan in EXPERIMENTS.glob("*/experiment.json"):
        loose = sorted(p.parent.name for p in plan.parent.glob("*/cell.json"))
        assert not loose, f"{plan.parent}: cells kept as folders beside {ARCHIVE}: {loose}"


@pytest.mark.slow
@pytest.mark.parametrize("name", experiments(EXPERIMENTS))
def test_each_committed_report_and_its_figures_are_rebuilt_exactly_from_its_archive(name):
    # one experiment a test, so that the test workers share the minutes of the rebuild
    verdicts = check_experiment(EXPERIMENTS, name)
    assert f"{name}/report" in verdicts and not failures(verdicts), failures(verdicts)


@pytest.mark.slow
def test_the_figures_over_several_experiments_are_rebuilt_exactly_and_every_figure_is_accounted_for():
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        for names in {names for names, _ in CITED_FIGURES.values() if len(names) > 1}:
            for name in names:
                if not (work / name / PLAN_FILE).is_file():
                    unpack_results(EXPERIMENTS / name, work / name)
        for figure, (names, title) in CITED_FIGURES.items():
            if len(names) > 1:
                image = horizon_image(work, names, title)
                assert image is not None and image == (EXPERIMENTS / figure).read_bytes(), f"{figure} differs"
    for path in EXPERIMENTS.glob("*.png"):
        assert path.name in CITED_FIGURES or path.name in UNKEPT_FIGURES, (
            f"{path.name} is in neither CITED_FIGURES nor UNKEPT_FIGURES (app/experiments/rebuild.py)")
