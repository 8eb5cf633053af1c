"""Every committed experiment's report.json and report.md, and every figure docs/experiments.md cites from a suite
with kept cells, is what the code draws again from docs/experiments/<suite>/cells.tar.xz alone, byte for byte
(app/experiments/rebuild.py; `python -m app.experiments.rebuild` prints the same verdicts). A change to the report's
code that moves a committed number fails here: regenerate the reports (`alprl experiment ... --results`) with it.
Minutes on the 2-core machine: every report's bootstrap and figures."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.experiments.archive import ARCHIVE
from app.experiments.rebuild import check, failures

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = ROOT / "docs" / "experiments"


def test_no_cell_is_kept_as_a_folder():
    # the archive is the one layout under docs/: the next `alprl experiment --results DIR` run folds a cell folder
    # into DIR's archive, and so does app/experiments/results.py's `pack_results(DIR)` alone
    for plan in EXPERIMENTS.glob("*/experiment.json"):
        loose = sorted(p.parent.name for p in plan.parent.glob("*/cell.json"))
        assert not loose, f"{plan.parent}: cells kept as folders beside {ARCHIVE}: {loose}"


@pytest.mark.slow
def test_every_committed_report_and_figure_is_rebuilt_exactly_from_the_archives():
    verdicts = check(EXPERIMENTS)
    assert len([k for k in verdicts if k.endswith("/report")]) == len(list(EXPERIMENTS.glob("*/experiment.json")))
    assert not failures(verdicts), failures(verdicts)
