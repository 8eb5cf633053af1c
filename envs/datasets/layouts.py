"""The on-disk layouts of the public math sets, and detecting which one a file uses from its columns.

A layout maps roles (`question`, `answer`, `id`, `source`) to column paths (`a.b` = key `b` of the dict in column
`a`). A question is a string, or chat messages (a list of {role, content}: the last user message is taken).
Several entries may share a name (variants of one set). Detection: an entry matches when all of its `signature`
columns are present and none of its `excludes`; among matches, one whose signature is a strict subset of another's
is dropped (the more specific layout wins, so MATH500 beats the plain question/answer layout); more than one left,
or none, is an error listing the known layouts and the columns seen.

Sources of the column names (the files as published on the Hugging Face hub):
- math500: HuggingFaceH4/MATH-500 (`problem, solution, answer, subject, level, unique_id`);
- aime2024: Maxwell-Jia/AIME_2024 (`ID, Problem, Solution, Answer`, integer answers);
- aime2025: opencompass/AIME2025 (`question, answer`) and copies with `problem, answer`;
- minerva: the Minerva Math test set as `problem, solution` (answer boxed in the solution) or `question, answer`;
- olympiadbench: Hothan/OlympiadBench (`id, question, final_answer` — a list of LaTeX strings — plus solutions);
- verl / dapo: verl's RL parquet (`data_source, prompt` as chat messages, `reward_model.ground_truth`,
  `extra_info.index`); BytedTsinghua-SIA/DAPO-Math-17k is such a file, so both names mean the same layout and
  detection reports `verl`;
- qa: any other file with `question, answer` or `problem, answer` (detection cannot tell AIME 2025 from Minerva's
  question/answer form; name them with `format=` to get their checks).
"""

from __future__ import annotations

from dataclasses import dataclass, field

ROLES = ("question", "answer", "id", "source")


@dataclass(frozen=True)
class Layout:
    """One variant of a named layout.

    name: what `format=` accepts and what `MathProblem.source` defaults to.
    fields: role → column path; `question` and `answer` are required, `id` and `source` optional.
    signature: columns that must all be present for detection (and for `format=` to pick this variant).
    excludes: columns whose presence rules this variant out.
    answer_kind: "plain", "integer" (AIME), or "solution" (the answer is the box inside a worked solution).
    detect: False for variants reachable only through `format=` (they would tie with another on the same columns).
    """

    name: str
    fields: dict[str, str]
    signature: frozenset[str]
    excludes: frozenset[str] = field(default_factory=frozenset)
    answer_kind: str = "plain"
    detect: bool = True


def _layout(name, question, answer, id_=None, source=None, *, excludes=(), extra_signature=(), **kw) -> Layout:
    fields = {"question": question, "answer": answer}
    if id_:
        fields["id"] = id_
    if source:
        fields["source"] = source
    top = {path.split(".")[0] for path in (question, answer)} | set(extra_signature)
    return Layout(name, fields, frozenset(top), frozenset(excludes), **kw)


_VERL = dict(question="prompt", answer="reward_model.ground_truth", id_="extra_info.index", source="data_source",
             extra_signature=("data_source",))

LAYOUTS: tuple[Layout, ...] = (
    _layout("math500", "problem", "answer", "unique_id", extra_signature=("unique_id",)),
    _layout("aime2024", "Problem", "Answer", "ID", answer_kind="integer"),
    _layout("aime2025", "question", "answer", "id", answer_kind="integer", detect=False),
    _layout("aime2025", "problem", "answer", "id", answer_kind="integer", detect=False),
    _layout("minerva", "problem", "solution", "id", excludes=("answer",), answer_kind="solution"),
    _layout("minerva", "question", "answer", "id", detect=False),
    _layout("olympiadbench", "question", "final_answer", "id"),
    _layout("verl", **_VERL),
    _layout("dapo", **_VERL, detect=False),
    _layout("qa", "question", "answer", "id"),
    _layout("qa", "problem", "answer", "id"),
)
LAYOUT_NAMES = tuple(dict.fromkeys(layout.name for layout in LAYOUTS))


class LayoutError(ValueError):
    """No layout, or more than one, fits the columns (the loader adds the file name)."""


def _known() -> str:
    return "; ".join(f"{lay.name} ({', '.join(sorted(lay.signature))})" for lay in LAYOUTS)


def detect_layout(columns: set[str]) -> Layout:
    """The one detectable layout that fits `columns` (see the module docstring for the rule)."""
    matches = [lay for lay in LAYOUTS
               if lay.detect and lay.signature <= columns and not lay.excludes & columns]
    best = [lay for lay in matches if not any(lay.signature < other.signature for other in matches)]
    seen = ", ".join(sorted(columns)) or "none"
    if len(best) == 1:
        return best[0]
    if not best:
        raise LayoutError(f"unknown layout: columns seen: {seen}; known layouts: {_known()}; "
                          "name one with format= or map columns with fields=")
    names = ", ".join(lay.name for lay in best)
    raise LayoutError(f"ambiguous layout ({names} all fit): columns seen: {seen}; name one with format=")


def named_layout(name: str, columns: set[str]) -> Layout:
    """The variant of layout `name` whose signature fits `columns` (its first variant if none fits)."""
    variants = [lay for lay in LAYOUTS if lay.name == name.lower()]
    if not variants:
        raise LayoutError(f"unknown format {name!r}; known layouts: {', '.join(LAYOUT_NAMES)}")
    for lay in variants:
        if lay.signature <= columns:
            return lay
    return variants[0]


def with_fields(layout: Layout, overrides: dict[str, str]) -> Layout:
    """`layout` with some roles mapped to other columns (e.g. {"question": "my_q", "answer": "my_a"})."""
    unknown = set(overrides) - set(ROLES)
    if unknown:
        raise LayoutError(f"unknown field role(s) {sorted(unknown)}; roles: {', '.join(ROLES)}")
    fields = {**layout.fields, **overrides}
    signature = frozenset(path.split(".")[0] for path in (fields["question"], fields["answer"]))
    answer_kind = layout.answer_kind if fields["answer"] == layout.fields.get("answer") else (
        "integer" if layout.answer_kind == "integer" else "plain")
    return Layout(layout.name, fields, signature, frozenset(), answer_kind, layout.detect)
