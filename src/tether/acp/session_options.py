"""Session options an agent is asked for when its ACP session opens (acpx's flags).

``--model``, ``--allowed-tools``, ``--max-turns``, ``--system-prompt`` and
``--append-system-prompt`` are not ACP methods of their own. Each goes the way the agent
offers, decided here without I/O from what the agent said in ``initialize`` and
``session/new``:

- **model**: the session's config option of category ``model`` (``session/set_config_option``
  with that option's id), else the legacy ``session/set_model`` when the session result
  carries ``models``; else the agent offers no way, and that is an error naming it.
- **system prompt**: ACP's ``systemPrompt`` on ``session/new`` (``{mode, content}``) when the
  agent advertises ``sessionCapabilities.systemPrompt`` (override only where its ``mode``
  lists ``override``); else claude-agent-acp's ``_meta.systemPrompt`` (a string replaces,
  ``{"append": …}`` appends), which older claude-agent-acp versions read; else an error.
- **allowed tools, max turns**: claude-agent-acp's ``_meta.claudeCode.options``
  (``allowedTools``, ``maxTurns``); no other agent reads them, so for any other agent they
  are refused with the reason rather than silently dropped.

The options travel as one JSON object (``AgentOptions``: ``model``, ``allowedTools``,
``maxTurns``, ``systemPrompt`` or ``appendSystemPrompt``), stored with the session.
"""

from __future__ import annotations

from typing import Any

from tether.errors import AgentOptionUnsupported

__all__ = ["CLAUDE_AGENT_NAMES", "model_method", "model_option_id", "session_new_extras"]

# agentInfo.name of the adapters that read _meta.claudeCode.options (both npm names).
CLAUDE_AGENT_NAMES = frozenset({"claude-agent-acp", "@agentclientprotocol/claude-agent-acp"})
CLAUDE_AGENT_NAMES |= {"@zed-industries/claude-code-acp", "claude-code-acp"}


def _agent_name(agent_info: dict[str, Any]) -> str:
    return str(agent_info.get("name") or "this agent")


def _is_claude(agent_info: dict[str, Any]) -> bool:
    return str(agent_info.get("name") or "") in CLAUDE_AGENT_NAMES


def session_new_extras(
    options: dict[str, Any], agent_info: dict[str, Any], agent_caps: dict[str, Any]
) -> dict[str, Any]:
    """The extra ``session/new`` params (``systemPrompt``, ``_meta``) for ``options``.

    Raises:
        AgentOptionUnsupported: the agent offers no way to apply one of the options.
    """
    extras: dict[str, Any] = {}
    meta: dict[str, Any] = {}
    claude_options: dict[str, Any] = {}
    for name, flag in (("allowedTools", "--allowed-tools"), ("maxTurns", "--max-turns")):
        if options.get(name) is None:
            continue
        if not _is_claude(agent_info):
            raise AgentOptionUnsupported(
                f"{flag}: {_agent_name(agent_info)} offers no way to set it (only"
                " claude-agent-acp reads _meta.claudeCode.options); leave the flag out,"
                " or configure the agent itself",
                option=flag,
            )
        claude_options[name] = options[name]
    if claude_options:
        meta["claudeCode"] = {"options": claude_options}
    _system_prompt(options, agent_info, agent_caps, extras, meta)
    if meta:
        extras["_meta"] = meta
    return extras


def _system_prompt(
    options: dict[str, Any],
    agent_info: dict[str, Any],
    agent_caps: dict[str, Any],
    extras: dict[str, Any],
    meta: dict[str, Any],
) -> None:
    replace, append = options.get("systemPrompt"), options.get("appendSystemPrompt")
    if replace is None and append is None:
        return
    flag = "--system-prompt" if replace is not None else "--append-system-prompt"
    text = str(replace if replace is not None else append)
    session_caps = agent_caps.get("sessionCapabilities")
    advertised = session_caps.get("systemPrompt") if isinstance(session_caps, dict) else None
    if isinstance(advertised, dict):
        modes = advertised.get("mode")
        can_override = isinstance(modes, dict) and "override" in modes
        if replace is None or can_override:
            mode = "override" if replace is not None else "append"
            extras["systemPrompt"] = {"mode": mode, "content": [{"type": "text", "text": text}]}
            return
    if _is_claude(agent_info):
        meta["systemPrompt"] = text if replace is not None else {"append": text}
        return
    why = (
        "its sessionCapabilities.systemPrompt has no override mode (use --append-system-prompt)"
        if isinstance(advertised, dict)
        else "it advertises no sessionCapabilities.systemPrompt and is not claude-agent-acp"
    )
    raise AgentOptionUnsupported(
        f"{flag}: {_agent_name(agent_info)} offers no way to set the system prompt ({why})",
        option=flag,
    )


def model_option_id(session_result: dict[str, Any]) -> str | None:
    """The id of the session's config option of category ``model``, if it has one
    (acpx: ``set model X`` is model control, whatever the agent calls the option)."""
    options = session_result.get("configOptions")
    for option in options if isinstance(options, list) else []:
        if isinstance(option, dict) and option.get("category") == "model" and option.get("id"):
            return str(option["id"])
    return None


def model_method(
    model: str, session_result: dict[str, Any], agent_info: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    """How to select ``model`` in the session ``session_result`` describes: (method, params
    without ``sessionId``).

    Raises:
        AgentOptionUnsupported: the session has no model config option and no ``models``.
    """
    config_id = model_option_id(session_result)
    if config_id is not None:
        return "session/set_config_option", {"configId": config_id, "value": model}
    if isinstance(session_result.get("models"), dict):
        return "session/set_model", {"modelId": model}
    raise AgentOptionUnsupported(
        f"--model: {_agent_name(agent_info)} offers no model selection (no config option of"
        " category model, no session/set_model); pick the model in the agent's own settings",
        option="--model",
    )
