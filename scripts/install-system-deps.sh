#!/usr/bin/env bash
# Install the system packages the end-to-end tests need (Debian/Ubuntu).
#   kcat                      the kcat e2e tests
#   prometheus (+ promtool)   the observability e2e tests: a real Prometheus scrapes /metrics, promtool lints it
#   podman runc debootstrap   tests/deploy/test_container.py builds and runs the image (a base made by debootstrap)
#   chromium                  tests/e2e/test_e2e_console.py drives the web console in it (headless, via Playwright)
# Idempotent: does nothing when every tool is already on PATH.
set -euo pipefail

need=()
command -v kcat >/dev/null 2>&1 || need+=(kcat)
# Debian's prometheus package ships both the server and promtool.
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
    need+=(prometheus)
fi
for tool in podman runc debootstrap chromium; do
    command -v "$tool" >/dev/null 2>&1 || need+=("$tool")
done

if [ "${#need[@]}" -eq 0 ]; then
    echo "install-system-deps: nothing to do (kcat, prometheus, promtool, podman, runc, debootstrap, chromium are" \
        "installed)"
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
        *) tools+=("$package") ;;
    esac
done
for tool in "${tools[@]}"; do
    command -v "$tool" >/dev/null 2>&1 || { echo "install-system-deps: $tool still missing" >&2; exit 1; }
done
echo "install-system-deps: installed ${need[*]}"
