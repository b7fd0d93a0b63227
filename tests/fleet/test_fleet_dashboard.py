"""The dashboard through a fleet router, in a real browser (Debian's Chromium driven by
Playwright): the session list says which host each session lives on, and opening a
session shows its host (issue 24: "the dashboard shows which host each session lives
on")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fleet.test_fleet_e2e import Processes, create, procs, turn_text
from tests.integration.test_serve_ui import UI_TIMEOUT_MS, page

pytest.importorskip("starlette", reason="tether serve needs the serve extra")
playwright = pytest.importorskip("playwright.sync_api", reason="needs the playwright package")
pytestmark = [
    pytest.mark.fleet,
    pytest.mark.browser,
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout(240),
]
__all__ = ["page", "procs"]  # fixtures, imported for pytest


def test_the_dashboard_through_a_router_names_each_sessions_host(
    procs: Processes, project_dir: Path, page: Any
) -> None:
    playwright.expect.set_options(timeout=UI_TIMEOUT_MS)
    procs.host("h1", "zone=a")
    procs.host("h2", "zone=b")
    router = procs.router()
    a = create(router, project_dir, "on-a", labels={"zone": "a"})
    b = create(router, project_dir, "on-b", labels={"zone": "b"})
    assert "hello" in turn_text(router, b["id"], "echo hello")
    page.goto(f"{router.url}/ui/#token={router.token}")
    expect = playwright.expect
    expect(page.locator("#host-col")).to_be_visible()
    row_a = page.locator(f'#sessions tr[data-id="{a["id"]}"]')
    row_b = page.locator(f'#sessions tr[data-id="{b["id"]}"]')
    expect(row_a.locator("td.host")).to_have_text("h1")
    expect(row_b.locator("td.host")).to_have_text("h2")
    row_b.click()
    expect(page.locator("#d-status")).to_contain_text("h2")
    expect(page.locator("#transcript")).to_contain_text("hello")
