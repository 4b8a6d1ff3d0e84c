#!/usr/bin/env bash
# Build deploy/Dockerfile's image without a Docker engine (podman/buildah), or with docker.
#
#   IMAGE   tag to build (msgstore:dev)
#   ENGINE  podman (default when installed) or docker
#   BASE    base image with Python 3.11; default python:3.11-slim with docker, and with podman a
#           Debian bookworm rootfs made by mmdebstrap from Debian's packages (Docker Hub is not
#           needed), imported once as localhost/msgstore-base:bookworm
#   PYTHON  the interpreter that builds the wheels (.venv/bin/python)
#
# Podman runs with the runc runtime and explicit ulimits (crun fails on hybrid cgroup hosts) and
# the host network (no bridge needed for the build's RUN steps).
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE="${IMAGE:-msgstore:dev}"
PYTHON="${PYTHON:-.venv/bin/python}"
if [ -z "${ENGINE:-}" ]; then
  if command -v podman >/dev/null; then ENGINE=podman; else ENGINE=docker; fi
fi
PODMAN_OPTS=(--runtime runc --ulimit nofile=20000:20000 --ulimit nproc=1000:1000 --network host)

# 1. wheels for msgstore and everything it runs with, built here (our extension compiled here)
rm -rf build/wheels
"$PYTHON" -m pip wheel --quiet --wheel-dir build/wheels '.[operator,console]'

# 2. the base image
if [ -z "${BASE:-}" ]; then
  if [ "$ENGINE" = docker ]; then
    BASE=python:3.11-slim
  else
    BASE=localhost/msgstore-base:bookworm
    if ! podman image exists "$BASE"; then
      tmp=$(mktemp -d)
      trap 'rm -rf "$tmp"' EXIT
      mmdebstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' bookworm "$tmp/rootfs.tar" http://deb.debian.org/debian
      podman import --change 'CMD ["/bin/bash"]' "$tmp/rootfs.tar" "$BASE"
    fi
  fi
fi

# 3. the image
if [ "$ENGINE" = podman ]; then
  podman build "${PODMAN_OPTS[@]}" --build-arg BASE="$BASE" -f deploy/Dockerfile -t "$IMAGE" .
else
  DOCKER_BUILDKIT=1 docker build --build-arg BASE="$BASE" -f deploy/Dockerfile -t "$IMAGE" .
fi
echo "built $IMAGE from $BASE with $ENGINE"
