"""`alprl-sandbox` command line (also reached as `alprl sandbox ...` and `python -m sandbox.deploy.cli`).

    alprl-sandbox serve [--host H] [--port P] [--workers N] [--layers L] [--log-level LEVEL]
    alprl-sandbox gateway [--listen HOST:PORT] [--target HOST:PORT]

Every other setting comes from SANDBOX_* environment variables (listed by `alprl-sandbox serve --help`).
On start it prints one line ``alprl-sandbox listening on http://H:P`` to stdout (with the real port when
``--port 0`` asked for a free one), which `sandbox.deploy.local_server` waits for.
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys

from sandbox.settings import Settings, SettingsError, describe


def _serve_epilog() -> str:
    rows = "\n".join(f"  {var:<34} {doc} [default: {default}]" for var, default, doc in describe())
    return ("environment variables (command-line flags win):\n" + rows +
            "\n\nexample: SANDBOX_MAX_QUEUE=512 alprl-sandbox serve --host 0.0.0.0 --port 8080 --workers 8")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="alprl-sandbox", description="alprl Python-execution sandbox service "
                                     "(SandboxFusion-compatible /run_code, sessions, metrics).")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the HTTP service", epilog=_serve_epilog(),
                           formatter_class=argparse.RawDescriptionHelpFormatter,
                           description="Start the sandbox HTTP service in the foreground.")
    serve.add_argument("--host", help="interface to bind (default 127.0.0.1; 0.0.0.0 in a container)")
    serve.add_argument("--port", type=int, help="TCP port (default 8080; 0 = any free port)")
    serve.add_argument("--workers", type=int, help="concurrent executions (default: number of CPUs)")
    serve.add_argument("--layers", help="isolation layers: auto, none, or a list like uid,net,pid,mount")
    serve.add_argument("--log-level", choices=["debug", "info", "warning", "error"], help="server log level")
    gateway = sub.add_parser("gateway", help="forward a published port to the service on an internal network",
                             description="TCP forwarder used by docker-compose.yml: the sandbox container has no "
                             "route out, so the gateway (on both networks) publishes its port.")
    gateway.add_argument("--listen", default="0.0.0.0:8080", help="address to accept on (default 0.0.0.0:8080)")
    gateway.add_argument("--target", default="sandbox:8080",
                         help="service to forward to, resolved per connection (default sandbox:8080)")
    return parser


def gateway(listen: str, target: str) -> int:
    import asyncio

    from sandbox.deploy.gateway import parse_address, run_gateway

    try:
        where, to = parse_address(listen, what="--listen"), parse_address(target, what="--target")
    except ValueError as exc:
        print(f"alprl-sandbox gateway: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level="WARNING", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(run_gateway(where, to))
    except OSError as exc:
        print(f"alprl-sandbox gateway: cannot listen on {listen}: {exc.strerror}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


def serve(settings: Settings) -> int:
    import uvicorn

    from sandbox.service.app import create_app

    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((settings.host, settings.port))
    except OSError as exc:
        print(f"alprl-sandbox: cannot bind {settings.host}:{settings.port}: {exc.strerror}; "
              "choose another --port or stop the process using it", file=sys.stderr)
        return 1
    sock.listen(2048)
    host, port = sock.getsockname()[:2]
    config = uvicorn.Config(create_app(settings), log_level=settings.log_level, access_log=False,
                            timeout_keep_alive=30, backlog=2048)
    server = uvicorn.Server(config)
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    print(f"alprl-sandbox listening on http://{shown}:{port}", flush=True)
    server.run(sockets=[sock])
    return 0 if server.started else 1


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "gateway":
        return gateway(args.listen, args.target)
    try:
        settings = Settings.from_env(host=args.host, port=args.port, workers=args.workers, layers=args.layers,
                                     log_level=args.log_level)
    except SettingsError as exc:
        print(f"alprl-sandbox: {exc}", file=sys.stderr)
        return 2
    return serve(settings)


if __name__ == "__main__":
    sys.exit(main())
