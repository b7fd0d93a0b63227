"""Test tiers that need something from outside the repository (Debian's Chromium, Node
and the npm registry): skipped with the reason on a machine without it, but *failed*
where the run says the tier is expected.

``.ci/run`` installs what the tiers need and sets ``TETHER_TEST_REQUIRE_TIERS`` (a
space-separated list, e.g. ``"browser realagents"``), so CI can never be green because a
tier quietly skipped itself.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

ENV = "TETHER_TEST_REQUIRE_TIERS"


def required() -> frozenset[str]:
    return frozenset(os.environ.get(ENV, "").replace(",", " ").split())


def unavailable(tier: str, reason: str) -> NoReturn:
    """Skip (the tier is optional here) or fail (this run requires it) with ``reason``."""
    if tier in required():
        pytest.fail(f"{reason} -- and this run requires the {tier} tier ({ENV})", pytrace=False)
    pytest.skip(reason, allow_module_level=True)
