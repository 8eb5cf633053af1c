"""Where the math envs' problems come from: the task generator, or local dataset files (`env.dataset`).

`ProblemSource` answers, for `TIRMathEnv` and the single-turn `MathEnv`, how many problems a split has and which
`TIRTask` a reset plays. A split is served from a file or generated:

| split | `dataset_split_field` set | no split field |
|---|---|---|
| train | `dataset` rows whose field is "train" | every `dataset` row |
| test | `eval_dataset` (every row) if set, else `dataset` rows "test" | `eval_dataset` if set, else every `dataset` row |
| valid | `dataset` rows "valid" or "validation" | an error: a file has no validation split of its own |

Without `dataset`, train and valid are generated; without either file, test is too. A test split read from the
training file without a split field evaluates on the training problems: allowed (a quick check that learning
happens), and logged once per process when such a task is first played.

Indices: a generated split keeps the global index line of `envs/splits.py` (test 0-499, valid 500-1499, train
1500 and up). A split served from a file is indexed by position: index i is its i-th problem in file order
(0..size-1), so evaluation's "test indices 0..n-1" means the first n test problems either way; an index outside
the split is a ValueError naming its size. A GRPO group is still G resets with the same index.

A dataset problem becomes a `TIRTask`: task_id "<file stem>:<problem id>" (the loader's "<stem>:<row>" when the
file has no id column; a repeated id gets "#2", "#3", ... so ids stay unique within a split), task_type its source
(`MathProblem.source`: the layout name or the row's data_source, so per-type success breaks down by benchmark),
difficulty 0 (not rated), answer the normalized gold, solution_code "" (there is no scripted solution, which is
why `alprl sft` refuses a dataset). `difficulty` and `task_types` filter generated problems only.

A reasoning-gym source (`reasoning_gym:<name>,...`, `envs/datasets/reasoning_gym.py`) may stand wherever a file
does. It serves every split itself, from disjoint seed ranges and disjoint questions: train `size` problems per
dataset, test and valid `eval_size` each, so a test split served from `dataset` is held out, not the training
problems. Its tasks: task_id "reasoning_gym:<name>:<split>:<k>", task_type the dataset's name, answer the oracle
answer as text, and `scorer` the dataset's own `score_answer` on the task's entry. `dataset_format`,
`dataset_fields` and `dataset_split_field` are for files only.

Grading is `score(task, answer)`, the one place that picks a task's grader: its source's `scorer` where it brings
one, else math-verify against the gold (`envs.tir.grading.grade`, 1.0 or 0.0). Both math envs reward that score and
count a success at full credit (`FULL_CREDIT`).

A row whose gold answer math-verify cannot grade (`envs.datasets.gradability`) is served like any other and
graded as a string (`envs.tir.grading.grade`); the split lists it in `FileSplit.ungradable`, a warning names the
first few rows once per load, and `alprl eval`'s summary names every such row it played.

Each file is loaded once per process (cached by path, modification time, size and layout options), not once per
env: a trainer builds prompts_per_step × group_size envs, and config validation loads the same files first.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from envs.datasets import load_dataset
from envs.datasets import reasoning_gym as rg
from envs.splits import SPLIT_RANGES, SPLIT_SIZES, check_split
from envs.tir.grading import grade
from envs.tir.tasks import TIRTask, generate_task, task_from_id

TRAIN_INDEX_SPAN = 2**31
"""`reset()` without an index draws generated train indices from [1500, 1500 + 2^31)."""
SPLIT_FIELD_VALUES: dict[str, tuple[str, ...]] = {"train": ("train",), "test": ("test",),
                                                  "valid": ("valid", "validation")}
"""The `dataset_split_field` values that put a row in each split."""
DATASET_DIFFICULTY = 0
"""`TIRTask.difficulty` of a dataset problem (files carry no common difficulty scale)."""
FULL_CREDIT = rg.FULL_CREDIT
"""The score that counts as a success (`won`); math-verify's verdicts are 1.0 or 0.0."""

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class UngradableRow:
    """A problem whose gold answer is graded as a string. index: its position in the split (the task index of
    evaluation records); row: the file's 1-based row number, as load errors count rows; reason: why."""

    index: int
    row: int
    reason: str


@dataclass(frozen=True)
class FileSplit:
    """One split's problems read from one file: `tasks` in file order, `by_id` task_id → position, `ungradable`
    the problems graded as strings, in file order."""

    path: str
    tasks: tuple[TIRTask, ...]
    by_id: dict[str, int]
    ungradable: tuple[UngradableRow, ...] = ()


_CACHE: dict[tuple, FileSplit] = {}
_CACHE_LOCK = threading.Lock()
_WARNED: set[str] = set()


