"""The gateway's Host rule (tether.serve.hosts): what it answers, with no server."""

from __future__ import annotations

import pytest

from tether.errors import UsageError
from tether.serve import hosts
from tether.serve.hosts import host_rule, parse_host


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("LocalHost:8787", ("localhost", 8787)),
        ("127.0.0.1", ("127.0.0.1", None)),
        ("[::1]:80", ("[::1]", 80)),
        ("::1", ("[::1]", None)),
        ("a.example:", None),
        ("a.example:x", None),
        ("a.example:1234567", None),
        ("user@a.example", None),
        ("a/b", None),
        ("[::1", None),
        ("[::1]x", None),
        ("", None),
    ],
)
def test_parse_host(value: str, parsed: tuple[str, int | None] | None) -> None:
    assert parse_host(value) == parsed


def test_a_loopback_gateway_answers_its_own_names_with_its_port_or_none() -> None:
    rule = host_rule("127.0.0.1", 8787, [])
    assert rule is not None
    for ok in ("127.0.0.1:8787", "localhost:8787", "[::1]:8787", "localhost", "127.0.0.1"):
        assert rule.allows(ok), ok
    for bad in ("evil.example:8787", "evil.example", "localhost:8788", None, "", "a b"):
        assert not rule.allows(bad), bad


def test_entries_add_names_ports_or_anything() -> None:
    rule = host_rule("::1", 9, ["Proxy.Example", "other.example:443"])
    assert rule is not None
    assert rule.allows("proxy.example:9")
    assert rule.allows("other.example:443")
    assert not rule.allows("other.example:9")
    assert rule.allows("[::1]:9")
    anything = host_rule("127.0.0.1", 9, ["*"])
    assert anything is not None
    assert anything.allows("whatever:1")
    with pytest.raises(UsageError):
        host_rule("127.0.0.1", 9, ["a/b"])


def test_a_wildcard_bind_answers_the_machine_name_and_a_unix_socket_is_not_checked() -> None:
    rule = host_rule("0.0.0.0", 80, [], hostname="Box")
    assert rule is not None
    assert rule.allows("box")
    assert not rule.allows("0.0.0.0")
    assert host_rule(None, 0, []) is None
    only = host_rule(None, 0, ["a.example"])
    assert only is not None
    assert only.allows("a.example")
    assert not only.allows("b.example")


def test_an_allowed_header_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client sends the same Host on every request: allowed once, it is remembered; a
    refused one is parsed (and refused) every time."""
    parsed: list[str] = []
    real = hosts.parse_host

    def counted(value: str) -> tuple[str, int | None] | None:
        parsed.append(value)
        return real(value)

    monkeypatch.setattr(hosts, "parse_host", counted)
    rule = host_rule("127.0.0.1", 8787, [])
    assert rule is not None
    for _ in range(3):
        assert rule.allows("localhost:8787")
        assert not rule.allows("evil.example:8787")
    assert parsed == ["localhost:8787"] + ["evil.example:8787"] * 3
