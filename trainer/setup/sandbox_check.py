"""Whether the configured sandbox service can serve a run, asked before anything expensive starts.

A run whose `env.sandbox_url` is not there still plays its episodes: every tool call comes back SandboxError once
the client's retries are spent, every episode leaves the loss, the update has grad norm 0, and the command exits 0
having trained on nothing. So every command that plays episodes (`alprl train`, `demo`, `experiment`, `eval`,
`robustness`) asks `sandbox_problem` first, before it loads a model or writes a file: each endpoint of the URL must
answer `GET /v1/ping` and accept this process's API key (`SANDBOX_API_KEY`), which is checked on `GET /v1/info`
because the key guards every route but the ping (sandbox/service/auth.py; a SandboxFusion server has no keys and
answers 404 there, which passes). What it finds is one line naming the URL and the way out: start the service, or
drop `env.sandbox_url` for the in-process executor. A service that goes away during a run is
trainer/runtime/outage.py's.

One exception, `evaluation_sandbox`: a checkpoint's own run config may name a service that served its run alone
and is gone for good (`alprl demo` starts one for the run); evaluating it then runs code in-process with a warning,
the same executor core the service runs. A URL stated on the command line is checked like a run's.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from sandbox.client import RetryPolicy, SandboxAuthError, SandboxClient
from sandbox.client.http_client import shown_url
from sandbox.client.retry import parse_urls
from trainer.config.errors import ConfigError
from trainer.config.train_config import TrainConfig

PROBE = RetryPolicy(attempts=2)
"""Tries of each probe request: a refused connection fails at once, and a second try rides out a server that is
just restarting; a host that drops packets costs the client's connect timeout per try."""
IN_PROCESS = "or drop env.sandbox_url to run code in-process (env.sandbox_url=)"


@dataclass(frozen=True)
class SandboxProblem:
    """An endpoint that cannot serve: `down` (no answer to the ping) or refusing this process's API key."""

    url: str
    down: bool
    why: str

    def line(self) -> str:
        """The one line a command prints: the URL, what is wrong, and the way out."""
        if not self.down:
            return f"env.sandbox_url: {self.why}, {IN_PROCESS}"
        parts = urlsplit(self.url)
        serve = "alprl sandbox serve" + (f" --port {parts.port}" if parts.port else "")
        where = "" if parts.hostname in ("127.0.0.1", "localhost", "::1") else f" on {parts.hostname}"
        return (f"env.sandbox_url: the sandbox at {shown_url(self.url)} does not answer ({self.why}): start it "
                f"({serve}{where}) {IN_PROCESS}")


def sandbox_problem(urls: str) -> SandboxProblem | None:
    """The first endpoint of `urls` (comma separated) that does not answer or refuses the key, else None."""
    for url in parse_urls(urls):
        client = SandboxClient(url, retry=PROBE)
        try:
            resp, error = client.request("GET", "/v1/ping", timeout_s=0.0)
            if resp is None:
                return SandboxProblem(url, True, f"GET /v1/ping: {error.split(': ', 1)[-1]}")
            if resp.status_code != 200:
                return SandboxProblem(url, True, f"GET /v1/ping answered HTTP {resp.status_code}; is it a sandbox?")
            client.request("GET", "/v1/info", timeout_s=0.0)  # a key it refuses raises SandboxAuthError
        except SandboxAuthError:
            state = "the one SANDBOX_API_KEY holds" if client.api_key else "none: SANDBOX_API_KEY is not set"
            return SandboxProblem(url, False, f"the sandbox at {shown_url(url)} refuses this process's API key "
                                  f"({state}; HTTP 401): set SANDBOX_API_KEY to one of the server's keys")
        finally:
            client.close()
    return None


def check_run_sandbox(cfg: TrainConfig) -> None:
    """Raise ConfigError with the one line when `env.sandbox_url` is set and cannot serve the run."""
    problem = sandbox_problem(cfg.env.sandbox_url) if cfg.env.sandbox_url else None
    if problem is not None:
        raise ConfigError(problem.line())


def states_sandbox_url(overrides: list[str] | tuple[str, ...]) -> bool:
    """Whether key=value `overrides` set `env.sandbox_url` themselves."""
    return any(o.partition("=")[0].strip() == "env.sandbox_url" for o in overrides)


def evaluation_sandbox(cfg: TrainConfig, stated: bool) -> str | None:
    """`alprl eval` and `alprl robustness`: `check_run_sandbox` for a URL the command line `stated`; the run's own
    URL, read back from its checkpoint, that does not answer: code runs in-process (`cfg.env.sandbox_url` emptied in
    place) and the warning to print is returned. A key the service refuses is refused either way: the service is
    there, the key is wrong."""
    problem = sandbox_problem(cfg.env.sandbox_url) if cfg.env.sandbox_url else None
    if problem is None:
        return None
    if stated or not problem.down:
        raise ConfigError(problem.line())
    url, cfg.env.sandbox_url = ", ".join(shown_url(u) for u in parse_urls(cfg.env.sandbox_url)), ""
    return (f"the run's sandbox service {url} does not answer: code runs in-process (the same executor); start the "
            "service or pass env.sandbox_url=<url> to use one")
