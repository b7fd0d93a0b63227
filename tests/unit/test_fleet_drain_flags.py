"""`tether serve --drain-grace SECONDS` and `--drain`: parsed, checked, host-only."""

from __future__ import annotations

import pytest

from tether.cli._parse import parse
from tether.errors import UsageError
from tether.fleet.command import fleet_args
from tether.serve.command import _drain_grace

ENV = {"TETHER_FLEET_INDEX": "postgresql://tether@db/tether", "TETHER_FLEET_TOKEN": "f" * 32}


def test_the_grace_is_a_host_flag_with_a_config_key_and_a_default() -> None:
    """--drain-grace wins over serve.drainGrace, which wins over the 30 s default."""
    fleet = fleet_args(parse(["serve", "--drain-grace", "12.5"]), ENV)
    assert fleet is not None
    assert fleet.drain_grace == 12.5
    assert _drain_grace(fleet.drain_grace, {"serve": {"drainGrace": 5}}) == 12.5
    assert _drain_grace(None, {"serve": {"drainGrace": 5}}) == 5.0
    assert _drain_grace(None, {}) == 30.0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["--drain-grace", "soon"], "expects a number of seconds", id="not-a-number"),
        pytest.param(["--drain-grace", "-1"], "must be a number of seconds >= 0", id="negative"),
        pytest.param(["--drain-grace", "inf"], "must be a number of seconds >= 0", id="infinite"),
    ],
)
def test_a_bad_grace_is_a_usage_error(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse(["serve", *argv])


def test_the_grace_needs_a_fleet_and_is_not_a_routers() -> None:
    """A single gateway needs no drain (its owners outlive it); a router has no turns."""
    with pytest.raises(UsageError, match="--drain-grace needs --fleet-index"):
        fleet_args(parse(["serve", "--drain-grace", "3"]), {})
    with pytest.raises(UsageError, match="--router cannot be combined with --drain-grace"):
        fleet_args(parse(["serve", "--router", "--drain-grace", "3"]), ENV)
