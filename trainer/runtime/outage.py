"""When the infrastructure keeps failing a run's episodes: a warning for each step over the bound, a stop after too
many in a row.

An episode the infrastructure failed (agents/rollout.py says which: a tool call the sandbox could not run after the
client's retries, `env.sandbox_retry_s`; a request the engine failed; a harness that raised; the rollout call's
timeout; a context filled by tokens the policy did not sample) trains on none of its tokens
(trainer/objective/infra_failures.py), and `rollout/infra_frac` is their share of the step's episodes. A step over
`rollout.max_infra_frac` rests its update on what is left, and an outage leaves nothing: a run whose sandbox died
would go on with grad norm 0 and exit 0. So after every step the loop asks `OutageWatch.after_step`:

- a step over the bound prints one warning line naming the kinds (`INFRA_KINDS`) and their counts, and its metrics
  record gets `rollout/infra_over_bound` = 1 (the run report lists those steps);
- `rollout.infra_patience` consecutive such steps (0: never) stop the run: the loop saves a checkpoint of the step
  it just finished and raises `InfraOutage` (its one line replaces that step's warning); `alprl train` prints it
  and exits with `EXIT_INFRA_OUTAGE`, and `--resume` continues from that checkpoint once the service is back.

The count of such steps is not saved: a resumed run starts it from 0. A sandbox that is not there when the run starts
is refused before anything is built (trainer/setup/sandbox_check.py); this watch is for one that goes away later.
"""

from __future__ import annotations

from dataclasses import dataclass, field

EXIT_INFRA_OUTAGE = 4
"""`alprl train`'s exit status when the run stopped because the infrastructure kept failing its episodes
(app/cli.py)."""

INFRA_KINDS = {"sandbox_error": "sandbox", "engine_error": "engine", "harness_error": "harness",
               "episode_timeout": "timeout", "context_overflow": "context"}
"""Each reason of `agents.trajectory.INFRA_FAILURE_REASONS` by the name the warning gives its kind (a test keeps the
two in step)."""

OVER_BOUND_KEY = "rollout/infra_over_bound"
"""The metric that marks a step over `rollout.max_infra_frac` (1.0; else 0.0)."""


class InfraOutage(RuntimeError):
    """The run stopped on an outage; the message is one line naming what failed, the kept step and the way out."""


@dataclass(frozen=True)
class StepCheck:
    """What `OutageWatch.after_step` makes of one step: the metrics to log with it, and at most one of a warning
    line and the stop line."""

    metrics: dict[str, float] = field(default_factory=dict)
    warning: str | None = None
    stop: str | None = None


@dataclass
class OutageWatch:
    """Consecutive steps whose `rollout/infra_frac` is above `max_frac`; the stop after `patience` of them
    (0: never). `sandbox_url` and `harness` name where a sandbox or harness failure points."""

    max_frac: float
    patience: int
    sandbox_url: str = ""
    harness: str = ""
    over: int = 0

    def after_step(self, step: int, metrics: dict[str, float]) -> StepCheck:
        frac = metrics.get("rollout/infra_frac", 0.0)
        counts = {kind: metrics.get(f"rollout/infra_failures/{reason}", 0.0) for reason, kind in INFRA_KINDS.items()}
        over = frac > self.max_frac
        self.over = self.over + 1 if over else 0
        marks = {OVER_BOUND_KEY: float(over)}
        if not over:
            return StepCheck(marks)
        kind = max(counts, key=counts.__getitem__)  # the largest share names what failed and the way out
        failed = (f"{self._who(kind)} failed {frac:.0%} of step {step}'s episodes "
                  f"({', '.join(f'{k} {n:g}' for k, n in counts.items() if n)}), over "
                  f"rollout.max_infra_frac={self.max_frac:g}")
        if self.patience and self.over >= self.patience:
            steps = f"{self.over} steps in a row" if self.over > 1 else "1 step"
            return StepCheck(marks, stop=f"{failed}, {steps} (rollout.infra_patience={self.patience}); the "
                                         f"checkpoint of step {step} is kept: {self._way_out(kind)}, then rerun "
                                         "with --resume (rollout.infra_patience=0 never stops)")
        stops = (f"the run stops after {self.patience} such steps in a row (rollout.infra_patience), this is "
                 f"{self.over}" if self.patience else "rollout.infra_patience=0: the run goes on")
        return StepCheck(marks, warning=f"{failed}; they are left out of the loss: {self._way_out(kind)}; {stops}")

    def _who(self, kind: str) -> str:
        urls = self.sandbox_url.strip()
        return {"sandbox": f"the sandbox at {urls}" if urls else
                "the in-process sandbox executor (env.sandbox_url empty)",
                "engine": "the engine", "harness": f"the harness {self.harness or '(env.harness)'}",
                "timeout": "the rollout's wall clock (rollout.episode_timeout_s)",
                "context": "the engine's context"}[kind]

    def _way_out(self, kind: str) -> str:
        urls = self.sandbox_url.strip()
        first = urls.split(",")[0].strip()
        return {"sandbox": f"check that it answers (curl {first}/v1/ping) or restart it" if urls else
                "check the machine's processes and memory",
                "engine": "check the engine's log for the requests it aborted",
                "harness": "check what it raised (each failed episode's info['harness_error'])",
                "timeout": "the engine or the sandbox is too slow for the batch: check their load, or raise "
                           "rollout.episode_timeout_s",
                "context": "observations or prompts fill it: lower rollout.max_obs_tokens or raise "
                           "rollout.max_model_len"}[kind]
