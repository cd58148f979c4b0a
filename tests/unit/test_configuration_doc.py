"""docs/configuration.md is generated from coordinator/config.py and coordinator/cli.py: fail when stale."""

from pathlib import Path

from coordinator import configdoc
from coordinator.config import SETTINGS

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_configuration_doc_is_up_to_date():
    expected = configdoc.render()
    actual = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
    assert actual == expected, (
        f"{DOC} is stale (or missing): regenerate it with `{configdoc.REGENERATE}` (from the repository root)"
    )


def test_every_setting_and_its_env_var_is_documented():
    text = configdoc.render()
    for setting in SETTINGS:
        assert f"| `{setting.name}` | `{configdoc.env_var(setting)}` |" in text


def test_every_serve_flag_is_documented_with_the_env_var_cli_reads():
    cli_source = (Path(configdoc.__file__).with_name("cli.py")).read_text(encoding="utf-8")
    text = configdoc.render()
    flags = [action.option_strings[-1] for action in configdoc.serve_flags()]
    assert "--listen" in flags and "--set" in flags
    for flag in flags:
        assert f"| `{flag}` |" in text
        if flag != "--set":
            env = configdoc.FLAG_ENV.get(flag)
            assert env, f"{flag}: add its environment variable to coordinator.configdoc.FLAG_ENV"
            assert f'os.environ.get("{env}"' in cli_source, f"{flag}: cli.py does not read {env}"
