"""Client-side ACP decisions with no I/O: permissions and file-system confinement.

Permission modes (acpx's, same names and default):

``approve-all``
    select an ``allow_once`` option (else ``allow_always``) for every request.
``approve-reads`` (default)
    allow tool calls whose kind is ``read`` or ``search`` (they cannot change
    anything); anything else is *undecided* -- the caller's permission hook may ask a
    human, and without one it is rejected (``reject_once``).
``deny-all``
    select a ``reject_once`` option (else ``reject_always``) for every request.

Options are picked by ``kind``, never by ``optionId`` or name: those are agent-specific.
If an agent offers no option of the wanted kind, the request is answered
``cancelled`` rather than guessing.

File-system confinement: ``fs/read_text_file`` and ``fs/write_text_file`` paths must
be absolute and resolve -- symlinks followed -- inside the session's cwd. ``..`` and
symlinks pointing outside are refused; the check runs on the resolved path, so a
symlink swapped in after the check still cannot point outside (we open the resolved
path, not the original).
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path


class PermissionMode(enum.StrEnum):
    APPROVE_ALL = "approve-all"
    APPROVE_READS = "approve-reads"
    DENY_ALL = "deny-all"


READ_KINDS = frozenset({"read", "search"})

CANCELLED_OUTCOME: Mapping[str, Any] = {"outcome": {"outcome": "cancelled"}}


class Decision(enum.StrEnum):
    ALLOW = "allow"
    REJECT = "reject"
    ASK = "ask"  # the mode does not decide; a hook may ask someone


def decide(mode: PermissionMode, tool_call: Mapping[str, Any] | None) -> Decision:
    """What the permission mode says about this tool call."""
    if mode is PermissionMode.APPROVE_ALL:
        return Decision.ALLOW
    if mode is PermissionMode.DENY_ALL:
        return Decision.REJECT
    kind = (tool_call or {}).get("kind")
    return Decision.ALLOW if kind in READ_KINDS else Decision.ASK


def outcome_for(decision: Decision, options: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``session/request_permission`` result for ``decision`` given the offered options."""
    wanted = (
        ("allow_once", "allow_always")
        if decision is Decision.ALLOW
        else ("reject_once", "reject_always")
    )
    for kind in wanted:
        for option in options:
            if option.get("kind") == kind and "optionId" in option:
                return {"outcome": {"outcome": "selected", "optionId": option["optionId"]}}
    return dict(CANCELLED_OUTCOME)


class PathRefused(ValueError):
    """A file-system request named a path outside the session's workspace."""


def confine(root: str | os.PathLike[str], path: object) -> Path:
    # pathlib is imported here, on the first fs request, not with the module: it drags
    # urllib.parse in, which the owner's cold start does not otherwise need.
    from pathlib import Path

    """Resolve ``path`` (symlinks followed) and require it to lie inside ``root``."""
    if not isinstance(path, str) or not path:
        raise PathRefused("path must be a non-empty string")
    if not os.path.isabs(path):
        raise PathRefused(f"path must be absolute: {path!r}")
    base = Path(root).resolve()
    resolved = Path(path).resolve()
    if resolved != base and base not in resolved.parents:
        raise PathRefused(f"path is outside the session's workspace {str(base)!r}: {path!r}")
    return resolved


def slice_lines(text: str, line: Any, limit: Any) -> str:
    """Apply ACP's optional 1-based ``line`` and ``limit`` to file content."""
    if line is None and limit is None:
        return text
    lines = text.splitlines(keepends=True)
    start = max(int(line) - 1, 0) if isinstance(line, int) else 0
    end = start + int(limit) if isinstance(limit, int) and limit >= 0 else None
    return "".join(lines[start:end])
