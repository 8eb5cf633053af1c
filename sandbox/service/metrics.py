"""Prometheus text-format metrics (exposition format 0.0.4), kept in-process; no client library needed.

Exposed at `GET /metrics`: request counts and a latency histogram per route, execution outcomes, kills by
reason, and gauges (queue depth, in flight, idle workers, sessions) read at scrape time.
"""

from __future__ import annotations

import re
import threading
import time
from collections import defaultdict
from collections.abc import Callable

LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_SESSION_PATH = re.compile(r"^/sessions/[^/]+")
KNOWN_ROUTES = {"/run_code", "/execute", "/v1/ping", "/v1/info", "/healthz", "/metrics", "/sessions",
                "/sessions/{id}", "/sessions/{id}/execute"}


def route_label(path: str) -> str:
    """Bounded label set: session ids are collapsed, unknown paths become "other"."""
    path = _SESSION_PATH.sub("/sessions/{id}", path)
    return path if path in KNOWN_ROUTES else "other"


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, str], int] = defaultdict(int)
        self.latency: dict[str, list[int]] = defaultdict(lambda: [0] * (len(LATENCY_BUCKETS_S) + 1))
        self.latency_sum: dict[str, float] = defaultdict(float)
        self.executions: dict[str, int] = defaultdict(int)
        self.kills: dict[str, int] = defaultdict(int)
        self.gauges: dict[str, tuple[str, Callable[[], float]]] = {}
        self.started = time.time()

    def observe_request(self, route: str, status: int, seconds: float) -> None:
        with self._lock:
            self.requests[(route, str(status))] += 1
            buckets = self.latency[route]
            for i, bound in enumerate(LATENCY_BUCKETS_S):
                if seconds <= bound:
                    buckets[i] += 1
                    break
            else:
                buckets[-1] += 1
            self.latency_sum[route] += seconds

    def observe_execution(self, status: str, killed_reason: str | None) -> None:
        with self._lock:
            self.executions[status] += 1
            if killed_reason:
                self.kills[killed_reason] += 1

    def gauge(self, name: str, doc: str, read: Callable[[], float]) -> None:
        self.gauges[name] = (doc, read)

    def render(self) -> str:
        lines: list[str] = []
        with self._lock:
            _family(lines, "sandbox_requests_total", "counter", "HTTP requests by route and status code",
                    [({"route": r, "code": c}, v) for (r, c), v in sorted(self.requests.items())])
            lines += ["# HELP sandbox_request_seconds HTTP request latency", "# TYPE sandbox_request_seconds histogram"]
            for route, buckets in sorted(self.latency.items()):
                cumulative = 0
                for bound, count in zip((*LATENCY_BUCKETS_S, float("inf")), buckets, strict=True):
                    cumulative += count
                    le = "+Inf" if bound == float("inf") else repr(bound)
                    lines.append(f'sandbox_request_seconds_bucket{{route="{route}",le="{le}"}} {cumulative}')
                lines.append(f'sandbox_request_seconds_sum{{route="{route}"}} {self.latency_sum[route]:.6f}')
                lines.append(f'sandbox_request_seconds_count{{route="{route}"}} {cumulative}')
            _family(lines, "sandbox_executions_total", "counter", "executions by result status",
                    [({"status": s}, v) for s, v in sorted(self.executions.items())])
            _family(lines, "sandbox_kills_total", "counter", "runs killed by the sandbox, by reason",
                    [({"reason": r}, v) for r, v in sorted(self.kills.items())])
        for name, (doc, read) in sorted(self.gauges.items()):
            _family(lines, name, "gauge", doc, [({}, read())])
        _family(lines, "sandbox_uptime_seconds", "gauge", "seconds since start", [({}, time.time() - self.started)])
        return "\n".join(lines) + "\n"


def _family(lines: list[str], name: str, kind: str, doc: str, samples: list[tuple[dict, float]]) -> None:
    lines += [f"# HELP {name} {doc}", f"# TYPE {name} {kind}"]
    for labels, value in samples:
        label_text = ",".join(f'{k}="{v}"' for k, v in labels.items())
        lines.append(f"{name}{{{label_text}}} {value}" if label_text else f"{name} {value}")
