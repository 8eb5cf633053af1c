"""When the sandbox service is down: count the steps whose episodes hit it, and stop the run after too many.

A tool call that comes back SandboxError (the client's retries across `env.sandbox_url` spent, `env.sandbox_retry_s`)
is the service's failure, not the policy's: the rollout ends and masks that episode (agents/rollout.py) and
`rollout/sandbox_errors` counts such episodes per step (trainer/diagnostics/rollout_metrics.py). Training on an outage is a no-op at
best, so after `env.sandbox_max_failing_steps` consecutive steps with such episodes (0: never) the loop saves a
checkpoint of the step it just finished and raises `SandboxOutage`; `alprl train` prints its one-line message and
exits with `EXIT_SANDBOX_DOWN`, and `--resume` continues from that checkpoint once the service answers again.
The count of failing steps is not saved: a resumed run starts it from 0.
"""

from __future__ import annotations

from dataclasses import dataclass

EXIT_SANDBOX_DOWN = 4
"""`alprl train`'s exit status when the run stopped because the sandbox kept failing (app/cli.py)."""


class SandboxOutage(RuntimeError):
    """The run stopped on a sandbox outage; the message is one line naming the URL(s) and the way out."""


@dataclass
class OutageWatch:
    """Consecutive steps with `rollout/sandbox_errors` > 0; `after_step` gives the stop message when they reach
    `max_failing_steps` (0: never)."""

    max_failing_steps: int
    sandbox_url: str = ""
    failing: int = 0

    def after_step(self, step: int, metrics: dict[str, float]) -> str | None:
        errors = metrics.get("rollout/sandbox_errors", 0.0)
        self.failing = self.failing + 1 if errors > 0 else 0
        if not self.max_failing_steps or self.failing < self.max_failing_steps:
            return None
        urls = self.sandbox_url.strip()
        where = f"the sandbox at {urls}" if urls else "the in-process sandbox executor (env.sandbox_url empty)"
        check = f"check that it answers (curl {urls.split(',')[0].strip()}/v1/ping) or restart it" if urls else \
            "check the machine's processes and memory"
        steps = f"{self.failing} consecutive steps" if self.failing > 1 else "a step"
        return (f"{where} failed tool calls in {steps} (step {step}: {errors:g} episodes, "
                f"left out of the loss); the checkpoint of step {step} is kept: {check}, then rerun with --resume "
                f"(env.sandbox_max_failing_steps=0 never stops)")
