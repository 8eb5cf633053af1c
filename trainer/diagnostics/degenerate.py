"""When a run learns nothing: every GRPO group degenerate for several steps in a row.

A group whose members all got the same reward has advantage 0 for each (`adv/degenerate_group_frac` counts them,
trainer/objective/advantages.py), so a step whose every group is degenerate updates nothing but its KL and
entropy terms: a warm start that never succeeds (or always does), a reward that cannot vary, a broken harness. Such
a run otherwise goes on and exits 0. After every step the loop asks `DegenerateWatch.after_step`:

- `degenerate_patience` consecutive steps with every group degenerate (0: never checked) print one line, once a
  streak, naming the steps and the reward every group had;
- with `fail_on_degenerate` (`alprl train --fail-on-degenerate`) that line stops the run instead: the loop saves the
  step's checkpoint and raises `DegenerateRun`, and `alprl train` exits with `EXIT_DEGENERATE`.

The streak is not saved: a resumed run counts from 0. Estimators without groups (none log the metric) are not
checked.
"""

from __future__ import annotations

from dataclasses import dataclass

EXIT_DEGENERATE = 6
"""`alprl train`'s exit status when the run stopped on degenerate groups (`fail_on_degenerate`; app/cli.py)."""
DEGENERATE_KEY = "adv/degenerate_group_frac"


class DegenerateRun(RuntimeError):
    """The run stopped because every group was degenerate for `degenerate_patience` steps; one line says so."""


@dataclass
class DegenerateWatch:
    """Consecutive steps with every group degenerate (module docstring)."""

    patience: int
    fail: bool
    streak: int = 0

    def after_step(self, step: int, metrics: dict[str, float]) -> tuple[str | None, str | None]:
        """(a warning line, a stop line): at most one, on the step the streak reaches `patience`."""
        frac = metrics.get(DEGENERATE_KEY)
        self.streak = self.streak + 1 if frac is not None and frac >= 1.0 else 0
        if not self.patience or self.streak != self.patience:
            return None, None
        reward = metrics.get("rollout/reward")
        line = (f"every GRPO group was degenerate for {self.streak} steps in a row (steps {step - self.streak + 1}-"
                f"{step}: all members of each group had one reward" + (f", mean {reward:.3f}" if reward is not None
                                                                       else "") +
                "), so these updates had no learning signal: check that the warm start can sometimes succeed and "
                "fail, and that the reward varies")
        if self.fail:
            return None, f"{line}; the checkpoint of step {step} is kept (--fail-on-degenerate)"
        return f"{line} (degenerate_patience={self.patience}; --fail-on-degenerate stops the run)", None
