#!/usr/bin/env bash
# What the test suite uses beyond Python: podman, runc and mmdebstrap build and run the image
# (tests/deploy/test_image.py); openssl, iproute2 and util-linux serve the end-to-end suite; iproute2
# and iptables make the hosts and partitions of the nemesis campaign (tests/ha/test_nemesis.py);
# etcd-server is the replica groups' arbiter off Kubernetes (tests/ha/test_arbiter.py); prometheus (with
# promtool) checks the chart's alerts and dashboard against real stores (tests/deploy/test_monitoring.py);
# chromium and chromium-driver drive the web console in a real browser (tests/console).
# Installed from Debian's packages when missing and when we may (root with apt-get); otherwise
# the tests that need them are skipped and say why.
set -u
need=()
for tool in podman:podman runc:runc mmdebstrap:mmdebstrap openssl:openssl ip:iproute2 iptables:iptables unshare:util-linux etcd:etcd-server prometheus:prometheus promtool:prometheus chromium:chromium chromedriver:chromium-driver; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || need+=("${tool#*:}")
done
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "not installing ${need[*]} (needs root and apt-get): the tests that use them are skipped" >&2
  exit 0
fi
echo "installing ${need[*]} from Debian's packages" >&2
export DEBIAN_FRONTEND=noninteractive
{ apt-get install -y --no-install-recommends "${need[@]}" buildah uidmap fuse-overlayfs slirp4netns \
  || { apt-get update -q && apt-get install -y --no-install-recommends "${need[@]}" buildah uidmap fuse-overlayfs slirp4netns; }; } \
  >/tmp/msgstore-test-tools.log 2>&1 \
  || echo "installing ${need[*]} failed (see /tmp/msgstore-test-tools.log): the tests that use them are skipped" >&2
exit 0
