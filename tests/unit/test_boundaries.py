"""The package boundaries of STYLE.md, as import-linter contracts in pyproject.toml."""

import subprocess
import sys
from pathlib import Path


def test_import_contracts_hold():
    root = Path(__file__).resolve().parents[2]
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint), "--no-cache"], cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
