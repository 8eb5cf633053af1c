#!/usr/bin/env bash
# Build the sandbox image (alprl/sandbox:latest) with no registry access for pip and no network in the build:
#   1. a wheelhouse on the host (build/sandbox-wheels): the `sandbox` extra of pyproject.toml, numpy and sympy,
#      for CPython 3.11 on this architecture, downloaded with the host's pip configuration (proxy, mirror, CA);
#   2. a base image: $BASE_IMAGE if given; else python:3.11-slim when it is present or can be pulled; else a local
#      Debian bookworm base (Python 3.11) made with debootstrap and `docker import` (alprl/sandbox-base:bookworm);
#   3. `docker build` of sandbox/deploy/Dockerfile, which installs from the wheelhouse with --no-index.
# Every step is skipped when its result is already there (rerun after a pyproject.toml change to refresh).
# One build at a time per machine: the whole script runs under an exclusive flock on SANDBOX_IMAGE_LOCK, so callers
# started together (test workers, a `make sandbox-image` beside them) take turns and the later ones find it all done.
#
# Environment: PIP (default .venv/bin/pip, else `python3 -m pip`, else a venv in build/pip-venv), BASE_IMAGE, SANDBOX_IMAGE,
# WHEELS_FROM (a folder of wheels to take them from instead of an index), DEBIAN_MIRROR (default
# http://deb.debian.org/debian), PULL_TIMEOUT_S (default 60), SANDBOX_IMAGE_LOCK (default
# /tmp/alprl-sandbox-image.lock), SANDBOX_IMAGE_LOCK_WAIT_S (how long to wait for another build, default 1800).
set -euo pipefail
cd "$(dirname "$0")/../.."  # the repository root (this script is sandbox/deploy/build_image.sh)

IMAGE=${SANDBOX_IMAGE:-alprl/sandbox:latest}
LOCAL_BASE=alprl/sandbox-base:bookworm
WHEELS=build/sandbox-wheels
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
say() { echo "sandbox-image: $*"; }
die() { echo "sandbox-image: $*" >&2; exit 1; }
# exit 3: this machine cannot provide a base image or wheels at all (the Docker tests skip on it, with the reason)
cannot() { echo "sandbox-image: $*" >&2; exit 3; }

# The machine-wide lock. Without it, two builds at once collide on dpkg's lock (apt-get install debootstrap), on the
# wheelhouse (both rewrite its requirements file and wheels in place) and on the image tags. The file is opened read-only
# (flock needs no write access), so a lock file left by another user still works; fd 9 closes, and the lock goes,
# when the script exits.
LOCK=${SANDBOX_IMAGE_LOCK:-/tmp/alprl-sandbox-image.lock}
LOCK_WAIT_S=${SANDBOX_IMAGE_LOCK_WAIT_S:-1800}
if ! command -v flock >/dev/null; then
  echo "sandbox-image: no flock command (util-linux): building without the machine-wide lock" >&2
else
  [ -e "$LOCK" ] || (umask 000 && : >>"$LOCK") 2>/dev/null || true
  if ! { exec 9<"$LOCK"; } 2>/dev/null; then
    echo "sandbox-image: cannot open the lock file $LOCK: building without the machine-wide lock" >&2
  elif ! flock -n 9; then
    say "another build holds $LOCK: waiting for it (up to $LOCK_WAIT_S s)"
    flock -w "$LOCK_WAIT_S" 9 || die "another build still held $LOCK after $LOCK_WAIT_S s"
  fi
fi

command -v docker >/dev/null || die "no docker command: install Docker (Debian: apt-get install docker.io docker-compose)"
docker info >/dev/null 2>&1 || die "the Docker engine does not answer (start dockerd, or check DOCKER_HOST / permissions)"

if [ -n "${PIP:-}" ]; then :
elif [ -x .venv/bin/pip ]; then PIP=.venv/bin/pip
elif python3 -m pip --version >/dev/null 2>&1; then PIP="python3 -m pip"
else  # a system Python without pip: a throwaway venv has one
  [ -x build/pip-venv/bin/pip ] || python3 -m venv build/pip-venv || die "no pip: install python3-pip or python3-venv"
  PIP=build/pip-venv/bin/pip
fi

