"""Rebuild every committed experiment's report, and the figures docs/experiments.md cites, from the kept cells
(DIR/cells.tar.xz) alone, and check them against the committed files byte for byte:
`python -m app.experiments.rebuild [docs/experiments]` prints one line per experiment and per figure, exit 1 on
any difference.

report.json and report.md are written by `write_experiment_report` in a scratch copy of each experiment rebuilt by
`unpack_results` and compared whole. A figure is compared as PNG bytes: matplotlib's Agg writes no date into a PNG,
so the same records drawn by the same code give the same bytes. Each cited figure is the image of its title in its
experiment's rebuilt report.html, or, where it draws the runs of several experiments (the lag-4 horizon figures:
`long_lag4` and GRPO's second seed, kept apart in `long_lag4_grpo_seed1`), the horizon figure of that title drawn
over their cells together, in that order.

A new figure under docs/experiments/ goes into `CITED_FIGURES` (or `UNKEPT_FIGURES` with the reason it cannot be
drawn again); the check names any that is in neither.
"""

from __future__ import annotations

import base64
import html
import json
import re
import sys
import tempfile
from pathlib import Path

from app.experiments.results import PLAN_FILE, unpack_results
from evaluation.reports.experiment_figures import SIGMA_FIGURE
from evaluation.reports.experiment_report import finished_cells, write_experiment_report
from evaluation.reports.long_horizon_figures import (
    DYNAMICS_FIGURE,
    ENVELOPE_FIGURE,
    HORIZON_FIGURES,
    KL_FIGURE,
    SUCCESS_FIGURE,
)
from evaluation.reports.long_horizon_report import horizon_runs

# the titles the report gives them (evaluation/reports/experiment_report.py, run_figures.py, run_report.py)
SUCCESS = "Held-out success per arm"
ENVELOPE = "Figure 1: ratio envelope over steps (P2-P98, line P50)"
SIGMA_LAYERS = "Figure 8: ALP noise scale σ per layer and |Δp|"
DYNAMICS = "Training dynamics"
LAG4 = ("long_lag4", "long_lag4_grpo_seed1")

CITED_FIGURES: dict[str, tuple[tuple[str, ...], str]] = {
    "ablation_heldout.png": (("ablation",), SUCCESS),
    "alp_heldout.png": (("alp",), SUCCESS),
    "alp_fig1_ratio_envelope.png": (("alp",), ENVELOPE),
    "alp_dynamics.png": (("alp",), DYNAMICS),
    "alp_math_tiny_heldout.png": (("alp_math_tiny",), SUCCESS),
    "layers_rel0.1_heldout.png": (("layers_rel0.1",), SUCCESS),
    "layers_rel0.1_fig8.png": (("layers_rel0.1",), SIGMA_LAYERS),
    "long_fig1_envelope.png": (("long",), ENVELOPE_FIGURE),
    "long_fig3_kl.png": (("long",), KL_FIGURE),
    "long_fig4_dynamics.png": (("long",), DYNAMICS_FIGURE),
    "long_success.png": (("long",), SUCCESS_FIGURE),
    "long_lag4_fig1_envelope.png": (LAG4, ENVELOPE_FIGURE),
    "long_lag4_fig3_kl.png": (LAG4, KL_FIGURE),
    "long_lag4_fig4_dynamics.png": (LAG4, DYNAMICS_FIGURE),
    "long_lag4_success.png": (LAG4, SUCCESS_FIGURE),
    "mismatch_heldout.png": (("mismatch",), SUCCESS),
    "sensitivity_fig9.png": (("sensitivity",), SIGMA_FIGURE),
}
"""Figure file → (the experiments whose cells it draws, its title in the report)."""

BEFORE_RESULTS = "its suite ran before --results kept cells (docs/experiments.md: \"No committed cells\")"
UNKEPT_FIGURES = {name: BEFORE_RESULTS for name in (
    "gigpo_household_heldout.png", "gigpo_household_reward.png", "gigpo_shop_heldout.png", "gigpo_shop_reward.png",
    "layers_fig8_sigma.png", "layers_heldout.png", "robustness_sweep.png", "robustness_sweep_seed1.png",
    "robustness_sweep_seeds12.png", "staleness_heldout.png")}


def report_images(report_html: str) -> dict[str, bytes]:
    """The PNG figures of a report.html by their titles."""
    found = re.findall(r"<img alt='([^']*)' src='data:image/png;base64,([^']*)'/>", report_html)
    return {html.unescape(title): base64.b64decode(data) for title, data in found}


