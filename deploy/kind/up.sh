#!/usr/bin/env bash
# Build the image, load it into a kind cluster, install the chart with a 3-node sample store,
# wait for it to be Ready and run `helm test` (send + read a message).
# Needs docker, kind, kubectl and helm (make install puts helm and kubectl into .venv/bin).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PWD/.venv/bin:$PATH"

CLUSTER="${CLUSTER:-msgstore}"
IMAGE="${IMAGE:-msgstore:dev}"
NAMESPACE="${NAMESPACE:-msgstore}"
REPLICAS="${REPLICAS:-3}"

if ! kind get clusters | grep -qx "$CLUSTER"; then
  kind create cluster --name "$CLUSTER" --config deploy/kind/cluster.yaml
fi
# the same build as `make image` (deploy/Dockerfile over wheels built here), with docker
ENGINE=docker IMAGE="$IMAGE" PYTHON="${PYTHON:-.venv/bin/python}" scripts/build_image.sh
kind load docker-image "$IMAGE" --name "$CLUSTER"

helm upgrade --install msgstore charts/msgstore \
  --kube-context "kind-$CLUSTER" --namespace "$NAMESPACE" --create-namespace \
  --set image.registry="" --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}" \
  --set image.pullPolicy=Never \
  --set store.enabled=true --set store.replicas="$REPLICAS" --set store.persistence.size=1Gi \
  --wait --timeout 5m

kubectl --context "kind-$CLUSTER" -n "$NAMESPACE" wait --for=condition=Ready messagestore/msgstore --timeout=10m
kubectl --context "kind-$CLUSTER" -n "$NAMESPACE" get messagestores,statefulsets,pods,pvc
helm test msgstore --kube-context "kind-$CLUSTER" --namespace "$NAMESPACE" --logs
