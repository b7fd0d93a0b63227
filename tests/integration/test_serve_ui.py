"""The dashboard at /ui in a real browser: Debian's headless Chromium driven by
Playwright (never a downloaded browser), against a real gateway and real owners.

Skipped, with the reason, where ``/usr/bin/chromium`` is absent (install it with
``apt-get install chromium``); failed instead where the run requires the browser tier
(``.ci/run`` does, after installing it).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests import _tiers
from tests.integration._serve import Gateway, gateway

pytest.importorskip("starlette", reason="tether serve needs the serve extra")
playwright = pytest.importorskip("playwright.sync_api", reason="needs the playwright package")
pytestmark = [pytest.mark.integration, pytest.mark.browser]
__all__ = ["gateway"]

CHROMIUM = os.environ.get("TETHER_TEST_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
UI_TIMEOUT_MS = 30_000  # a shared 2-core machine: generous, and never a timed assertion

if not os.access(CHROMIUM, os.X_OK):
    _tiers.unavailable(
        "browser",
        f"no Chromium at {CHROMIUM}: `apt-get install chromium` (Debian's package) to run"
        " the dashboard's browser tests",
    )


@pytest.fixture
def page(tmp_path: Path) -> Iterator[Any]:
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM)
        try:
            context = browser.new_context(viewport={"width": 1440, "height": 900})
            yield context.new_page()
        finally:
            browser.close()


def expect(locator: Any) -> Any:
    return playwright.expect(locator)


def test_the_dashboard_lists_a_running_session_streams_it_and_its_buttons_work(
    gateway: Gateway, project_dir: Path, page: Any, tmp_path: Path
) -> None:
    """A running session is listed as running; opening it shows its turn streaming live
    (text appears while the turn still runs); Cancel ends the turn ``cancelled`` and
    Close ends the session, both visible in the page and in the API."""
    playwright.expect.set_options(timeout=UI_TIMEOUT_MS)
    sid = gateway.ensure(project_dir, name="ui")
    turn = gateway.prompt(sid, "stream 3 tick ; sleep 1500 ; stream 3 tock ; sleep 120000")
    page.goto(f"{gateway.url}/ui/#token={gateway.token}")
    assert "token=" not in page.url  # taken from the fragment, then removed

    row = page.locator(f'#sessions tr[data-id="{sid}"]')
    expect(row.locator(".badge")).to_have_text("running")
    expect(row).to_contain_text("mock")
    row.click()
    transcript = page.locator("#transcript")
    expect(transcript).to_contain_text("tick 2")
    expect(transcript).to_contain_text("tock 2")  # arrived later, on the same stream
    status = gateway.http.get(f"/v1/sessions/{sid}").json()["status"]
    assert status["currentRequest"] == turn["requestId"]  # still running: it was live
    expect(page.locator("#d-procs")).to_contain_text("agent")
    expect(page.locator("#d-procs")).to_contain_text(str(status["agentPid"]))

    page.click("#btn-cancel")
    expect(transcript).to_contain_text("[done] cancelled")
    expect(row.locator(".badge")).to_have_text("idle")
    turns = gateway.http.get(f"/v1/sessions/{sid}/history").json()["turns"]
    assert turns[-1]["stopReason"] == "cancelled"

    page.screenshot(path=str(tmp_path / "dashboard.png"))
    page.on("dialog", lambda dialog: dialog.accept())
    page.click("#btn-close")
    expect(transcript).to_contain_text("session ended")
    assert gateway.http.get(f"/v1/sessions/{sid}").json()["state"] == "closed"
    expect(page.locator(f'#sessions tr[data-id="{sid}"]')).to_have_count(0)  # open ones only


def test_the_dashboard_asks_for_the_token(gateway: Gateway, project_dir: Path, page: Any) -> None:
    """Without a token the page asks for one, keeps it for the tab, then lists sessions."""
    playwright.expect.set_options(timeout=UI_TIMEOUT_MS)
    sid = gateway.ensure(project_dir)
    page.goto(f"{gateway.url}/ui/")
    dialog = page.locator("#token-dialog")
    expect(dialog).to_be_visible()
    page.fill("#token-input", gateway.token)
    page.click("#token-form button")
    expect(page.locator(f'#sessions tr[data-id="{sid}"]')).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('tether.token')") == gateway.token


def test_allow_on_a_pending_question_lets_the_turn_finish(
    gateway: Gateway, project_dir: Path, page: Any, tmp_path: Path
) -> None:
    """With the session open in the dashboard (a controller), the agent's permission
    request waits; it is shown with its buttons, and a click on Allow lets the turn
    finish with the tool allowed."""
    playwright.expect.set_options(timeout=UI_TIMEOUT_MS)
    sid = gateway.ensure(project_dir)  # approve-reads: an edit is asked
    page.goto(f"{gateway.url}/ui/#token={gateway.token}")
    page.locator(f'#sessions tr[data-id="{sid}"]').click()
    expect(page.locator("#d-stream")).to_contain_text("live")
    turn = gateway.prompt(sid, "tool edit README.md")
    question = page.locator("#d-questions .question")
    expect(question).to_contain_text("edit")
    status = gateway.http.get(f"/v1/sessions/{sid}").json()["status"]
    assert status["currentRequest"] == turn["requestId"]  # the turn waits for the answer
    page.screenshot(path=str(tmp_path / "question.png"))
    question.locator("button.allow").click()
    transcript = page.locator("#transcript")
    expect(transcript).to_contain_text("permission: allowed")
    expect(transcript).to_contain_text("[done] end_turn")
    expect(page.locator("#d-questions")).to_be_hidden()
    turns = gateway.http.get(f"/v1/sessions/{sid}/history").json()["turns"]
    assert turns[-1]["stopReason"] == "end_turn"


def test_nothing_is_offered_before_a_session_is_selected_then_it_says_who_is_attached(
    gateway: Gateway, project_dir: Path, page: Any
) -> None:
    """Before a session is selected the detail pane and its buttons are hidden (no
    request ever names a ``null`` session); once one is, "agent started" names the
    agent's pid and the status card lists who is attached -- this page's own stream
    (the gateway's pid, door http, a watcher and a controller)."""
    playwright.expect.set_options(timeout=UI_TIMEOUT_MS)
    sid = gateway.ensure(project_dir)
    gateway.until_turn_end(sid, gateway.prompt(sid, "echo hi")["requestId"], query="?from=1")
    agent_pid = gateway.http.get(f"/v1/sessions/{sid}").json()["status"]["agentPid"]
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(f"{gateway.url}/ui/#token={gateway.token}")
    row = page.locator(f'#sessions tr[data-id="{sid}"]')
    expect(row).to_be_visible()
    expect(page.locator("#detail-pane")).to_be_hidden()
    for button in ("#btn-cancel", "#btn-close", "#btn-terminate", "#prompt-form button"):
        expect(page.locator(button)).to_be_hidden()
    assert not any("/null" in url for url in requests), requests

    row.click()
    expect(page.locator("#detail-pane")).to_be_visible()
    expect(page.locator("#btn-terminate")).to_be_visible()  # the route is always there
    expect(page.locator("#transcript")).to_contain_text(f"agent started (pid {agent_pid})")
    health = gateway.http.get("/v1/health").json()
    expect(page.locator("#d-status")).to_contain_text(
        f"watcher+controller · pid {health['pid']} · uid {os.getuid()} · http"
    )
    assert not any("/null" in url for url in requests), requests
