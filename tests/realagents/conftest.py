"""Fixtures for the ``realagents`` tier: agents written by others, driven offline.

Each agent fixture installs (or finds cached) its agent through ``install.py`` and skips
the test *with the install's stated reason* when that is impossible (no node/npm, registry
unreachable, ...). Nothing here passes vacuously.

Agent environments are built from scratch (PATH and locale only from ours) so a
developer's real credentials or config never reach an agent, and HOME / CODEX_HOME /
CLAUDE_CONFIG_DIR point into the test's tmp dir so ``~/.claude`` and ``~/.codex`` are never
touched.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import _tiers
from tests.realagents import install
from tests.realagents.blackhole import BlackHole
from tests.realagents.fake_anthropic import FakeAnthropic
from tests.realagents.fake_gemini import FakeGemini
from tests.realagents.fake_openai import FakeOpenAI
from tests.realagents.rawdriver import RawAgent

HERE = Path(__file__).resolve().parent

# Collected across the session and printed in the terminal summary (and saved as JSON
# under .cache/realagents/) so NOTES.md / the README table can quote real numbers.
TIMINGS: dict[str, list[float]] = {}
INVALID_FROM_AGENTS: list[tuple[str, dict[str, Any], list[str]]] = []
REPORT_PATH = install.CACHE_DIR / "last-run.json"
_INSTALLS: dict[str, install.Component | install.SkipReason] = {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Belt and braces next to each module's ``pytestmark``: everything under this folder
    # is ``realagents``, so ``-m "not realagents"`` always deselects it.
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.realagents)


def pytest_collection_finish(session: pytest.Session) -> None:
    # Install (or verify the cache) once, before any test starts, so a slow first npm
    # install is not charged to the first test's timeout. Only when this tier is selected.
    if any(HERE in Path(str(item.path)).resolve().parents for item in session.items):
        for name, ensure in install.ENSURERS.items():
            _INSTALLS[name] = ensure()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not TIMINGS and not INVALID_FROM_AGENTS:
        return
    tr = terminalreporter
    tr.section("realagents timings (seconds)")
    for key in sorted(TIMINGS):
        vals = sorted(TIMINGS[key])
        tr.write_line(
            f"{key:40} n={len(vals):2} min={vals[0]:.3f} median={vals[len(vals) // 2]:.3f}"
            f" max={vals[-1]:.3f}"
        )
    if INVALID_FROM_AGENTS:
        tr.section("realagents: frames from agents that do not validate against schema.json")
        for who, frame, errs in INVALID_FROM_AGENTS[:30]:
            tr.write_line(f"{who}: {json.dumps(frame)[:300]}")
            for e in errs[:5]:
                tr.write_line(f"    {e[:300]}")
    try:
        REPORT_PATH.parent.mkdir(parents=True, exist_ok=True)
        REPORT_PATH.write_text(
            json.dumps(
                {
                    "timings": TIMINGS,
                    "invalid_from_agents": [
                        {"agent": w, "frame": f, "errors": e} for w, f, e in INVALID_FROM_AGENTS
                    ],
                },
                indent=1,
            )
        )
    except OSError:
        pass


@pytest.fixture
def record_timing() -> Callable[[str, float], None]:
    def record(key: str, seconds: float) -> None:
        TIMINGS.setdefault(key, []).append(seconds)

    return record


@pytest.fixture
def report_invalid_agent_frame(
    request: pytest.FixtureRequest,
) -> Callable[[str, dict[str, Any], list[str]], None]:
    """Collect a frame an agent sent that does not validate (shown in the summary)."""

    def report(agent: str, frame: dict[str, Any], errors: list[str]) -> None:
        INVALID_FROM_AGENTS.append((f"{request.node.name}: {agent}", frame, errors))

    return report


# --- installs (session-scoped: checked once, skipped with the reason) -------------------


def _need(comp: install.Component | install.SkipReason) -> install.Component:
    if isinstance(comp, install.SkipReason):
        _tiers.unavailable("realagents", f"realagents: {comp}")
    return comp


@pytest.fixture(scope="session")
def node_install() -> install.Component | install.SkipReason:
    return _INSTALLS.get("node") or install.ensure_node()


@pytest.fixture(scope="session")
def claude_install() -> install.Component | install.SkipReason:
    return _INSTALLS.get("claude") or install.ensure_claude()


@pytest.fixture(scope="session")
def codex_install() -> install.Component | install.SkipReason:
    return _INSTALLS.get("codex") or install.ensure_codex()


@pytest.fixture(scope="session")
def codex_legacy_install() -> install.Component | install.SkipReason:
    return _INSTALLS.get("codex-legacy") or install.ensure_codex_legacy()


@pytest.fixture(scope="session")
def gemini_install() -> install.Component | install.SkipReason:
    return _INSTALLS.get("gemini") or install.ensure_gemini()


@pytest.fixture(scope="session")
def opencode_install() -> install.Component | install.SkipReason:
    return _INSTALLS.get("opencode") or install.ensure_opencode()


@pytest.fixture(scope="session")
def sdk_echo_install() -> install.Component | install.SkipReason:
    return _INSTALLS.get("sdk-echo") or install.ensure_sdk_echo()


# --- environments -----------------------------------------------------------------------


def base_agent_env(home: Path, node: install.Component | None = None) -> dict[str, str]:
    """PATH and locale from ours (``node``'s directory first when given), HOME and XDG in
    ``home``. Nothing else: in particular not ``IS_SANDBOX=yes``, which this container
    exports and which makes claude-agent-acp's Claude Code exit 1 when running as root."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TZ")}
    if node is not None:
        env["PATH"] = f"{node.path.parent}{os.pathsep}{env.get('PATH', '')}"
    home.mkdir(parents=True, exist_ok=True)
    env["HOME"] = str(home)
    env["XDG_CONFIG_HOME"] = str(home / ".config")
    env["XDG_CACHE_HOME"] = str(home / ".cache")
    env["XDG_DATA_HOME"] = str(home / ".local" / "share")
    env["XDG_STATE_HOME"] = str(home / ".local" / "state")
    return env


@pytest.fixture
def agent_home(tmp_path: Path) -> Path:
    """The HOME every real agent in the test sees (never the user's)."""
    home = tmp_path / "agent-home"
    home.mkdir()
    return home


@pytest.fixture
def fake_anthropic() -> Iterator[FakeAnthropic]:
    with FakeAnthropic(max_lifetime_s=120) as api:
        yield api


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(max_lifetime_s=120) as api:
        yield api


@pytest.fixture
def fake_gemini() -> Iterator[FakeGemini]:
    with FakeGemini(max_lifetime_s=120) as api:
        yield api


@pytest.fixture
def blackhole() -> Iterator[BlackHole]:
    with BlackHole(max_lifetime_s=120) as bh:
        yield bh


@pytest.fixture
def claude_agent_cmd(claude_install: install.Component | install.SkipReason) -> list[str]:
    """argv for claude-agent-acp (pinned, cached), or a skip with the install's reason."""
    return [str(_need(claude_install).path)]


@pytest.fixture
def node22(node_install: install.Component | install.SkipReason) -> install.Component:
    """Node >= 22 (the current adapters need it): its directory goes first on PATH."""
    return _need(node_install)


@pytest.fixture
def claude_agent_env(
    agent_home: Path, fake_anthropic: FakeAnthropic, node22: install.Component
) -> dict[str, str]:
    env = base_agent_env(agent_home, node22)
    # 0.101.0 starts sessions in its "auto" mode (a model classifier decides tool use, and
    # every turn against a non-Anthropic base URL ends with a billing warning). Manual mode
    # ("default") asks session/request_permission, which is what these tests exercise.
    (agent_home / ".claude").mkdir(exist_ok=True)
    (agent_home / ".claude" / "settings.json").write_text(
        json.dumps({"permissions": {"defaultMode": "default"}})
    )
    env.update(
        ANTHROPIC_API_KEY="sk-ant-dummy-tether-tests",
        ANTHROPIC_BASE_URL=fake_anthropic.base_url,
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        CLAUDE_CONFIG_DIR=str(agent_home / ".claude"),
        DISABLE_AUTOUPDATER="1",
    )
    return env


def codex_provider_config(codex_home: Path, base_url: str) -> None:
    """``$CODEX_HOME/config.toml`` whose only model provider is ``base_url`` (a loopback
    fake or black hole). Without it codex-acp talks to api.openai.com, and offline 2.6.0
    retries forever ("Reconnecting... waiting for network")."""
    codex_home.mkdir(exist_ok=True)
    (codex_home / "config.toml").write_text(
        'model_provider = "tether-fake"\n'
        "\n"
        "[model_providers.tether-fake]\n"
        'name = "tether-fake"\n'
        f'base_url = "{base_url}"\n'
        'env_key = "OPENAI_API_KEY"\n'
        'wire_api = "responses"\n'
        "request_max_retries = 0\n"
        "stream_max_retries = 0\n"
    )


@pytest.fixture
def codex_agent_cmd(codex_install: install.Component | install.SkipReason) -> list[str]:
    """argv for codex-acp 2.6.0 (cached), or a skip with the install's reason."""
    return [str(_need(codex_install).path)]


@pytest.fixture
def codex_agent_env(
    agent_home: Path, fake_openai: FakeOpenAI, node22: install.Component
) -> dict[str, str]:
    """codex-acp 2.6.0 against the loopback fake Responses API (a custom provider, so no
    ``authenticate`` is needed)."""
    codex_provider_config(agent_home / ".codex", f"{fake_openai.base_url}/v1")
    env = base_agent_env(agent_home, node22)
    env.update(OPENAI_API_KEY="sk-dummy", CODEX_HOME=str(agent_home / ".codex"))
    return env


@pytest.fixture
def codex_legacy_agent_cmd(
    codex_legacy_install: install.Component | install.SkipReason,
) -> list[str]:
    """argv for the legacy codex-acp 0.16.0 (cached), or a skip with the install's reason."""
    return [str(_need(codex_legacy_install).path)]


@pytest.fixture
def codex_legacy_agent_env(agent_home: Path, blackhole: BlackHole) -> dict[str, str]:
    """OPENAI_API_KEY=sk-dummy and a private CODEX_HOME whose only model provider is a
    loopback black hole: prompts hang (until cancelled) with or without real network."""
    codex_provider_config(agent_home / ".codex", blackhole.base_url)
    env = base_agent_env(agent_home)
    env.update(OPENAI_API_KEY="sk-dummy", CODEX_HOME=str(agent_home / ".codex"))
    return env


@pytest.fixture
def gemini_agent_cmd(gemini_install: install.Component | install.SkipReason) -> list[str]:
    """argv for ``gemini --acp`` (pinned, cached), or a skip with the install's reason."""
    return [str(_need(gemini_install).path), "--acp"]


@pytest.fixture
def gemini_agent_env(
    agent_home: Path, fake_gemini: FakeGemini, node22: install.Component
) -> dict[str, str]:
    """gemini-cli against the loopback fake Gemini API (``GOOGLE_GEMINI_BASE_URL``; with
    ``GEMINI_API_KEY`` set it needs no ``authenticate``)."""
    env = base_agent_env(agent_home, node22)
    env.update(GEMINI_API_KEY="dummy-tether-tests", GOOGLE_GEMINI_BASE_URL=fake_gemini.base_url)
    return env


@pytest.fixture
def opencode_agent_cmd(opencode_install: install.Component | install.SkipReason) -> list[str]:
    """argv for ``opencode acp`` (pinned, cached), or a skip with the install's reason."""
    return [str(_need(opencode_install).path), "acp"]


@pytest.fixture
def opencode_agent_env(agent_home: Path, fake_openai: FakeOpenAI) -> dict[str, str]:
    """opencode with its built-in ``openai`` provider pointed at the loopback fake
    Responses API, and a model of our own (``openai/gpt-fake-1``), from
    ``$XDG_CONFIG_HOME/opencode/opencode.json``."""
    env = base_agent_env(agent_home)
    conf = Path(env["XDG_CONFIG_HOME"]) / "opencode"
    conf.mkdir(parents=True)
    provider = {
        "options": {"baseURL": f"{fake_openai.base_url}/v1", "apiKey": "sk-dummy"},
        "models": {"gpt-fake-1": {"name": "fake"}},
    }
    (conf / "opencode.json").write_text(
        json.dumps(
            {
                "autoupdate": False,
                "share": "disabled",
                "model": "openai/gpt-fake-1",
                "provider": {"openai": provider},
            }
        )
    )
    env.update(OPENCODE_DISABLE_AUTOUPDATE="1", OPENCODE_DISABLE_MODELS_FETCH="1")
    return env


@pytest.fixture
def sdk_echo_agent_cmd(sdk_echo_install: install.Component | install.SkipReason) -> list[str]:
    """[python, echo_agent.py] from the agent-client-protocol sdist."""
    comp = _need(sdk_echo_install)
    try:
        import acp  # noqa: F401
    except ImportError as e:  # pragma: no cover - the dev extra pins it
        _tiers.unavailable(
            "realagents", f"realagents: agent-client-protocol is not importable: {e}"
        )
    return [sys.executable, str(comp.path)]


@pytest.fixture
def sdk_echo_agent_env(agent_home: Path) -> dict[str, str]:
    env = base_agent_env(agent_home)
    env["PYTHONUNBUFFERED"] = "1"
    return env


# --- the raw driver ---------------------------------------------------------------------


def _label(argv: list[str]) -> str:
    """``codex22/codex-acp`` for a cached npm bin (the prefix tells the versions apart)."""
    for arg in argv:
        parts = Path(arg).parts
        if "node_modules" in parts:
            return f"{parts[parts.index('node_modules') - 1]}/{parts[-1]}"
    return Path(argv[-1]).name


@pytest.fixture
def raw_agent(
    request: pytest.FixtureRequest, project_dir: Path
) -> Iterator[Callable[..., RawAgent]]:
    """Factory: ``raw_agent(argv, env=...)`` -> a started RawAgent, closed (whole process
    group killed and reaped) at teardown; frames the agent sent that do not validate are
    collected for the summary."""
    started: list[RawAgent] = []

    graces: dict[int, float] = {}

    def start(
        argv: list[str], *, env: dict[str, str], cwd: Path | None = None, eof_grace_s: float = 3.0
    ) -> RawAgent:
        agent = RawAgent(argv, env=env, cwd=cwd or project_dir).start()
        started.append(agent)
        graces[id(agent)] = eof_grace_s
        return agent

    yield start
    for agent in started:
        agent.close(eof_grace_s=graces[id(agent)])
        who = f"{request.node.name}: {_label(agent.argv)}"
        for frame, errs in agent.invalid_received:
            INVALID_FROM_AGENTS.append((who, frame, errs))
        if agent.exit_after_eof_s is not None:
            TIMINGS.setdefault(f"{_label(agent.argv)} exit after stdin EOF", []).append(
                agent.exit_after_eof_s
            )