def _task_ids(stem: str, problem_ids: Sequence[str]) -> list[str]:
    """Stable, unique task ids "<stem>:<problem id>" (the loader's fallback id already starts with the stem)."""
    seen: dict[str, int] = {}
    out = []
    for pid in problem_ids:
        base = pid if pid.startswith(f"{stem}:") else f"{stem}:{pid}"
        seen[base] = seen.get(base, 0) + 1
        out.append(base if seen[base] == 1 else f"{base}#{seen[base]}")
    return out


def load_split(path: str, *, format: str = "", fields: Mapping[str, str] | None = None, split_field: str = "",
               values: tuple[str, ...] | None = None) -> FileSplit:
    """The problems of `path` (rows whose `split_field` is one of `values`, or every row) as tasks; cached per
    process. Raises `envs.datasets.DatasetError` (one line naming file, row and field) for a file it cannot use."""
    resolved = Path(path).expanduser().resolve()
    try:
        stat = resolved.stat()
        stamp = (stat.st_mtime_ns, stat.st_size)
    except OSError:
        stamp = None  # load_dataset reports the missing file
    key = (str(resolved), stamp, format.lower(), tuple(sorted((fields or {}).items())), split_field, values)
    with _CACHE_LOCK:  # one load per key, also when envs are built from several threads
        if key not in _CACHE:
            problems = load_dataset(resolved, format=format or None, fields=dict(fields) if fields else None,
                                    split_field=split_field or None, split=values if split_field else None)
            ids = _task_ids(Path(path).stem, [p.id for p in problems])
            tasks = tuple(TIRTask(tid, p.source, DATASET_DIFFICULTY, p.question, p.answer, "")
                          for tid, p in zip(ids, problems, strict=True))
            ungradable = tuple(UngradableRow(i, p.row, p.ungradable) for i, p in enumerate(problems) if p.ungradable)
            if ungradable:
                _warn_ungradable(str(path), ungradable)
            _CACHE[key] = FileSplit(str(path), tasks, {t.task_id: i for i, t in enumerate(tasks)}, ungradable)
        return _CACHE[key]


def rg_split(source: str, split: str, options: rg.RGOptions) -> FileSplit:
    """The problems of `split` of a reasoning-gym source as tasks graded by their own scorer; cached per process
    (the generation itself is cached in `envs.datasets.reasoning_gym`)."""
    key = (source, split, json.dumps(dataclasses.asdict(options), sort_keys=True, default=repr))
    with _CACHE_LOCK:
        if key not in _CACHE:
            tasks = tuple(TIRTask(p.id, p.name, DATASET_DIFFICULTY, p.question, p.answer, "", scorer=p.score)
                          for p in rg.load_split(source, split, options))
            _CACHE[key] = FileSplit(source, tasks, {t.task_id: i for i, t in enumerate(tasks)})
        return _CACHE[key]


def score(task: TIRTask, answer: str | None) -> float:
    """The reward of an extracted answer (None: the reply has no complete box) on `task`, by its source's grader
    (module docstring); in [0, 1], and never raises."""
    if task.scorer is not None:
        return task.scorer(answer)
    return float(grade(answer, task.answer))


def _warn_ungradable(path: str, rows: Sequence[UngradableRow], shown: int = 5) -> None:
    named = "; ".join(f"row {r.row}: {r.reason}" for r in rows[:shown])
    more = f"; and {len(rows) - shown} more" if len(rows) > shown else ""
    log.warning("%s: %d gold answer(s) math-verify cannot grade are compared as strings: %s%s", path, len(rows),
                named, more)


