#!/usr/bin/env bash
# Make a Docker engine answer where that is possible: nothing to do when `docker info` works; as root with apt,
# install Debian's docker.io and docker-compose if missing and start dockerd in the background. Never fails:
# it prints why there is no engine, and the Docker tests skip with that reason.
set -u
if docker info >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" != 0 ]; then
  echo "docker: no engine answers and not root: the Docker tests will be skipped"; exit 0
fi
if ! command -v dockerd >/dev/null 2>&1 || ! { command -v docker-compose >/dev/null 2>&1 || docker compose version >/dev/null 2>&1; }; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "docker: no engine and no apt-get to install one: the Docker tests will be skipped"; exit 0
  fi
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io docker-compose) >/dev/null 2>&1 ||
    { echo "docker: apt-get could not install docker.io: the Docker tests will be skipped"; exit 0; }
fi
if ! pgrep -x dockerd >/dev/null 2>&1; then
  nohup dockerd >/var/log/alprl-dockerd.log 2>&1 &
fi
for _ in $(seq 1 60); do
  docker info >/dev/null 2>&1 && exit 0
  sleep 0.5
done
echo "docker: dockerd did not answer within 30 s (log: /var/log/alprl-dockerd.log): the Docker tests will be skipped"
exit 0
