#!/bin/sh
# Install kafka-group-coordinator (runtime dependencies only, no test extras) into a fresh virtualenv.
#
#   docker/install.sh PREFIX SRC_DIR
#
# PREFIX   the virtualenv to create (the image uses /opt/kgc); it must not exist yet
# SRC_DIR  a directory holding the project's source (pyproject.toml, README.md, protocol/, coordinator/, storage/)
#
# The Dockerfile's build stage runs this, and tests/deploy/test_image_filesystem.py runs the same script into a
# temporary prefix, so the image and its test cannot install differently. $PYTHON picks the interpreter
# (default python3); pip honours its usual PIP_* variables (PIP_INDEX_URL, PIP_FIND_LINKS, ...).
set -eu

if [ "$#" -ne 2 ]; then
    echo "usage: $0 PREFIX SRC_DIR" >&2
    exit 2
fi
prefix=$1
src=$2
python=${PYTHON:-python3}

if [ -e "$prefix/bin/python" ]; then
    echo "install.sh: $prefix already holds a virtualenv" >&2
    exit 1
fi
if [ ! -f "$src/pyproject.toml" ]; then
    echo "install.sh: no pyproject.toml in $src" >&2
    exit 1
fi

export PIP_DISABLE_PIP_VERSION_CHECK=1
export PIP_NO_CACHE_DIR="${PIP_NO_CACHE_DIR:-1}"

"$python" -m venv "$prefix"
# A regular (not editable) install: the venv must work once the source is gone. No bytecode yet (below).
"$prefix/bin/python" -m pip install --quiet --no-input --no-compile "$src"
"$prefix/bin/python" -c "import coordinator.app, storage, protocol"
# pip and setuptools only installed the rest: the image does not need them.
"$prefix/bin/python" -m pip uninstall --quiet --yes pip setuptools

# Start the server once, as the image will (fail the build now, not at the first start), and stop it. The
# bytecode it writes is what a start imports (most of kio's schema modules are never loaded), half the size of
# compiling everything.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
env -u PYTHONDONTWRITEBYTECODE "$prefix/bin/kafka-group-coordinator" serve --listen 127.0.0.1:0 \
    --admin-listen off --data-dir "$scratch/data" >"$scratch/out" 2>&1 &
pid=$!
tries=0
until grep -q '^listening ' "$scratch/out"; do
    tries=$((tries + 1))
    if ! kill -0 "$pid" 2>/dev/null || [ "$tries" -gt 600 ]; then
        kill "$pid" 2>/dev/null || true
        cat "$scratch/out" >&2
        echo "install.sh: the server did not start" >&2
        exit 1
    fi
    sleep 0.1
done
kill -TERM "$pid"
if ! wait "$pid"; then
    cat "$scratch/out" >&2
    echo "install.sh: the server did not stop cleanly on SIGTERM" >&2
    exit 1
fi
echo "install.sh: installed kafka-group-coordinator into $prefix"
