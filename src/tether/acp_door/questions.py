"""The agent's questions put to the ACP client: the door as a controller (issue 11).

A turn the door runs asks the owner to make this client a *controller* (``control:
true`` on the IPC prompt). A permission request the session's policy leaves open then
reaches the door as an ``interaction`` frame; the door puts it to its client as the
ACP ``session/request_permission`` it is (the tool call and the options the agent
offered, under the door's session id) and answers the interaction with the option the
client selected (:func:`tether.operations.answer`). The first valid answer wins: if a
human at a terminal, a watcher or a second client answered first, ours is refused
(``ALREADY_ANSWERED``) and nothing more happens. A client that cancels the question, or
fails to answer it, denies.

An elicitation goes to a client that advertised that mode (``clientCapabilities.
elicitation.form`` / ``.url``) as the ACP ``elicitation/create`` it is, under the
door's session id, and the interaction is answered with the client's action (and an
accepted form's content). Otherwise it is declined here, which is what the
non-interactive policy would answer; a client that fails to answer cancels it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from tether import operations
from tether.errors import AlreadyAnswered, TetherError

__all__ = [
    "answer_for",
    "elicitation_answer",
    "elicitation_modes",
    "elicitation_request",
    "permission_request",
    "put_question",
]
ELICITATION_FIELDS = ("mode", "message", "requestedSchema", "url", "elicitationId", "toolCallId")

AskClient = Callable[[str, dict[str, Any]], Awaitable[Any]]


def permission_request(key: str, item: dict[str, Any]) -> dict[str, Any] | None:
    """The ``session/request_permission`` params for an interaction, or None (not one)."""
    tool = item.get("toolCall")
    options = item.get("options")
    if item.get("question") != "permission" or not isinstance(tool, dict):
        return None
    if not isinstance(options, list) or not isinstance(tool.get("toolCallId"), str):
        return None
    return {"sessionId": key, "toolCall": tool, "options": options}


def answer_for(result: Any) -> str:
    """The interaction answer for the client's ``RequestPermissionResponse``."""
    outcome = result.get("outcome") if isinstance(result, dict) else None
    if isinstance(outcome, dict) and outcome.get("outcome") == "selected":
        option = outcome.get("optionId")
        if isinstance(option, str) and option:
            return option  # an offered optionId is taken as is
    return "deny"  # cancelled, malformed, or no answer: the safe side


def elicitation_modes(capabilities: dict[str, Any]) -> frozenset[str]:
    """The elicitation modes a client advertised (``{}`` for a mode means yes)."""
    caps = capabilities.get("elicitation")
    if not isinstance(caps, dict):
        return frozenset()
    return frozenset(m for m in ("form", "url") if isinstance(caps.get(m), dict))


def elicitation_request(
    key: str, item: dict[str, Any], modes: frozenset[str]
) -> dict[str, Any] | None:
    """The ``elicitation/create`` params for an interaction, or None (not one, or of a
    mode the client did not advertise)."""
    if item.get("question") != "elicitation" or item.get("mode") not in modes:
        return None
    return {"sessionId": key, **{k: item[k] for k in ELICITATION_FIELDS if k in item}}


def elicitation_answer(result: Any) -> tuple[str, dict[str, Any] | None]:
    """The interaction answer (and content) for the client's elicitation response."""
    action = result.get("action") if isinstance(result, dict) else None
    if action == "accept":
        content = result.get("content")
        return "accept", content if isinstance(content, dict) else None
    return ("decline", None) if action == "decline" else ("cancel", None)


async def put_question(
    ask_client: AskClient, key: str, item: dict[str, Any], modes: frozenset[str] = frozenset()
) -> None:
    """Put one interaction to the client and answer it with the client's choice;
    ``modes``: the elicitation modes the client advertised.

    Cancellation: nothing is answered (the owner's deadline or another controller
    decides); the client's request is abandoned.
    """
    interaction = item.get("id")
    if not isinstance(interaction, str):
        return
    content: dict[str, Any] | None = None
    params = permission_request(key, item)
    elicit = elicitation_request(key, item, modes) if params is None else None
    if params is not None:
        try:
            answer = answer_for(await ask_client("session/request_permission", params))
        except (TetherError, ConnectionError):
            answer = "deny"
    elif elicit is not None:
        try:
            answer, content = elicitation_answer(await ask_client("elicitation/create", elicit))
        except (TetherError, ConnectionError):
            answer = "cancel"
    else:
        answer = "decline"  # an elicitation the client cannot show
    with contextlib.suppress(AlreadyAnswered, TetherError):
        await asyncio.to_thread(operations.answer, key, interaction, answer, content=content)
