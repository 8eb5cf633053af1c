"""docs/experiments.md's "Claims at this scale" table is the one record of each paper claim's verdict; README's
list between the claims markers is that table rendered by `render_readme_block`, so the two cannot drift apart.

After editing the table, `.venv/bin/python tests/structure/test_claims_table.py` prints README's new list,
markers included, to paste over the old one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "experiments.md"
README = ROOT / "README.md"

HEADING = "## Claims at this scale"
COLUMNS = ["id", "claim", "paper", "verdict",
           "effect [interval over runs, 95%; primary comparisons Holm-corrected]", "suite · seeds · commit"]
VERDICTS = ("holds", "does not hold", "inside the noise", "untested (no power)", "untested",
            "no committed evidence")
START, END = "<!-- claims:start -->", "<!-- claims:end -->"
UNTESTED_EFFECT = "–"  # an en dash: the docs' mark for "no number"


@dataclass(frozen=True)
class Claim:
    id: str
    claim: str
    paper: str
    verdict: str
    effect: str
    where: str

    @property
    def suite(self) -> str:
        """The suite named first in `where` ("gigpo, shop config · 0,1 · …" → "gigpo")."""
        match = re.match(r"[a-z_]+", self.where)
        return match.group(0) if match else ""


def _cells(line: str) -> list[str]:
    # A cell may hold an escaped pipe (\|), as the docs' |Δp| columns do; only bare pipes separate cells.
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip()[1:-1])]


def _section(text: str, heading: str) -> str:
    """The lines after `heading` up to the next heading of any level."""
    assert heading in text, f"{heading!r} is missing"
    body = text.split(heading, 1)[1]
    return re.split(r"^#", body, maxsplit=1, flags=re.M)[0]


def claims_table(text: str | None = None) -> list[Claim]:
    text = DOCS.read_text() if text is None else text
    lines = [line for line in _section(text, HEADING + "\n").splitlines() if line.startswith("|")]
    assert len(lines) > 2, f"no table under {HEADING!r} in docs/experiments.md"
    assert _cells(lines[0]) == COLUMNS, (
        f"the claims table's columns are {_cells(lines[0])}, expected {COLUMNS}"
    )
    rows = []
    for line in lines[2:]:
        cells = _cells(line)
        assert len(cells) == len(COLUMNS), f"a claims row has {len(cells)} cells, not {len(COLUMNS)}: {line}"
        rows.append(Claim(cells[0].strip("`"), *cells[1:]))
    return rows


def render_readme_block(rows: list[Claim]) -> str:
    """README's list, markers included: one bullet per table row, in the table's order."""
    bullets = [f"- **{r.verdict}**: {r.claim} ({r.effect}; `{r.id}`)" for r in rows]
    return "\n".join([START, *bullets, END])


def readme_bullets(text: str | None = None) -> list[str]:
    text = README.read_text() if text is None else text
    assert text.count(START) == 1 and text.count(END) == 1, f"README needs exactly one {START} and one {END}"
    block = text.split(START, 1)[1].split(END, 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def suites_with_results(text: str | None = None) -> set[str]:
    """Suites whose section after "## Results" holds a table: a suite still "not run yet" has prose only."""
    text = DOCS.read_text() if text is None else text
    results = text.split("\n## Results\n", 1)[1]
    found = set()
    for match in re.finditer(r"^### `([a-z_]+)`.*$", results, flags=re.M):
        body = re.split(r"^#{2,3} ", results[match.end() :], maxsplit=1, flags=re.M)[0]
        if re.search(r"^\| ", body, flags=re.M):
            found.add(match.group(1))
    return found


def known_suites(text: str) -> set[str]:
    return set(re.findall(r"^\| `([a-z_]+)` \|", _section(text, "## Suites\n"), flags=re.M))


def test_every_verdict_is_one_of_six_and_ids_are_unique():
    rows = claims_table()
    bad = [f"{r.id}: {r.verdict!r}" for r in rows if r.verdict not in VERDICTS]
    assert not bad, f"verdicts must be one of {VERDICTS}; found {bad}"
    ids = [r.id for r in rows]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    assert not repeated, f"claim ids appear more than once: {repeated}"
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", i) for i in ids), f"ids must be lowercase slugs: {ids}"


def test_untested_rows_have_no_number_and_tested_rows_name_a_run():
    text = DOCS.read_text()
    suites = known_suites(text)
    for r in claims_table(text):
        assert r.suite in suites, f"{r.id}: suite {r.suite!r} is not in the Suites table ({sorted(suites)})"
        untested = r.verdict == "untested"
        assert r.effect.startswith(UNTESTED_EFFECT) == untested, (
            f"{r.id}: an untested row's effect starts with {UNTESTED_EFFECT!r} and only an untested row's does; "
            f"got verdict {r.verdict!r}, effect {r.effect!r}"
        )
        if not untested:
            assert re.search(r"\b[0-9a-f]{7,40}\b", r.where), (
                f"{r.id}: a tested row names its run's commit: {r.where}"
            )


def test_a_suite_with_results_is_not_untested_without_a_reason():
    # A results section landing for a suite must move its rows off "untested", unless the row says what is not run.
    with_results = suites_with_results()
    stale = [
        f"{r.id} ({r.suite})"
        for r in claims_table()
        if r.verdict == "untested" and r.suite in with_results and "not run" not in r.effect
    ]
    assert not stale, f"untested, but their suite has results in docs/experiments.md: {stale}"


def test_numbers_and_commits_come_from_the_results_sections():
    # The table restates results; an interval or commit found nowhere else in the docs was typed, not copied.
    text = DOCS.read_text()
    elsewhere = text.replace(_section(text, HEADING + "\n"), "")
    for r in claims_table(text):
        for interval in re.findall(r"\[[^\]]+\]", r.effect):
            assert interval in elsewhere, f"{r.id}: interval {interval} is in no results section"
        for commit in re.findall(r"\b[0-9a-f]{7,40}\b", r.where):
            assert commit in elsewhere, f"{r.id}: commit {commit} is stated by no results section"


def test_readme_list_is_the_table():
    rows = claims_table()
    expected = render_readme_block(rows).splitlines()[1:-1]
    actual = readme_bullets()
    for want, got in zip(expected, actual, strict=False):
        assert got == want, (
            f"README's claims list differs from docs/experiments.md's table (render_readme_block writes it):\n"
            f"  table:  {want}\n  README: {got}"
        )
    assert len(actual) == len(expected), (
        f"README's claims list has {len(actual)} bullets, the table {len(expected)} rows; "
        f"missing from README: {expected[len(actual) :]}; not in the table: {actual[len(expected) :]}"
    )


if __name__ == "__main__":
    print(render_readme_block(claims_table()))