def rebuild_all(root: Path, work: Path) -> list[str]:
    """Unpack every experiment under `root` (a folder holding an experiment.json) into `work` and write its report
    there, figures included; returns their names."""
    names = experiments(root)
    for name in names:
        if not (work / name / PLAN_FILE).is_file():  # an experiment another one compares with is unpacked already
            unpack_results(root / name, work / name)
    for name in names:
        write_experiment_report(work / name)
    return names


def horizon_image(work: Path, names: tuple[str, ...], title: str) -> bytes | None:
    """The horizon figure `title` over the cells of the experiments `names` (rebuilt in `work`) together."""
    cells = [c for n in names for c in finished_cells(work / n, json.loads((work / n / PLAN_FILE).read_text()))]
    runs = horizon_runs(cells)
    figure = next((f for f in (make(runs) for make in HORIZON_FIGURES) if f.title == title), None)
    return base64.b64decode(figure.image) if figure is not None and figure.image else None


def check_reports(root: Path, work: Path, names: list[str]) -> dict[str, str]:
    """Per experiment: "identical", or which of report.json / report.md differs from the committed one."""
    verdicts = {}
    for name in names:
        differ = [f for f in ("report.json", "report.md")
                  if (work / name / f).read_bytes() != (root / name / f).read_bytes()]
        verdicts[name] = f"{' and '.join(differ)} differ" if differ else "identical"
    return verdicts


def check_figures(root: Path, work: Path) -> dict[str, str]:
    """Per figure file under `root`: "identical", how it differs, or why it is not drawn again."""
    images = {n: report_images((work / n / "report.html").read_text())
              for n in {names[0] for names, _ in CITED_FIGURES.values() if len(names) == 1}}
    verdicts = {}
    for path in sorted(root.glob("*.png")):
        if path.name in UNKEPT_FIGURES:
            verdicts[path.name] = f"not drawn again: {UNKEPT_FIGURES[path.name]}"
            continue
        if path.name not in CITED_FIGURES:
            verdicts[path.name] = "differs: not in CITED_FIGURES (app/experiments/rebuild.py)"
            continue
        names, title = CITED_FIGURES[path.name]
        image = images[names[0]].get(title) if len(names) == 1 else horizon_image(work, names, title)
        verdicts[path.name] = ("differs: no figure titled " + repr(title) if image is None
                               else "identical" if image == path.read_bytes() else "differs: other bytes")
    return verdicts


def check_experiment(root: Path, name: str) -> dict[str, str]:
    """Rebuild one experiment under `root` (and those its plan compares with) in a scratch folder: the verdict of
    its report ("<name>/report") and of each cited figure drawn from its cells alone; the figures drawn over
    several experiments' cells are `check`'s."""
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        unpack_results(root / name, work / name)
        write_experiment_report(work / name)
        verdicts = {f"{name}/report": check_reports(root, work, [name])[name]}
        images = report_images((work / name / "report.html").read_text())
        for figure, (names, title) in sorted(CITED_FIGURES.items()):
            if names == (name,) and (root / figure).is_file():
                image = images.get(title)
                verdicts[figure] = ("differs: no figure titled " + repr(title) if image is None
                                    else "identical" if image == (root / figure).read_bytes() else "differs: other bytes")
        return verdicts


def experiments(root: Path) -> list[str]:
    """The experiments committed under `root`: each folder that holds an experiment.json."""
    return sorted(p.parent.name for p in root.glob(f"*/{PLAN_FILE}"))


def check(root: Path) -> dict[str, str]:
    """Rebuild everything under `root` in a scratch folder: per report ("<experiment>/report") and per figure file,
    its verdict ("identical", "... differ...", or "not drawn again: <why>")."""
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        names = rebuild_all(root, work)
        verdicts = {f"{n}/report": v for n, v in check_reports(root, work, names).items()}
        return verdicts | check_figures(root, work)


def failures(verdicts: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in verdicts.items() if v != "identical" and not v.startswith("not drawn again")}


def main(argv: list[str] | None = None) -> int:
    verdicts = check(Path((argv or sys.argv[1:] or ["docs/experiments"])[0]))
    for what, verdict in verdicts.items():
        print(f"{what}: {verdict}")
    return 1 if failures(verdicts) else 0


if __name__ == "__main__":
    sys.exit(main())
