#!/usr/bin/env bash
# scripts/deps.sh - installs, from Debian's packages, only what vitjob needs
# and the machine lacks, then the test API server's CEL evaluator
# (@bufbuild/cel, pinned by tests/cluster/cel/package-lock.json) from the npm
# registry. Idempotent: a second run installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential pkg-config
  libcurl4-openssl-dev libcjson-dev libyaml-dev zlib1g-dev libopenblas-dev libopenblas-openmp-dev libsleef-dev
  libcriterion-dev bats libmicrohttpd-dev uthash-dev libgloo-dev
  dataset-fashion-mnist python3-torch
  python3-jsonschema python3-yaml openssl iproute2
  libxml2-dev libssl-dev curl
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# Node.js and npm run the CEL evaluator; a machine may have them from
# elsewhere (NodeSource) than Debian's nodejs/npm packages.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)

if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#PACKAGES[@]} packages present"
else
  echo "deps: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The CEL evaluator, exactly as locked; reinstalled when the lock changes.
CEL=tests/cluster/cel
if ! [ "$CEL/node_modules/.vitjob-lock" -nt "$CEL/package-lock.json" ]; then
  echo "deps: npm ci in $CEL"
  (cd "$CEL" && npm ci --no-audit --no-fund --loglevel=error) && touch "$CEL/node_modules/.vitjob-lock"
fi
