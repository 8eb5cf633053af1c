"""A small rich progress bar that shows the latest scalar values next to the bar."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class _Bar:
    def __init__(self, progress: Progress | None, task: int | None):
        self.progress, self.task = progress, task

    def advance(self, n: int = 1, **values: float) -> None:
        if self.progress is None:
            return
        text = "  ".join(f"{k}={v:.3f}" for k, v in values.items())
        self.progress.update(self.task, advance=n, values=text)


@contextmanager
def progress_bar(label: str, total: int, completed: int = 0, enabled: bool = True) -> Iterator[_Bar]:
    if not enabled:
        yield _Bar(None, None)
        return
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.fields[values]}")]
    with Progress(*columns, transient=False) as progress:
        task = progress.add_task(label, total=total, completed=completed, values="")
        yield _Bar(progress, task)
