"""When and where the HTTP clients try again: endpoint rotation, the retry policy, and the retry loop itself
(`RetryLoop`, written once for the sync and the async client).

Retry rules (reference/sandbox.md §5, "alprl's own client"): connection errors, 429, 5xx and SandboxError
answers are retried with jittered exponential backoff (at least the server's Retry-After); a Failed or
TimeLimitExceeded result is an answer, never retried. Session cells are not idempotent: they are retried
only when the request cannot have reached the interpreter (connection refused, 429).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
DOWN_FOR_S = 5.0  # an endpoint that refused a connection is skipped this long


def parse_urls(urls: str | list[str] | tuple[str, ...]) -> list[str]:
    items = urls.split(",") if isinstance(urls, str) else list(urls)
    cleaned = [u.strip().rstrip("/") for u in items if u and u.strip()]
    for url in cleaned:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"sandbox url {url!r} must start with http:// or https:// "
                             "(e.g. sandbox.url=http://127.0.0.1:8080, comma-separate several)")
        if url.endswith("/run_code"):
            raise ValueError(f"sandbox url {url!r}: give the base URL without /run_code")
    if not cleaned:
        raise ValueError("no sandbox url given")
    return cleaned


class Endpoints:
    """Round-robin over base URLs, skipping ones that recently refused connections (thread-safe)."""

    def __init__(self, urls: list[str]):
        self.urls = urls
        self._next = 0
        self._down_until = dict.fromkeys(urls, 0.0)
        self._lock = threading.Lock()

    def pick(self) -> str:
        with self._lock:
            now = time.monotonic()
            for _ in range(len(self.urls)):
                url = self.urls[self._next % len(self.urls)]
                self._next += 1
                if self._down_until[url] <= now:
                    return url
            return min(self.urls, key=self._down_until.__getitem__)  # all down: try the one back soonest

    def mark_down(self, url: str) -> None:
        with self._lock:
            self._down_until[url] = time.monotonic() + DOWN_FOR_S


@dataclass(frozen=True)
class RetryPolicy:
    """attempts: total tries. Delay before try k (k ≥ 1): min(max_s, base_s·2^(k-1)) × U(0.5, 1.5).

    budget_s: None = `attempts` tries; a number = keep retrying (however many tries) while the time since the first
    try plus the next delay stays within budget_s seconds (0: one try). One try can itself take up to its HTTP
    timeout, so a call may end up to one request timeout past the budget.
    """

    attempts: int = 5
    base_s: float = 0.05
    max_s: float = 2.0
    budget_s: float | None = None

    def again(self, attempt: int, elapsed_s: float, delay_s: float) -> bool:
        """Whether to make try `attempt + 1` after `elapsed_s` seconds and a `delay_s` wait."""
        if self.budget_s is None:
            return attempt < self.attempts
        return elapsed_s + delay_s <= self.budget_s

    def delay(self, attempt: int, retry_after: str | None = None) -> float:
        backoff = min(self.max_s, self.base_s * 2 ** (attempt - 1)) * random.uniform(0.5, 1.5)
        if retry_after and retry_after.isdigit():
            backoff = max(backoff, min(float(retry_after), self.max_s * 4))
        return backoff


# (retry?, error text, Retry-After) for one try's answer (`response`) or exception: see `_Base._classify`
Verdict = tuple[bool, str, str | None]


class RetryLoop:
    """One logical call's tries: the client's retry loop, written once for the sync and the async client.

    Iterate it for the base URL of each try (`url`, else the next live endpoint); after each try hand `settle` what
    came back. It answers the seconds to wait before the next try, or None once the call is over: an answer that
    is not to be retried, or the policy's tries or budget spent. `outcome` is then (final response or None, last
    error text). A driver, sync or async alike:

        loop = RetryLoop(...)
        for base in loop:
            response, error = send(base)                                 # `await` in the async client
            if (delay := loop.settle(base, response, error)) is not None:
                sleep(delay)                                             # `await asyncio.sleep(delay)`
        return loop.outcome
    """

    def __init__(self, endpoints: Endpoints, policy: RetryPolicy,
                 classify: Callable[[str, Any, Exception | None], Verdict], url: str | None = None):
        self.endpoints, self.policy, self.classify, self.url = endpoints, policy, classify, url
        self.attempt = 0
        self.started = time.monotonic()
        self.outcome: tuple[Any, str] | None = None

    def __iter__(self) -> Iterator[str]:
        while self.outcome is None:
            self.attempt += 1
            yield self.url or self.endpoints.pick()

    def settle(self, base: str, response, error: Exception | None) -> float | None:
        """Record try `attempt`'s answer (`response`, or the exception it raised): the wait before the next try, or
        None when the call is over (`outcome` set)."""
        again, text, retry_after = self.classify(base, response, error)
        if not again:
            self.outcome = (response, "") if response is not None else (None, text)
            return None
        delay = self.policy.delay(self.attempt, retry_after)
        if self.policy.again(self.attempt, time.monotonic() - self.started, delay):
            return delay
        last = f"{text} ({self.attempt} tries in {time.monotonic() - self.started:.1f} s)"
        self.outcome = (response if response is not None and response.status_code == 200 else None), last
        return None
