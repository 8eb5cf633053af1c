#!/usr/bin/env bash
# Make a Docker engine answer where that is possible: nothing to do when `docker info` works; as root with apt,
# install Debian's docker.io and docker-compose if missing and start dockerd in the background. Never fails:
# it prints why there is no engine, and the Docker tests skip with that reason.
# Install and start happen under an exclusive flock on DOCKER_ENGINE_LOCK (default /tmp/alprl-docker-engine.lock):
# two callers at once would otherwise collide on dpkg's lock or start two dockerds; the second waits, then finds
# the engine answering.
set -u
if docker info >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" != 0 ]; then
  echo "docker: no engine answers and not root: the Docker tests will be skipped"; exit 0
fi
LOCK=${DOCKER_ENGINE_LOCK:-/tmp/alprl-docker-engine.lock}
if ! command -v flock >/dev/null 2>&1; then
  echo "docker: no flock command (util-linux): going on without the machine-wide lock" >&2
else
  [ -e "$LOCK" ] || (umask 000 && : >>"$LOCK") 2>/dev/null
  # Read-only is enough for flock; fd 9 (and the lock) closes when this script exits.
  if ! { exec 9<"$LOCK"; } 2>/dev/null; then
    echo "docker: cannot open the lock file $LOCK: going on without the machine-wide lock" >&2
  elif ! flock -n 9; then
    echo "docker: another caller holds $LOCK (installing or starting the engine): waiting for it"
    flock -w 900 9 || echo "docker: $LOCK still held after 900 s: going on without it" >&2
  fi
  # The holder before us may have started the engine.
  if docker info >/dev/null 2>&1; then exit 0; fi
fi
if ! command -v dockerd >/dev/null 2>&1 || ! { command -v docker-compose >/dev/null 2>&1 || docker compose version >/dev/null 2>&1; }; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "docker: no engine and no apt-get to install one: the Docker tests will be skipped"; exit 0
  fi
  # Wait for dpkg's lock when another apt user (not ours) holds it, rather than fail at once.
  apt_get() { DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 "$@"; }
  (apt_get update -qq && apt_get install -y -qq docker.io docker-compose) >/dev/null 2>&1 ||
    { echo "docker: apt-get could not install docker.io: the Docker tests will be skipped"; exit 0; }
fi
if ! pgrep -x dockerd >/dev/null 2>&1; then
  # 9<&-: the daemon outlives this script and must not inherit (and so keep holding) the lock.
  nohup dockerd >/var/log/alprl-dockerd.log 2>&1 9<&- &
fi
for _ in $(seq 1 60); do
  docker info >/dev/null 2>&1 && exit 0
  sleep 0.5
done
echo "docker: dockerd did not answer within 30 s (log: /var/log/alprl-dockerd.log): the Docker tests will be skipped"
exit 0
