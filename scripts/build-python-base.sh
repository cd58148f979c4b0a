#!/usr/bin/env bash
# A stand-in for python:3.11-slim made from Debian's own packages, for building the Dockerfile where no container
# registry is reachable (tests/deploy/test_container.py does; see the README's container section).
#
#   scripts/build-python-base.sh [IMAGE]        default: localhost/kgc-python-base:3.11-bookworm
#
# A minbase bookworm from the machine's Debian mirror, plus python3.11 and python3.11-venv, with python/python3
# linked in /usr/local/bin as in the official image; imported into podman ($ENGINE) as IMAGE. Does nothing when
# IMAGE exists already. Needs root, debootstrap and podman.
set -euo pipefail

image=${1:-localhost/kgc-python-base:3.11-bookworm}
engine=${ENGINE:-podman}
suite=bookworm

if "$engine" image exists "$image" 2>/dev/null; then
    echo "build-python-base: $image exists"
    exit 0
fi

# The mirror apt already uses (deb822 or one-line sources), else Debian's.
mirror=$(grep -hoE '^URIs: *\S+' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' \
    | grep -v security | head -n1 || true)
if [ -z "$mirror" ]; then
    mirror=$(grep -hoE '^deb +\S+' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' | grep -v security \
        | head -n1 || true)
fi
mirror=${mirror:-http://deb.debian.org/debian}

root=$(mktemp -d /var/tmp/kgc-base.XXXXXX)
log=$(mktemp /var/tmp/kgc-base-log.XXXXXX)
cleanup() {
    umount "$root/proc" 2>/dev/null || true
    rm -rf "$root" "$log"
}
trap cleanup EXIT
step() {
    "$@" >>"$log" 2>&1 || { echo "build-python-base: failed: $*" >&2; tail -n 40 "$log" >&2; exit 1; }
}

step debootstrap --variant=minbase "$suite" "$root" "$mirror"
# apt inside the new root: the host's resolver, a /proc for dpkg's maintainer scripts.
cp /etc/resolv.conf "$root/etc/resolv.conf"
mount -t proc proc "$root/proc"
step chroot "$root" apt-get update
step chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
    python3.11 python3.11-venv ca-certificates
umount "$root/proc"
rm -f "$root/etc/resolv.conf"

ln -sf /usr/bin/python3.11 "$root/usr/local/bin/python3"
ln -sf /usr/bin/python3.11 "$root/usr/local/bin/python"
# What the slim image leaves out too: package caches and lists, documentation, manuals, locales, bytecode.
rm -rf "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* "$root"/usr/share/man/* \
    "$root"/usr/share/info/* "$root"/usr/share/locale/* "$root"/var/log/*
find "$root/usr/lib/python3.11" -name __pycache__ -prune -exec rm -rf {} +

tar -C "$root" --numeric-owner -c . | "$engine" import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python3"]' \
    - "$image" >/dev/null
echo "build-python-base: imported $image ($suite from $mirror)"
