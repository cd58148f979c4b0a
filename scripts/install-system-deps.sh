#!/usr/bin/env bash
# Install the system packages the end-to-end tests need (Debian/Ubuntu).
#   kcat                      the kcat e2e tests
#   prometheus (+ promtool)   the observability e2e tests: a real Prometheus scrapes /metrics, promtool lints it
#   podman runc debootstrap   tests/deploy/test_container.py builds and runs the image (a base made by debootstrap)
#   chromium                  tests/e2e/test_e2e_console.py drives the web console in it (headless, via Playwright)
#   gcc (+ python3-dev)       builds the compiled parts of the install (setup.py: storage/_speedups.c,
#                             coordinator/_speedups.c), which the unit tests check against their Python twins;
#                             python3-dev only where the Python has no headers
# Idempotent: does nothing when every tool is already on PATH.
set -euo pipefail

need=()
command -v kcat >/dev/null 2>&1 || need+=(kcat)
# Debian's prometheus package ships both the server and promtool.
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
    need+=(prometheus)
fi
for tool in podman runc debootstrap chromium gcc; do
    command -v "$tool" >/dev/null 2>&1 || need+=("$tool")
done
python=${PYTHON:-python3}
if ! "$python" -c 'import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null; then
    need+=(python3-dev)
fi

if [ "${#need[@]}" -eq 0 ]; then
    echo "install-system-deps: nothing to do (kcat, prometheus, promtool, podman, runc, debootstrap, chromium, gcc" \
        "and Python's headers are installed)"
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

tools=()
for package in "${need[@]}"; do
    case "$package" in
        prometheus) tools+=(prometheus promtool) ;;
        python3-dev) ;;
        *) tools+=("$package") ;;
    esac
done
for tool in "${tools[@]}"; do
    command -v "$tool" >/dev/null 2>&1 || { echo "install-system-deps: $tool still missing" >&2; exit 1; }
done
echo "install-system-deps: installed ${need[*]}"
