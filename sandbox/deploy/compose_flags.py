"""`docker run` flags for a service of docker-compose.yml, so scripts that start the container by hand (the
throughput bench) run it exactly as `docker compose up` does: the compose file stays the one place its
hardening is written.

Covered keys: user, read_only, tmpfs, cap_drop, cap_add, security_opt, pids_limit, mem_limit, memswap_limit,
cpus, init, ulimits, environment. `${VAR:-default}` is interpolated from the process environment as compose
does; networks, ports, healthcheck, restart and build are left to the caller (they depend on how it is run).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

COMPOSE_FILE = Path(__file__).resolve().parents[2] / "docker-compose.yml"  # the repository root
_VAR = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")


def _interpolate(value: object) -> str:
    return _VAR.sub(lambda m: os.environ.get(m.group(1)) or (m.group(2) or ""), str(value))


def service_config(service: str = "sandbox", path: Path = COMPOSE_FILE) -> dict:
    import yaml  # host side only: the image installs the `sandbox` extra, which has no pyyaml

    services = (yaml.safe_load(path.read_text()) or {}).get("services") or {}
    if service not in services:
        raise KeyError(f"{path}: no service {service!r} (has {sorted(services)})")
    return services[service]


def docker_run_flags(service: str = "sandbox", path: Path = COMPOSE_FILE,
                     environment: dict[str, str] | None = None) -> list[str]:
    """The service's hardening, limits and environment as `docker run` flags; `environment` overrides entries."""
    svc = service_config(service, path)
    flags: list[str] = []
    if "user" in svc:
        flags.append(f"--user={_interpolate(svc['user'])}")
    if svc.get("read_only"):
        flags.append("--read-only")
    if svc.get("init"):
        flags.append("--init")
    flags += [f"--tmpfs={_interpolate(t)}" for t in svc.get("tmpfs") or ()]
    flags += [f"--cap-drop={c}" for c in svc.get("cap_drop") or ()]
    flags += [f"--cap-add={c}" for c in svc.get("cap_add") or ()]
    flags += [f"--security-opt={_interpolate(s)}" for s in svc.get("security_opt") or ()]
    for key, flag in (("pids_limit", "--pids-limit"), ("mem_limit", "--memory"), ("memswap_limit", "--memory-swap"),
                      ("cpus", "--cpus")):
        if key in svc:
            flags.append(f"{flag}={_interpolate(svc[key])}")
    for name, limit in (svc.get("ulimits") or {}).items():
        soft, hard = (limit["soft"], limit["hard"]) if isinstance(limit, dict) else (limit, limit)
        flags.append(f"--ulimit={name}={soft}:{hard}")
    entries = svc.get("environment") or {}
    if isinstance(entries, list):  # the list form: ["KEY=value", ...]
        entries = dict(e.partition("=")[::2] for e in entries)
    env = {k: _interpolate(v) for k, v in entries.items()}
    env.update(environment or {})
    for key, value in env.items():
        flags += ["-e", f"{key}={value}"]
    return flags
