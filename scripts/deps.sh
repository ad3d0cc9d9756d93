#!/usr/bin/env bash
# scripts/deps.sh - installs, from Debian's packages, only what vitjob needs
# and the machine lacks, then the test API server's CEL evaluator
# (@bufbuild/cel, pinned by tests/cluster/cel/package-lock.json) from the npm
# registry. Idempotent: a second run installs nothing.
#
#   scripts/deps.sh          what `make`, `make test` and `make demo` need
#   scripts/deps.sh build    only what building the two programs needs (the
#                            images' build stage, docker/*.Dockerfile)
#   scripts/deps.sh image    what `make image-test` needs besides: buildah,
#                            debootstrap, Go and the Debian Go packages of
#                            the chart renderer (tools/helmrender)
#
# Quiet unless V=1 (as `make V=1 ...` passes it): one line per stage, the
# output of apt-get and npm in a log file (VITJOB_DEPS_LOG, default
# $TMPDIR/vitjob-deps.log) named at the end, and its last lines on failure.
set -euo pipefail
cd "$(dirname "$0")/.."

LOG=${VITJOB_DEPS_LOG:-${TMPDIR:-/tmp}/vitjob-deps.log}
# quietly CMD...: CMD's output appended to LOG (on the terminal with V=1);
# on failure, LOG's last lines and its name
quietly() {
  if [ -n "${V:-}" ]; then "$@"; return; fi
  if ! "$@" >> "$LOG" 2>&1; then
    echo "deps: failed: $*; the last lines of $LOG:" >&2
    tail -n 25 "$LOG" >&2
    exit 1
  fi
}

BUILD_PACKAGES=(
  build-essential pkg-config
  libcurl4-openssl-dev libcjson-dev libyaml-dev zlib1g-dev libopenblas-dev libopenblas-openmp-dev libsleef-dev
  libmicrohttpd-dev uthash-dev libgloo-dev libxml2-dev libssl-dev libisal-dev
  libturbojpeg0-dev libjpeg62-turbo-dev libspng-dev
)
CHART_PACKAGES=(
  golang-go golang-github-masterminds-sprig-dev golang-gopkg-yaml.v3-dev
  golang-github-xeipuuv-gojsonschema-dev
)
case "${1:-all}" in
  build) PACKAGES=("${BUILD_PACKAGES[@]}") ;;
  image) PACKAGES=(buildah debootstrap "${CHART_PACKAGES[@]}") ;;
  all)
    PACKAGES=(
      "${BUILD_PACKAGES[@]}" "${CHART_PACKAGES[@]}"
      golang-github-go-logfmt-logfmt-dev
      libcriterion-dev bats
      dataset-fashion-mnist python3-torch python3-torchvision
      python3-jsonschema python3-yaml python3-pil python3-numpy libjpeg-turbo-progs openssl iproute2
      curl
    ) ;;
  *) echo "usage: scripts/deps.sh [build|image]" >&2; exit 2 ;;
esac

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# Node.js and npm run the CEL evaluator; a machine may have them from
# elsewhere (NodeSource) than Debian's nodejs/npm packages.
if [ "${1:-all}" = all ]; then
  command -v node >/dev/null 2>&1 || missing+=(nodejs)
  command -v npm >/dev/null 2>&1 || missing+=(npm)
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#PACKAGES[@]} packages present"
else
  [ -n "${V:-}" ] || : > "$LOG"
  echo "deps: installing ${#missing[@]} Debian packages with apt-get${V:+: ${missing[*]}}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  quietly $SUDO apt-get update -qq
  quietly $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  [ -n "${V:-}" ] || echo "deps: installed (apt-get's output: $LOG)"
fi

[ "${1:-all}" = all ] || exit 0

# The CEL evaluator, exactly as locked; reinstalled when the lock changes.
CEL=tests/cluster/cel
if ! [ "$CEL/node_modules/.vitjob-lock" -nt "$CEL/package-lock.json" ]; then
  echo "deps: npm ci in $CEL (the test API server's CEL evaluator)"
  quietly env -C "$CEL" npm ci --no-audit --no-fund --loglevel=error
  touch "$CEL/node_modules/.vitjob-lock"
fi
