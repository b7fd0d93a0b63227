"""What a human's answer to a question means: ACP results, and answers kept for the session.

A permission answer is an offered ``optionId`` or a word (``allow``, ``always``, ``deny``,
``deny-always``...) mapped onto the option of that kind the agent offered; an
elicitation answer is ``accept`` (with the form's content), ``decline`` or ``cancel``.
An "always" answer is remembered for the session (:class:`Memory`). No I/O; used by the
interaction table (:mod:`tether.owner.question_table`), which re-exports these names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from tether.errors import UsageError

__all__ = [
    "CANCELLED_PERMISSION",
    "ELICITATION_ACTIONS",
    "Memory",
    "elicitation_outcome",
    "permission_outcome",
]

CANCELLED_PERMISSION: Final[Mapping[str, Any]] = {"outcome": {"outcome": "cancelled"}}
_ALLOW_WORDS = {
    "allow": ("allow_once", "allow_always"),
    "yes": ("allow_once", "allow_always"),
    "y": ("allow_once", "allow_always"),
    "always": ("allow_always", "allow_once"),
    "a": ("allow_always", "allow_once"),
    "allow-always": ("allow_always", "allow_once"),
    "deny": ("reject_once", "reject_always"),
    "reject": ("reject_once", "reject_always"),
    "no": ("reject_once", "reject_always"),
    "n": ("reject_once", "reject_always"),
    "deny-always": ("reject_always", "reject_once"),
    "reject-always": ("reject_always", "reject_once"),
}
# The words that mean "and every time": remembered whatever option they mapped onto.
_ALWAYS_WORDS: Final = {
    "always": "allow_always",
    "a": "allow_always",
    "allow-always": "allow_always",
    "deny-always": "reject_always",
    "reject-always": "reject_always",
}
ELICITATION_ACTIONS: Final = ("accept", "decline", "cancel")


def _selected(option_id: Any) -> dict[str, Any]:
    return {"outcome": {"outcome": "selected", "optionId": option_id}}


def permission_outcome(
    answer: str, options: Sequence[Mapping[str, Any]]
) -> tuple[dict[str, Any], str]:
    """The ``session/request_permission`` result for ``answer`` and the option's kind.

    Raises:
        UsageError: the answer names nothing the agent offered (the options are listed).
    """
    word = answer.strip()
    for option in options:
        if option.get("optionId") == word and "optionId" in option:
            return _selected(option["optionId"]), str(option.get("kind", ""))
    for kind in _ALLOW_WORDS.get(word.lower(), ()):
        for option in options:
            if option.get("kind") == kind and "optionId" in option:
                return _selected(option["optionId"]), kind
    offered = ", ".join(f"{o.get('optionId')} ({o.get('kind')})" for o in options) or "none"
    raise UsageError(
        f"{answer!r} is not an answer to this question: say allow, always, deny,"
        f" deny-always or one of the offered options: {offered}",
        detail_code="INVALID_ANSWER",
    )


def elicitation_outcome(answer: str, content: Any = None) -> dict[str, Any]:
    """The ``elicitation/create`` result for ``answer`` (``accept`` takes ``content``).

    Raises:
        UsageError: not one of accept / decline / cancel, or content that is not an object.
    """
    action = answer.strip().lower()
    if action not in ELICITATION_ACTIONS:
        raise UsageError(
            f"{answer!r} is not an answer to this question: say accept, decline or cancel",
            detail_code="INVALID_ANSWER",
        )
    if action != "accept":
        return {"action": action}
    if content is not None and not isinstance(content, dict):
        raise UsageError("the content of an accepted form must be a JSON object")
    return {"action": "accept", "content": content or {}}


class Memory:
    """``allow_always`` / ``reject_always`` answers, remembered for the session.

    Keyed by the tool call's ``kind`` and ``title``: the same tool call is then decided
    at once, with the option of that kind the agent offers this time.
    """

    def __init__(self) -> None:
        self._always: dict[tuple[str, str], str] = {}

    @staticmethod
    def _key(request: Mapping[str, Any]) -> tuple[str, str]:
        tool = request.get("toolCall")
        tool = tool if isinstance(tool, dict) else {}
        return str(tool.get("kind") or ""), str(tool.get("title") or "")

    def remember(self, request: Mapping[str, Any], option_kind: str, answer: str = "") -> None:
        """Remember an ``always`` answer: an ``*_always`` option chosen, or the words
        ``always`` / ``deny-always`` whatever option they mapped onto (an agent that
        offers no ``reject_always`` still gets ``deny-always`` remembered: the user said
        "always", and the next time is decided with what the agent offers then)."""
        kind = _ALWAYS_WORDS.get(answer.strip().lower(), option_kind)
        if option_kind in ("allow_always", "reject_always"):
            kind = option_kind
        if kind in ("allow_always", "reject_always"):
            self._always[self._key(request)] = kind

    def recall(self, request: Mapping[str, Any]) -> tuple[dict[str, Any], str] | None:
        """The remembered result for this tool call, if any: (ACP result, answer word)."""
        kind = self._always.get(self._key(request))
        if kind is None:
            return None
        raw = request.get("options")
        options = [o for o in raw if isinstance(o, dict)] if isinstance(raw, list) else []
        word = "always" if kind == "allow_always" else "deny-always"
        try:
            outcome, _ = permission_outcome(word, options)
        except UsageError:
            return None  # the agent no longer offers it: ask again
        return outcome, word

    def __len__(self) -> int:
        return len(self._always)
