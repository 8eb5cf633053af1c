"""`alprl env serve NAME --port N`: one of alprl's environments as an OpenEnv environment server, for OpenEnv clients
(openenv-core's `GenericEnvClient`, TRL's `environment_factory` tools built on one, alprl's own alprl/OpenEnv-v0).

The server is openenv-core's own (`create_fastapi_app` over `envs.adapters.openenv_server.GymTextEnvironment`),
run by uvicorn; this module parses the command and starts it. openenv-core is imported only when the command runs,
so `alprl --help` and every other command do not pay for it.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import yaml

DESCRIPTION = """Serve one of alprl's text environments (tir, household or shop, or any alprl/* env id) as an
OpenEnv environment: openenv-core's own server, WebSocket /ws (one session, one environment per connection) plus
/schema, /health, /metadata.

Protocol (what an OpenEnv client sends and gets):
  reset   keywords seed, and the env's reset options: split (train|valid|test), index (global task index),
          task_id, task_type; e.g. reset(seed=3, split="test", index=4) plays test task 4
  action  {"message": "<command or assistant turn>"}
  result  observation {"text": ..., "info": {admissible_commands, won, task_score, task_id, ...},
          "truncated": bool}, reward (float; none at reset), done (terminated or truncated)

A client in Python (openenv-core):
  from openenv.core import GenericEnvClient
  with GenericEnvClient(base_url="http://127.0.0.1:8000").sync() as env:
      result = env.reset(seed=0, split="test", index=0)
      result = env.step({"message": "look"})

alprl itself plays such a server (or any OpenEnv server) as env.id=alprl/OpenEnv-v0 env.openenv.url=http://...
The served env is the raw Gymnasium env: no agent prompt, step hints or action projection."""
EPILOG = """examples:
  alprl env serve household --port 8000
  alprl env serve tir --port 8001 --env-arg style=hermes --env-arg sandbox_url=http://127.0.0.1:8080
  alprl env serve shop --host 0.0.0.0 --port 8002 --env-arg max_steps=20

exit status: 0 stopped; 2 an unknown environment or env argument, or openenv-core missing (one line on stderr)."""


def add_env_parser(sub: Any) -> None:
    env = sub.add_parser("env", help="alprl's environments for other tools (alprl env serve --help)",
                         description="alprl's environments for other tools.")
    env_sub = env.add_subparsers(dest="env_command", required=True)
    serve = env_sub.add_parser("serve", help="serve tir, household or shop as an OpenEnv environment server",
                               description=DESCRIPTION, epilog=EPILOG,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    serve.add_argument("name", metavar="NAME", help="tir, household or shop (or an alprl/* env id)")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    serve.add_argument("--max-sessions", type=int, default=64,
                       help="concurrent WebSocket sessions, each its own env (default 64)")
    serve.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE",
                       help="a keyword of the env's constructor (YAML value), e.g. max_steps=20; repeatable")


def env_kwargs(pairs: list[str]) -> dict[str, Any]:
    """`KEY=VALUE` pairs as constructor keywords, values read as YAML (20 → int, true → bool)."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--env-arg {pair!r}: write KEY=VALUE")
        out[key] = yaml.safe_load(value)
    return out


def run_env_command(args: argparse.Namespace) -> int:
    """Build the app (refusing a bad name or argument in one line) and serve it until stopped."""
    try:
        import uvicorn

        from envs.adapters.openenv_server import build_app
    except ImportError as exc:
        print(f"alprl env serve: error: needs openenv-core ({exc}): pip install -e \".[openenv]\"", file=sys.stderr)
        return 2
    try:
        app = build_app(args.name, env_kwargs(args.env_arg), max_sessions=args.max_sessions)
    except (ValueError, TypeError) as exc:  # an unknown name, or a keyword the env's constructor refuses
        print(f"alprl env serve: error: {exc}", file=sys.stderr)
        return 2
    print(f"alprl env serve: {args.name} as an OpenEnv environment at http://{args.host}:{args.port} "
          f"(WebSocket /ws, up to {args.max_sessions} sessions)", file=sys.stderr, flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
