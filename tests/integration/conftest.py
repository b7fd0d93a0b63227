"""Fixtures shared by the integration tests: the CLI drivers of ``test_owner``."""

from __future__ import annotations

from tests.integration.test_owner import cli, mock

__all__ = ["cli", "mock"]
