"""The one table of owner settings (issue 22): every door's settings come from it, the
owner reads its names, and ``status`` reports them under the same names."""

from __future__ import annotations

from typing import Any

import pytest

from tether import config, operations
from tether.errors import UsageError
from tether.operations.settings_table import FLAG_ONLY, TABLE
from tether.owner.settings import OwnerSettings

# Config keys that are no owner setting: the caller's own (format, timeout, retries,
# what an undecided question does), which agent, credentials (never stored with a
# session) and the policies tether.policy.access and the gateway read themselves.
NOT_OWNER = {
    "defaultAgent",
    "promptRetries",
    "nonInteractivePermissions",
    "format",
    "timeout",
    "agents",
    "auth",
    "sessions",
    "agentToAgent",
    "serve",
}


def test_the_table_covers_every_owner_key_of_the_schema() -> None:
    """A config key is an owner setting in the table, or named here as none: a new key
    cannot be read by one door and missed by another."""
    keys = [key for _option, key in TABLE]
    assert len(keys) == len(set(keys))
    assert set(keys) | NOT_OWNER == set(config.SCHEMA)
    assert not set(keys) & NOT_OWNER


def test_an_empty_config_gives_the_schemas_defaults() -> None:
    out = operations.settings({})
    assert set(out) == {option for option, _ in TABLE} | set(FLAG_ONLY)
    assert out["idle_ttl"] == 3600.0
    assert out["turn_timeout"] == 1800.0
    assert out["mcp_servers"] == []
    assert out["fs"] is True


def test_flags_win_over_the_config_and_none_is_not_given() -> None:
    cfg = {**config.DEFAULTS, "ttl": 60.0, "turnTimeout": 30.0}
    out = operations.settings(cfg, {"idle_ttl": 5, "turn_timeout": None, "fs": False})
    assert (out["idle_ttl"], out["turn_timeout"], out["fs"]) == (5.0, 30.0, False)


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        pytest.param({"idle_ttl": -1}, "config key ttl", id="negative-ttl"),
        pytest.param({"queue_max_depth": 0}, "a whole number", id="zero-depth"),
        pytest.param({"permission_mode": "yolo"}, "approve-all", id="bad-mode"),
        pytest.param({"fs": "no"}, "true or false", id="fs-not-bool"),
        pytest.param({"turn_timout": 3}, "unknown owner setting", id="typo"),
    ],
)
def test_a_bad_flag_is_refused_as_the_config_key_would_be(flags: dict[str, Any], says: str) -> None:
    with pytest.raises(UsageError, match=says):
        operations.settings({}, flags)


def test_the_owner_reports_what_it_received_under_the_same_names() -> None:
    """Every option the table gives is one the owner's ``effective()`` reports, with the
    value it received (MCP servers by name)."""
    cfg = {
        **config.DEFAULTS,
        "turnTimeout": 5.0,
        "queueMaxDepth": 3,
        "journalMaxEntries": 9,
        "frameMaxBytes": 100_000_000,
        "terminalPty": True,
        "mcpServers": ({"name": "x", "command": "true", "env": {"TOKEN": "secret"}},),
    }
    options = operations.settings(cfg)
    settings = OwnerSettings.from_options(options)
    settings.load_config("/", options)
    effective = settings.effective()
    assert set(effective) == set(options)
    same = {k for k in options if k != "mcp_servers"}
    assert {k: effective[k] for k in same} == {k: options[k] for k in same}
    assert effective["mcp_servers"] == ["x"]  # names only: a server's env may hold secrets


def test_agent_frames_are_never_below_the_prompt_limit() -> None:
    options = operations.settings({**config.DEFAULTS, "frameMaxBytes": 10, "promptMaxBytes": 99})
    settings = OwnerSettings.from_options(options)
    settings.load_config("/", options)
    assert settings.effective()["agent_frame_bytes"] == 99
