#!/usr/bin/env bash
# `make sandbox-up` / `make sandbox-down`: the compose stack of docker-compose.yml with whichever compose this
# machine has. Docker's v2 plugin answers `docker compose`; Debian bookworm's packages (docker.io 20.10,
# docker-compose 1.29) have only the v1 command `docker-compose`, where `docker compose` is an unknown command.
#
#   compose.sh up     build the image if needed (build_image.sh, a no-op when it is up to date), `up -d sandbox`,
#                     wait for /v1/ping, then print the URL and a request that checks it
#   compose.sh down   `down --remove-orphans`: no container or network of the stack is left
#
# Both are idempotent. The compose project is compose's own default (this folder's name) unless COMPOSE_PROJECT_NAME
# says otherwise, so a plain `docker compose down` / `docker-compose down` here stops the same stack. Environment:
# SANDBOX_HOST_PORT (default 8080), SANDBOX_UP_WAIT_S (how long to wait for the service, default 90), and what
# docker-compose.yml and build_image.sh read.
set -euo pipefail
cd "$(dirname "$0")/../.."  # the repository root (this script is sandbox/deploy/compose.sh)
say() { echo "sandbox: $*"; }
die() { echo "sandbox: $*" >&2; exit 1; }

command -v docker >/dev/null || die "no docker command: install Docker (Debian: apt-get install docker.io docker-compose)"
if docker compose version >/dev/null 2>&1; then
  compose=(docker compose)
elif command -v docker-compose >/dev/null; then
  compose=(docker-compose)
else
  die "neither \`docker compose\` (the v2 plugin) nor \`docker-compose\` (v1) is installed (Debian: apt-get install docker-compose)"
fi

port=${SANDBOX_HOST_PORT:-8080}
url="http://127.0.0.1:$port"
case "${1:-}" in
  up)
    docker info >/dev/null 2>&1 || die "the Docker engine does not answer (start dockerd, or check DOCKER_HOST / permissions)"
    bash sandbox/deploy/build_image.sh
    "${compose[@]}" up -d sandbox
    wait_s=${SANDBOX_UP_WAIT_S:-90}
    # python3, not curl: a bare Debian has the first (build_image.sh needs it too), not always the second
    if ! python3 - "$url/v1/ping" "$wait_s" <<'PY'
import sys, time, urllib.request
url, deadline = sys.argv[1], time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline:
    try:
        if urllib.request.urlopen(url, timeout=2).status == 200:
            sys.exit(0)
    except OSError:
        pass
    time.sleep(0.5)
sys.exit(1)
PY
    then
      "${compose[@]}" logs --tail 40 >&2 || true
      die "$url/v1/ping did not answer within ${wait_s} s (above: the stack's last log lines); \`make sandbox-down\` removes it"
    fi
    say "up with \`${compose[*]}\` → $url"
    echo "check it:  curl -s -X POST $url/run_code -H 'content-type: application/json' -d '{\"code\": \"print(6*7)\", \"language\": \"python\"}'"
    echo "stop it:   make sandbox-down"
    ;;
  down)
    "${compose[@]}" down --remove-orphans
    say "down (\`${compose[*]} down\`)"
    ;;
  *)
    die "usage: sandbox/deploy/compose.sh up|down (or make sandbox-up / make sandbox-down)"
    ;;
esac
