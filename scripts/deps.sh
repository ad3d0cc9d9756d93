#!/usr/bin/env bash
# scripts/deps.sh - installs, from Debian's packages, only what vitjob needs
# and the machine lacks. Idempotent: a second run installs nothing.
set -euo pipefail

PACKAGES=(
  build-essential pkg-config
  libcurl4-openssl-dev libcjson-dev libyaml-dev zlib1g-dev libopenblas-dev libopenblas-openmp-dev libsleef-dev
  libcriterion-dev bats libmicrohttpd-dev uthash-dev
  dataset-fashion-mnist python3-torch
  python3-jsonschema python3-yaml openssl iproute2
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
