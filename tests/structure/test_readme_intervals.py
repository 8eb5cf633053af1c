"""README's interval figures for the suites are copied from committed reports, never typed or kept from a run whose
cells are gone: every signed interval ("[−0.105, +0.095]") in its preset table, its claims list and its GiGPO
paragraph appears in some docs/experiments/<suite>/report.md, whose tables print every comparison's intervals
(over runs, Holm-corrected, previous, evaluation only) to three decimals."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
REPORTS = ROOT / "docs" / "experiments"
INTERVAL = re.compile(r"\[([+−-]\d+\.\d+), ([+−-]\d+\.\d+)\]")


def _as_report_prints_it(lo: str, hi: str) -> str:
    """An interval in report.md's format: ASCII signs, three decimals."""
    return "[{:+.3f}, {:+.3f}]".format(*(float(x.replace("−", "-")) for x in (lo, hi)))


def readme_parts(text: str) -> dict[str, str]:
    """The parts of README that quote the suites' results: the presets table, the claims list and the GiGPO
    paragraph."""
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| preset |"))
    end = next(i for i in range(header, len(lines)) if not lines[i].startswith("|"))
    claims = text.split("<!-- claims:start -->", 1)[1].split("<!-- claims:end -->", 1)[0]
    gigpo = text.split("`gigpo` runs on the multi-turn envs", 1)[1].split("\n\n", 1)[0]
    return {"presets table": "\n".join(lines[header:end]), "claims list": claims, "GiGPO paragraph": gigpo}


def test_readme_quotes_only_intervals_that_a_committed_report_prints():
    printed = "\n".join(p.read_text() for p in sorted(REPORTS.glob("*/report.md")))
    parts = readme_parts(README.read_text())
    assert parts["presets table"] and parts["claims list"] and parts["GiGPO paragraph"]
    missing = [f"{where}: {m.group(0)}" for where, part in parts.items() for m in INTERVAL.finditer(part)
               if _as_report_prints_it(*m.groups()) not in printed]
    assert not missing, f"README quotes intervals no committed report prints (copy them from its report.md): {missing}"


def test_the_check_reads_readmes_unicode_signs_as_the_reports_ascii_ones():
    assert _as_report_prints_it("−0.105", "+0.095") == "[-0.105, +0.095]"
    assert [m.group(0) for m in INTERVAL.finditer("+0.1 [−0.1, +0.2]; [0.5, 2]")] == ["[−0.1, +0.2]"]
