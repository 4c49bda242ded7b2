#!/usr/bin/env bash
# Installs what Ithbat needs on Debian 12, as root, non-interactively, in three groups:
#
#   install-deps.sh runtime   what the `ithbat` binary needs to run on a node (its shared
#                             libraries): a node that runs a build copied onto it (the Debian
#                             package declares the same through dpkg-shlibdeps)
#   install-deps.sh build     runtime + compilers, headers and the BPF toolchain: `make build`
#   install-deps.sh [test]    build + the real outside components the tests run against
#                             (Prometheus, Slurm, Chromium, podman, npm, ...): `make test`,
#                             `make demo`; the default
#
# Idempotent: when every package is already installed it touches nothing (no apt-get update),
# so `make test` reruns stay fast. Fails loudly on any error.
#
# eBPF (bpf/): libbpf-dev, bpftool and clang-19 build the BPF programs and their skeletons
# (configure fails without them, or without kernel BTF at /sys/kernel/btf/vmlinux);
# libclang-rt-19-dev gives clang-19 libFuzzer for the fuzz targets (clang 14 cannot compile
# <expected>).
#
# Not installed yet, on purpose (add it here when a build or test step uses it):
#   clang-tidy-19                - `make lint` uses it when present
set -euo pipefail

group=${1:-test}
case $group in
  runtime | build | test) ;;
  *)
    echo "usage: install-deps.sh [runtime|build|test]  (got '$group')" >&2
    exit 2
    ;;
esac

runtime_packages=(
  # The shared libraries `ldd ithbat` lists (Debian 12's sonames), nothing else: NVIDIA's
  # libnvidia-ml.so.1 comes with the driver and is loaded with dlopen when present.
  libfmt9 libspdlog1.10 libre2-9 libzstd1 libsqlite3-0 libmicrohttpd12 libcurl4 libbpf1 libyaml-cpp0.7
)

build_packages=(
  build-essential cmake ninja-build pkg-config git python3
  libfmt-dev libspdlog-dev nlohmann-json3-dev libcli11-dev libcpp-httplib-dev
  # libmicrohttpd: the agent's and hub's bounded HTTP server; libcurl: every outgoing request,
  # bounded (src/serve/http_base.h, src/net/http_client.h, docs/security.md "HTTP").
  libmicrohttpd-dev libcurl4-openssl-dev
  libre2-dev libzstd-dev libsqlite3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libbpf-dev bpftool clang-19 libclang-rt-19-dev
  # fuse3: sim/slowfs (ithbat-slowfs, the simulator's slow shared storage).
  libfuse3-dev
  # yaml-cpp: the scenario format of the simulator (src/scenario, docs/scenarios.md) is YAML.
  libyaml-cpp-dev
)

test_packages=(
  prometheus curl
  # jq: tests/integration/grafana_dashboard.sh reads the queries out of the dashboard's JSON.
  jq
  # util-linux's setpriv runs the agent under the unit's capability bounding set and
  # systemd-analyze scores the unit offline (tests/integration/capabilities.sh, unit_security.sh).
  util-linux systemd
  # slurm: a one-node cluster for tests/integration/slurm_identity.sh and slurm_hooks.sh; the
  # tests write their own slurm.conf and munge key and start the daemons themselves.
  slurm-wlm munge
  # the sched_io tests and the lab mount sim/slowfs, which needs fuse3, /dev/fuse and root.
  fuse3
  # faketime (libfaketime): the simulator runs one node's agent with a skewed, drifting clock
  # when a scenario sets clock_skew_ms / clock_drift_ppm.
  faketime
  # chromium: tests/integration/report_chromium.sh opens the HTML report in headless Chromium
  # (no console error, charts drawn in a screenshot).
  chromium
  # debootstrap: tests/integration/debian_clean_root.sh installs the package on a clean Debian 12.
  debootstrap
  # podman: `make image` and tests/integration/oci_image.sh build the OCI image from
  # scratch (docs/container.md).
  podman
)
# npm: tests/integration/kubernetes_manifests.sh installs its pinned schema validator from the
# npm registry. This machine kind ships Node.js with npm (NodeSource); only where npm is missing
# are Debian's nodejs and npm installed (they conflict with NodeSource's nodejs).
if ! command -v npm >/dev/null 2>&1; then test_packages+=(nodejs npm); fi

packages=("${runtime_packages[@]}")
if [[ $group != runtime ]]; then packages+=("${build_packages[@]}"); fi
if [[ $group == test ]]; then packages+=("${test_packages[@]}"); fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages of group $group present"
  exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: missing packages (${missing[*]}) and not root; run as root" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive

# The prometheus package would start its own server on :9090 where an init system runs; the
# tests start their own on a free port, so keep package scripts from starting services.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy"
  chmod 755 "$policy"
  created_policy=1
fi
cleanup() { if [[ $created_policy -eq 1 ]]; then rm -f "$policy"; fi; }
trap cleanup EXIT

apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-deps: done"
