"""alprl's code-execution sandbox: a SandboxFusion-compatible service that runs untrusted Python (docs/sandbox.md).

Rooms, in import order: a room imports only the package's own modules and the rooms before it
(tests/structure/test_rooms.py checks it).

- `sandbox.types`, `sandbox.settings` (here): the result type and runner protocol every room and the envs share;
  every setting and default limit, stated once.
- `isolation/`: the layers' mechanisms — Linux calls (namespaces, mounts), the seccomp filter, request file paths.
- `execution/`: the pure core — pool of zygotes, the zygote process and its forked runs, run supervision, the
  server↔zygote protocol, sessions, the docker backend, the in-process runner.
- `service/`: the thin FastAPI layer — app, routes, wire models, admission, auth, metrics.
- `client/`: how envs and trainers reach a sandbox — `make_runner`, the HTTP clients and their retry loop.
- `deploy/`: how the service is started — the `alprl-sandbox` command, a background server for tests and demos,
  the image, the compose gateway, the Docker engine script.

A POST /run_code's path through them is one paragraph of docs/sandbox.md ("The request's path").
"""
