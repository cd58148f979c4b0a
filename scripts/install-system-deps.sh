#!/usr/bin/env bash
# Install the system packages the end-to-end tests need (Debian/Ubuntu).
# Idempotent: does nothing when every tool is already on PATH.
set -euo pipefail

need=()
command -v kcat >/dev/null 2>&1 || need+=(kcat)

if [ "${#need[@]}" -eq 0 ]; then
    echo "install-system-deps: nothing to do (kcat: $(command -v kcat))"
    exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
    SUDO=()
elif command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
else
    echo "install-system-deps: need root or sudo to install: ${need[*]}" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update
"${SUDO[@]}" apt-get install -y --no-install-recommends "${need[@]}"

for tool in "${need[@]}"; do
    command -v "$tool" >/dev/null 2>&1 || { echo "install-system-deps: $tool still missing" >&2; exit 1; }
done
echo "install-system-deps: installed ${need[*]}"
