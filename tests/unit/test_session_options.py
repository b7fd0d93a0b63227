"""acpx's session options, decided from what the agent said (tether.acp.session_options)."""

from __future__ import annotations

from typing import Any

import pytest

from tether.acp.session_options import model_method, session_new_extras
from tether.errors import AgentOptionUnsupported

CLAUDE = {"name": "@agentclientprotocol/claude-agent-acp", "version": "0.101.0"}
OTHER = {"name": "codex-acp"}
SYSTEM_PROMPT_CAPS = {"sessionCapabilities": {"systemPrompt": {"mode": {"override": {}}}}}
APPEND_ONLY_CAPS = {"sessionCapabilities": {"systemPrompt": {}}}


def test_no_options_add_nothing() -> None:
    """Without options session/new carries nothing extra, for any agent."""
    assert session_new_extras({}, OTHER, {}) == {}


def test_claude_gets_its_meta_options() -> None:
    """allowedTools and maxTurns go to claude-agent-acp as _meta.claudeCode.options."""
    extras = session_new_extras({"allowedTools": [], "maxTurns": 2}, CLAUDE, {})
    assert extras == {"_meta": {"claudeCode": {"options": {"allowedTools": [], "maxTurns": 2}}}}


@pytest.mark.parametrize(
    ("name", "flag"), [("allowedTools", "--allowed-tools"), ("maxTurns", "--max-turns")]
)
def test_other_agents_refuse_claude_only_options(name: str, flag: str) -> None:
    """No other agent reads them: refused naming the flag and the reason, never dropped."""
    with pytest.raises(AgentOptionUnsupported, match=f"{flag}: codex-acp .*claude-agent-acp"):
        session_new_extras({name: 1}, OTHER, {})


@pytest.mark.parametrize(
    ("options", "info", "caps", "expected"),
    [
        (
            {"systemPrompt": "x"},
            OTHER,
            SYSTEM_PROMPT_CAPS,
            {"systemPrompt": {"mode": "override", "content": [{"type": "text", "text": "x"}]}},
        ),
        (
            {"appendSystemPrompt": "x"},
            OTHER,
            APPEND_ONLY_CAPS,
            {"systemPrompt": {"mode": "append", "content": [{"type": "text", "text": "x"}]}},
        ),
        ({"systemPrompt": "x"}, CLAUDE, {}, {"_meta": {"systemPrompt": "x"}}),
        ({"appendSystemPrompt": "x"}, CLAUDE, {}, {"_meta": {"systemPrompt": {"append": "x"}}}),
        # advertised without override: claude-agent-acp still reads _meta
        ({"systemPrompt": "x"}, CLAUDE, APPEND_ONLY_CAPS, {"_meta": {"systemPrompt": "x"}}),
    ],
)
def test_the_system_prompt_goes_the_way_the_agent_offers(
    options: dict[str, Any], info: dict[str, Any], caps: dict[str, Any], expected: dict[str, Any]
) -> None:
    """ACP's systemPrompt where advertised (override only if listed), else claude's _meta."""
    assert session_new_extras(options, info, caps) == expected


def test_a_system_prompt_no_agent_way_is_refused_with_the_reason() -> None:
    """An agent with no way: the error says why (and points at append when that exists)."""
    with pytest.raises(AgentOptionUnsupported, match=r"no sessionCapabilities\.systemPrompt"):
        session_new_extras({"systemPrompt": "x"}, OTHER, {})
    with pytest.raises(AgentOptionUnsupported, match="use --append-system-prompt"):
        session_new_extras({"systemPrompt": "x"}, OTHER, APPEND_ONLY_CAPS)


def test_the_model_goes_through_the_model_category_option() -> None:
    """The config option of category model, whatever its id; else legacy set_model."""
    result = {
        "configOptions": [{"id": "fast", "type": "boolean"}, {"id": "m", "category": "model"}]
    }
    assert model_method("big", result, OTHER) == (
        "session/set_config_option",
        {"configId": "m", "value": "big"},
    )
    legacy = {"models": {"availableModels": [], "currentModelId": "a"}}
    assert model_method("big", legacy, OTHER) == ("session/set_model", {"modelId": "big"})


def test_a_model_without_selection_is_refused() -> None:
    with pytest.raises(
        AgentOptionUnsupported, match="--model: codex-acp offers no model selection"
    ):
        model_method("big", {"configOptions": [{"id": "fast"}]}, OTHER)


def test_the_model_option_is_found_by_category_not_id() -> None:
    """`set model X` reaches an option called anything, as long as its category is model."""
    from tether.acp.session_options import model_option_id

    assert model_option_id({"configOptions": [{"id": "llm", "category": "model"}]}) == "llm"
    assert model_option_id({"configOptions": [{"id": "model"}]}) is None
    assert model_option_id({}) is None