# 1. Wheelhouse, keyed by the requirement list so a pyproject.toml change refreshes it.
mkdir -p "$WHEELS"
python3 - "$WHEELS/requirements.txt.new" <<'PY'
import sys, tomllib
extra = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["sandbox"]
user_code = ["numpy>=1.26,<3", "sympy>=1.12,<2"]  # what TIR programs import; preloaded by the heavy zygote
build = ["setuptools>=68", "wheel"]  # the package is installed with --no-build-isolation
open(sys.argv[1], "w").write("\n".join(extra + user_code + build) + "\n")
PY
if cmp -s "$WHEELS/requirements.txt.new" "$WHEELS/requirements.txt" && [ -f "$WHEELS/.complete" ]; then
  rm "$WHEELS/requirements.txt.new"
  say "wheelhouse $WHEELS is up to date"
else
  mv "$WHEELS/requirements.txt.new" "$WHEELS/requirements.txt"
  rm -f "$WHEELS/.complete" "$WHEELS"/*.whl
  arch=$(uname -m)
  say "downloading wheels for CPython 3.11 / $arch into $WHEELS"
  source_args=()
  [ -n "${WHEELS_FROM:-}" ] && source_args=(--no-index --find-links "$WHEELS_FROM")
  # shellcheck disable=SC2086
  $PIP download -q "${source_args[@]}" --dest "$WHEELS" --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 \
    --platform "manylinux_2_28_$arch" --platform "manylinux_2_17_$arch" --platform "manylinux2014_$arch" \
    -r "$WHEELS/requirements.txt" || cannot "pip could not download the wheels (check the host's pip index/proxy)"
  touch "$WHEELS/.complete"
fi

# 2. Base image.
have_image() { docker image inspect "$1" >/dev/null 2>&1; }
if [ -z "${BASE_IMAGE:-}" ]; then
  if have_image python:3.11-slim; then
    BASE_IMAGE=python:3.11-slim
  elif timeout "${PULL_TIMEOUT_S:-60}" docker pull -q python:3.11-slim >/dev/null 2>&1; then
    BASE_IMAGE=python:3.11-slim
  else
    BASE_IMAGE=$LOCAL_BASE
    if have_image "$LOCAL_BASE"; then
      say "using the local base $LOCAL_BASE"
    else
      say "python:3.11-slim cannot be pulled: making $LOCAL_BASE with debootstrap from $MIRROR"
      if ! command -v debootstrap >/dev/null; then
        { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; } ||
          cannot "debootstrap is missing and cannot be installed (needs root and apt); or set BASE_IMAGE to an image with Python 3.11"
        # Another apt user (an unattended upgrade, a concurrent install) may hold dpkg's lock: wait for it rather
        # than fail. With no package lists yet (a fresh machine), fetch them and try again.
        apt_get() { DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 "$@"; }
        apt_get install -y -qq debootstrap >/dev/null ||
          { apt_get update -qq && apt_get install -y -qq debootstrap >/dev/null; } ||
          die "apt-get could not install debootstrap (above: its error)"
      fi
      [ "$(id -u)" = 0 ] || cannot "debootstrap needs root; or set BASE_IMAGE to an image with Python 3.11"
      rootfs=$(mktemp -d)
      trap 'rm -rf "$rootfs"' EXIT
      # minbase + Python 3.11 with its venv module; libseccomp2 for the seccomp layer.
      debootstrap --variant=minbase --include=python3,python3-venv,libseccomp2 bookworm "$rootfs" "$MIRROR" \
        >"$rootfs.log" 2>&1 || cannot "debootstrap failed (log: $rootfs.log)"
      rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
      tar -C "$rootfs" -c . | docker import - "$LOCAL_BASE" >/dev/null
      rm -f "$rootfs.log"
    fi
  fi
fi
say "base image $BASE_IMAGE"

# 3. The image (Docker's layer cache makes a rerun without changes a no-op).
build_log=$(mktemp)
if ! DOCKER_BUILDKIT=0 docker build --build-arg "BASE_IMAGE=$BASE_IMAGE" -f sandbox/deploy/Dockerfile -t "$IMAGE" . \
    >"$build_log" 2>&1; then
  tail -n 30 "$build_log" >&2
  die "docker build failed (above: the end of its output)"
fi
rm -f "$build_log"
say "built $IMAGE"