class ProblemSource:
    """The problems of every split, generated or read from files (see the module docstring).

    dataset, eval_dataset: local JSONL / JSON / parquet files in any layout of `envs.datasets` ("" = none).
    dataset_format: a layout name for both files ("" = detected); dataset_fields: role → column overrides.
    dataset_split_field: the column (dotted path allowed) that splits `dataset` into train / test / valid rows.
    Either file may be a reasoning-gym source instead (`reasoning_gym:<name>,...`), drawn as `reasoning_gym` says
    (a mapping with keys among size, eval_size, seed, config; `envs.datasets.reasoning_gym.RGOptions`).
    difficulty, task_types: filters of generated problems (`envs.tir.tasks.generate_task`).
    """

    def __init__(self, *, dataset: str = "", eval_dataset: str = "", dataset_format: str = "",
                 dataset_split_field: str = "", dataset_fields: Mapping[str, str] | None = None,
                 reasoning_gym: rg.RGOptions | Mapping[str, Any] | None = None,
                 difficulty: int | None = None, task_types: Sequence[str] | None = None):
        if dataset_split_field and not dataset:
            raise ValueError(f"dataset_split_field={dataset_split_field!r} splits `dataset`, which is not set")
        if dataset_split_field and rg.is_spec(dataset):
            raise ValueError(f"dataset_split_field={dataset_split_field!r} splits a file; {dataset!r} draws its "
                             "splits itself")
        for source in (dataset, eval_dataset):
            if rg.is_spec(source):
                rg.parse_spec(source)  # an unknown name is one line when the env is made, not at its first reset
        self.rg_options = rg.RGOptions.of(reasoning_gym)
        self.dataset, self.eval_dataset = str(dataset or ""), str(eval_dataset or "")
        self.format, self.split_field = str(dataset_format or ""), str(dataset_split_field or "")
        self.fields = dict(dataset_fields or {})
        self.difficulty = difficulty
        self.task_types = tuple(task_types) if task_types else None
        generate_task("test", 0, difficulty=difficulty, task_types=self.task_types)  # validates the filters

    # ------------------------------------------------------------------ which file serves a split

    def file_of(self, split: str) -> str:
        """The file that serves `split`, "" if it is generated."""
        check_split(split)
        if split == "test" and self.eval_dataset:
            return self.eval_dataset
        return self.dataset

    def split(self, split: str) -> FileSplit | None:
        """The split's problems read from its file (None: generated)."""
        path = self.file_of(split)
        if not path:
            return None
        if rg.is_spec(path):
            return rg_split(path, split, self.rg_options)
        if path == self.eval_dataset and split == "test":
            return load_split(path, format=self.format, fields=self.fields)
        if not self.split_field:
            if split == "valid":
                raise ValueError(f"split 'valid' of {path}: a dataset file has a validation split only with "
                                 "dataset_split_field (rows whose value is valid or validation)")
            return load_split(path, format=self.format, fields=self.fields)
        return load_split(path, format=self.format, fields=self.fields, split_field=self.split_field,
                          values=SPLIT_FIELD_VALUES[split])

    def size(self, split: str) -> int | None:
        """Number of problems in `split`; None for the open-ended generated train split."""
        served = self.split(split)
        return len(served.tasks) if served is not None else SPLIT_SIZES[split]

    # ------------------------------------------------------------------ the task of a reset

    def pick(self, options: Mapping[str, Any], default_split: str, rng: np.random.Generator) -> TIRTask:
        """The task of a reset: from `task_id`, from `index` (generated: global; file: position), or drawn from
        `rng`; `task_type` restricts this reset to one type (a file's problems: to one source)."""
        if "task_id" in options:
            return self.task_by_id(str(options["task_id"]))
        split = options.get("split", default_split)
        if split not in SPLIT_RANGES:
            raise ValueError(f"unknown options['split'] {split!r}; valid: {', '.join(map(repr, SPLIT_RANGES))}")
        index = options.get("index")
        if index is not None and (isinstance(index, bool) or not isinstance(index, int | np.integer)):
            raise ValueError(f"reset option 'index' must be an int task index, got {index!r}")
        task_type = options.get("task_type") or None
        served = self.split(split)
        if served is None:
            return self._generated(split, None if index is None else int(index), task_type, rng)
        tasks = served.tasks
        if task_type is not None:
            tasks = tuple(t for t in tasks if t.task_type == task_type)
            if not tasks:
                sources = sorted({t.task_type for t in served.tasks})
                raise ValueError(f"no {split} problem of {served.path} has task_type {task_type!r}; its task "
                                 f"types (sources): {', '.join(sources)}")
        if index is None:
            index = int(rng.integers(0, len(tasks)))
        if not 0 <= index < len(tasks):
            raise ValueError(f"index {int(index)} is outside the {split} split of {served.path} ({len(tasks)} "
                             f"problems: indices 0..{len(tasks) - 1})")
        self._note_training_problems(split)
        return tasks[int(index)]

    def _generated(self, split: str, index: int | None, task_type: str | None,
                   rng: np.random.Generator) -> TIRTask:
        if index is None:
            lo, hi = SPLIT_RANGES[split]
            index = int(rng.integers(lo, hi if hi is not None else lo + TRAIN_INDEX_SPAN))
        types = (task_type,) if task_type else self.task_types
        return generate_task(split, index, difficulty=self.difficulty, task_types=types)

    def task_by_id(self, task_id: str) -> TIRTask:
        """The task with this id (as in `info["task_id"]`): a file's or reasoning-gym's problem, or a generated
        task."""
        for split in SPLIT_RANGES:
            path = self.file_of(split)
            if path and (split != "valid" or self.split_field or rg.is_spec(path)):
                served = self.split(split)
                if task_id in served.by_id:
                    return served.tasks[served.by_id[task_id]]
        return task_from_id(task_id)

    def _note_training_problems(self, split: str) -> None:
        if split == "test" and not self.eval_dataset and not self.split_field and self.dataset not in _WARNED \
                and not rg.is_spec(self.dataset):  # a reasoning-gym test split is held out
            _WARNED.add(self.dataset)
            log.warning("the test split serves the training file %s (no eval_dataset, no dataset_split_field): "
                        "evaluation runs on training problems", self.dataset)
