"""The README's compatibility table is what scripts/compat_table.py renders from the committed results
(tests/compat/results/compat.json), and those results hold every client of the matrix with every scenario."""

from __future__ import annotations

import importlib.util
import json

from compat_matrix import CLIENTS, SCENARIOS

from tests.support.server import REPO

SCRIPT = REPO / "scripts" / "compat_table.py"


def load_script():
    spec = importlib.util.spec_from_file_location("compat_table", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_results_cover_every_client_and_scenario():
    data = json.loads((REPO / "tests" / "compat" / "results" / "compat.json").read_text())
    assert sorted(data["clients"]) == sorted(CLIENTS)
    for key, entry in data["clients"].items():
        assert entry["version"], key
        assert sorted(entry["scenarios"]) == sorted(SCENARIOS), key
        assert entry["api_versions"].get("ApiVersions"), key  # the proxy saw the client's handshake


def test_readme_table_is_rendered_from_the_committed_results():
    table = load_script()
    readme = (REPO / "README.md").read_text()
    assert table.replace_section(readme, table.render(table.load_committed())) == readme, (
        "README.md's compatibility table is out of date: run scripts/compat_table.py"
    )
