"""The agent's questions put to the ACP client: the door as a controller (issue 11).

A turn the door runs asks the owner to make this client a *controller* (``control:
true`` on the IPC prompt). A permission request the session's policy leaves open then
reaches the door as an ``interaction`` frame; the door puts it to its client as the
ACP ``session/request_permission`` it is (the tool call and the options the agent
offered, under the door's session id) and answers the interaction with the option the
client selected (:func:`tether.operations.answer`). The first valid answer wins: if a
human at a terminal, a watcher or a second client answered first, ours is refused
(``ALREADY_ANSWERED``) and nothing more happens. A client that cancels the question, or
fails to answer it, denies. Elicitations are declined here (the door does not relay
``elicitation/create`` yet), which is what the non-interactive policy would answer.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from tether import operations
from tether.errors import AlreadyAnswered, TetherError

__all__ = ["answer_for", "permission_request", "put_question"]

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


async def put_question(ask_client: AskClient, key: str, item: dict[str, Any]) -> None:
    """Put one interaction to the client and answer it with the client's choice.

    Cancellation: nothing is answered (the owner's deadline or another controller
    decides); the client's request is abandoned.
    """
    interaction = item.get("id")
    if not isinstance(interaction, str):
        return
    params = permission_request(key, item)
    if params is None:
        answer = "decline"  # an elicitation: not relayed yet
    else:
        try:
            answer = answer_for(await ask_client("session/request_permission", params))
        except (TetherError, ConnectionError):
            answer = "deny"
    with contextlib.suppress(AlreadyAnswered, TetherError):
        await asyncio.to_thread(operations.answer, key, interaction, answer)
