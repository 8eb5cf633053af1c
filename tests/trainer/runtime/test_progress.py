"""Progress in a log: without a terminal, the bar's calls print a line per tenth of the work and at the end."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
from trainer.runtime.progress import progress_bar
with progress_bar("RL", total=30, completed=0) as bar:
    for step in range(30):
        bar.advance(reward=step / 10, loss=0.5)
"""


def test_a_log_gets_one_line_per_tenth_of_the_work():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[1] for line in lines] == [f"{n}/30" for n in range(3, 31, 3)]
    assert lines[-1].startswith("RL 30/30  00:00:0") and lines[-1].endswith("reward=2.900  loss=0.500")
    assert "━" not in done.stdout  # no bar redrawn into the file


def test_a_resumed_count_starts_where_it_was():
    script = SCRIPT.replace("completed=0", "completed=20").replace("range(30)", "range(10)")
    lines = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60).stdout
    assert [line.split()[1] for line in lines.splitlines()] == ["21/30", "24/30", "27/30", "30/30"]
