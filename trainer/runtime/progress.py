"""Progress of long work: a rich bar with the latest scalar values on a terminal, plain lines in a log.

A rich bar redraws in place, which a log file (`alprl train ... > run.log`, a scheduler's output) cannot show: there
only its final state would appear, at the end. So when the console is not a terminal, the same calls print one line
per `LOG_EVERY_FRACTION` of the work (and at the end), each with the count, elapsed time and latest values.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

LOG_EVERY_FRACTION = 0.1


def _values(values: dict[str, float]) -> str:
    return "  ".join(f"{k}={v:.3f}" for k, v in values.items())


class _Bar:
    def __init__(self, progress: Progress | None, task: int | None):
        self.progress, self.task = progress, task

    def advance(self, n: int = 1, **values: float) -> None:
        if self.progress is None:
            return
        self.progress.update(self.task, advance=n, values=_values(values))


class _LogLines:
    """The bar's interface for a console that is not a terminal: a line at every tenth of the work and at the end."""

    def __init__(self, console: Console, label: str, total: int, completed: int):
        self.console, self.label, self.total, self.done = console, label, total, completed
        self.start = time.monotonic()
        self.every = max(1, round(total * LOG_EVERY_FRACTION))

    def advance(self, n: int = 1, **values: float) -> None:
        before, self.done = self.done, self.done + n
        if self.done // self.every > before // self.every or self.done >= self.total:
            elapsed = time.strftime("%H:%M:%S", time.gmtime(time.monotonic() - self.start))
            self.console.print(f"{self.label} {self.done}/{self.total}  {elapsed}  {_values(values)}".rstrip(),
                               highlight=False, soft_wrap=True)


@contextmanager
def progress_bar(label: str, total: int, completed: int = 0, enabled: bool = True,
                 lines_every_step: bool = False) -> Iterator[_Bar | _LogLines]:
    """A bar on a terminal, lines at every tenth of the work in a log; disabled, nothing, or with
    `lines_every_step` one plain line per unit of work (`alprl train --no-progress`)."""
    if not enabled:
        if lines_every_step:
            lines = _LogLines(Console(), label, total, completed)
            lines.every = 1
            yield lines
        else:
            yield _Bar(None, None)
        return
    console = Console()
    if not console.is_terminal:
        yield _LogLines(console, label, total, completed)
        return
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.fields[values]}")]
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(label, total=total, completed=completed, values="")
        yield _Bar(progress, task)
