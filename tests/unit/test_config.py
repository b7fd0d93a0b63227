"""Configuration files are validated key by key (issue 9, item 11)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tether import config, errors


def _load(tmp_path: Path, tether_home: Path, text: str) -> tuple[dict[str, object], list[str]]:
    (tether_home / "config.toml").write_text(text)
    warnings: list[str] = []
    return config.load(tmp_path, warn=warnings.append), warnings


@pytest.mark.parametrize(
    ("text", "key", "shown", "allowed"),
    [
        pytest.param('ttl = "abc"', "ttl", '"abc"', "number of seconds", id="ttl-string"),
        pytest.param("ttl = true", "ttl", "true", "number of seconds", id="ttl-bool"),
        pytest.param(
            'defaultPermissions = "yolo"',
            "defaultPermissions",
            '"yolo"',
            '"approve-reads"',
            id="permissions",
        ),
        pytest.param('format = "xml"', "format", '"xml"', '"json"', id="format"),
        pytest.param("timeout = -5", "timeout", "-5", "> 0", id="timeout-negative"),
        pytest.param("timeout = 0", "timeout", "0", "> 0", id="timeout-zero"),
        pytest.param("queue_max_depth = 0", "queue_max_depth", "0", "≥ 1", id="snake-depth"),
        pytest.param(
            'nonInteractivePermissions = "ask"',
            "nonInteractivePermissions",
            '"ask"',
            '"fail"',
            id="non-interactive",
        ),
        pytest.param("[agents.x]\nargv = []", "agents.x", "{ argv = [] }", "argv", id="agent-argv"),
        pytest.param("[auth]\nkey = 3", "auth.key", "3", "a string", id="auth-value"),
        pytest.param('agents = "x"', "agents", '"x"', "a table", id="agents-not-table"),
    ],
)
def test_bad_values_are_refused_naming_file_key_value_and_allowed(
    tmp_path: Path, tether_home: Path, text: str, key: str, shown: str, allowed: str
) -> None:
    """A bad value is a ConfigError (exit 2) naming the file, key, value and what is allowed."""
    with pytest.raises(errors.ConfigError) as info:
        _load(tmp_path, tether_home, text)
    message = str(info.value)
    assert info.value.exit_code == 2
    assert str(tether_home / "config.toml") in message
    assert f"{key} = {shown}" in message
    assert allowed in message


@pytest.mark.parametrize(
    ("text", "named", "nearest"),
    [
        pytest.param('fromat = "json"', "fromat", "format", id="typo"),
        pytest.param("queue_max_dept = 3", "queue_max_dept", "queueMaxDepth", id="snake-typo"),
        pytest.param("Timeout = 3", "Timeout", "timeout", id="case"),
        pytest.param("[agents]\n[frobnicate]\nx = 1", "frobnicate", None, id="no-near"),
    ],
)
def test_unknown_keys_warn_with_the_nearest_and_are_ignored(
    tmp_path: Path, tether_home: Path, text: str, named: str, nearest: str | None
) -> None:
    """An unknown key is a warning naming it and the nearest known key; it is not kept."""
    merged, warnings = _load(tmp_path, tether_home, text)
    assert len(warnings) == 1
    assert named in warnings[0]
    assert str(tether_home / "config.toml") in warnings[0]
    if nearest:
        assert f"did you mean {nearest}?" in warnings[0]
    assert named not in merged


@pytest.mark.parametrize(
    ("text", "line"),
    [
        pytest.param("a = 1\ntimeout = [\n", 2, id="end-of-document"),
        pytest.param("ttl = 1\n\nthis is not toml\n", 3, id="bad-line"),
    ],
)
def test_malformed_toml_names_file_and_line(
    tmp_path: Path, tether_home: Path, text: str, line: int
) -> None:
    """A malformed file is a ConfigError naming the file and the line."""
    with pytest.raises(errors.ConfigError) as info:
        _load(tmp_path, tether_home, text)
    assert f"{tether_home / 'config.toml'}:{line}: malformed TOML" in str(info.value)


def test_good_values_are_normalised_and_project_wins(tmp_path: Path, tether_home: Path) -> None:
    """Valid files load; snake_case is accepted; the project file wins; tables merge."""
    (tmp_path / ".tether.toml").write_text('ttl = 5\n[agents.b]\nargv = ["b"]\n')
    merged, warnings = _load(
        tmp_path,
        tether_home,
        'owner_idle_ttl = 7\ndefault_agent = "mock"\ntimeout = 2\n[agents.a]\nargv = ["a"]\n'
        '[auth]\n"openai-api-key" = ""\n',
    )
    assert warnings == []
    assert merged["ttl"] == 5.0
    assert merged["defaultAgent"] == "mock"
    assert merged["timeout"] == 2.0
    assert merged["agents"] == {"a": {"argv": ["a"]}, "b": {"argv": ["b"]}}
    assert merged["auth"] == {"openai-api-key": ""}


def test_every_key_is_declared_with_default_and_help() -> None:
    """Each schema entry has a default in DEFAULTS and a description (one line per key)."""
    for name, key in config.SCHEMA.items():
        assert name in config.DEFAULTS
        assert key.help
        assert key.allowed


def test_no_toml_parser_without_a_config_file(tmp_path: Path) -> None:
    """Without a config file, loading imports no tomllib (the thin path stays thin)."""
    code = (
        "import sys; from tether import config; config.load(sys.argv[1]);"
        " print('tomllib' in sys.modules, 'difflib' in sys.modules)"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert r.stdout.split() == ["False", "False"], r.stderr


def test_nested_tables_are_validated_key_by_key() -> None:
    """A table with its own keys (e.g. [sessions]) names dotted keys in errors and warnings."""
    schema = {
        "sessions": config.table(
            "session settings",
            keys={"visibility": config.choice("tree", ("self", "tree", "all"), "who sees what")},
        )
    }
    warnings: list[str] = []
    data = {"sessions": {"visibilty": "all", "visibility": "all"}}
    assert config.validate(data, "f.toml", warnings.append, schema) == {
        "sessions": {"visibility": "all"}
    }
    assert warnings == [
        "unknown config key sessions.visibilty in f.toml; did you mean visibility? (ignored)"
    ]
    with pytest.raises(errors.ConfigError) as info:
        config.validate({"sessions": {"visibility": "some"}}, "f.toml", warnings.append, schema)
    assert 'f.toml: sessions.visibility = "some" is not allowed' in str(info.value)


def test_a_project_file_may_narrow_visibility_but_never_widen_it(
    tmp_path: Path, tether_home: Path
) -> None:
    """The working tree is the agent's to write: its .tether.toml cannot choose a wider
    policy than the operator's user file."""
    (tmp_path / ".tether.toml").write_text(
        '[sessions]\nvisibility = "all"\nclose_children = false\n'
        '[agent_to_agent]\nenabled = true\nallow = ["*"]\n'
    )
    merged, warnings = _load(tmp_path, tether_home, '[sessions]\nvisibility = "agent"\n')
    assert merged["sessions"] == {"visibility": "agent", "closeChildren": False}
    # `allow = ["*"]` stays: the user's empty list already allows every id
    assert merged["agentToAgent"] == {"enabled": False, "allow": ("*",)}
    assert len(warnings) == 2
    assert "sessions.visibility = 'all' is wider than 'agent'" in warnings[0]
    assert str(tether_home / "config.toml") in warnings[0]
    (tmp_path / ".tether.toml").write_text(
        '[sessions]\nvisibility = "self"\n[agentToAgent]\nenabled = false\nallow = ["a*"]\n'
    )
    merged, warnings = _load(
        tmp_path,
        tether_home,
        '[sessions]\nvisibility = "all"\n[agentToAgent]\nenabled = true\nallow = ["a*", "b"]\n',
    )
    assert warnings == []
    assert merged["sessions"]["visibility"] == "self"
    assert merged["agentToAgent"] == {"enabled": False, "allow": ("a*",)}


def test_a_project_allow_list_is_narrower_than_the_users_empty_one(
    tmp_path: Path, tether_home: Path
) -> None:
    """An empty ``allow`` allows every id: a project's list narrows it; an empty project
    list under a non-empty user list would widen it, and is ignored."""
    (tmp_path / ".tether.toml").write_text('[agentToAgent]\nallow = ["x"]\n')
    merged, warnings = _load(tmp_path, tether_home, "")
    assert warnings == []
    assert merged["agentToAgent"]["allow"] == ("x",)
    (tmp_path / ".tether.toml").write_text("[agentToAgent]\nallow = []\n")
    merged, warnings = _load(tmp_path, tether_home, '[agentToAgent]\nallow = ["x"]\n')
    assert len(warnings) == 1
    assert merged["agentToAgent"]["allow"] == ("x",)
