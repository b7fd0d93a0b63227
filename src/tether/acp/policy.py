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

The three modes are presets of a *permission policy* (:class:`PermissionPolicy`): an
ordered list of rules, each matching a tool call by ``kind`` and by a ``title`` glob,
deciding ``allow``, ``deny`` or ``ask`` (relay the question to whoever controls the
session; with nobody to ask it is rejected); the first rule that matches decides, else
the policy's ``default``. A policy file (``--permission-policy FILE``, config
``permissionPolicy``) is TOML::

    default = "ask"                 # allow | deny | ask (default: ask)

    [[rule]]
    kind = ["read", "search"]       # one ACP tool kind or a list; omitted: any kind
    decision = "allow"

    [[rule]]
    title = "git push*"             # a glob (fnmatch, case-sensitive); omitted: any title
    decision = "deny"

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


class Rule:
    """One rule of a policy: tool kinds (None = any), a title glob (None = any), a decision."""

    __slots__ = ("decision", "kinds", "title")

    def __init__(
        self, decision: Decision, *, kinds: frozenset[str] | None = None, title: str | None = None
    ) -> None:
        self.decision = decision
        self.kinds = kinds
        self.title = title

    def matches(self, tool_call: Mapping[str, Any]) -> bool:
        if self.kinds is not None and tool_call.get("kind") not in self.kinds:
            return False
        if self.title is None:
            return True
        import fnmatch  # only when a rule has a title pattern

        return fnmatch.fnmatchcase(str(tool_call.get("title") or ""), self.title)


class PermissionPolicy:
    """Rules by tool kind and title pattern -> allow / deny / ask; the first match decides."""

    __slots__ = ("default", "name", "rules")

    def __init__(self, rules: Sequence[Rule], default: Decision, *, name: str = "") -> None:
        self.rules = tuple(rules)
        self.default = default
        self.name = name

    def __repr__(self) -> str:
        return f"PermissionPolicy({self.name or 'custom'}: {len(self.rules)} rules)"

    def decide(self, tool_call: Mapping[str, Any] | None) -> Decision:
        call = tool_call or {}
        for rule in self.rules:
            if rule.matches(call):
                return rule.decision
        return self.default

    @classmethod
    def preset(cls, mode: PermissionMode | str) -> PermissionPolicy:
        """The policy a mode stands for (``approve-reads``: reads allowed, the rest asked)."""
        mode = PermissionMode(mode)
        if mode is PermissionMode.APPROVE_ALL:
            return cls((), Decision.ALLOW, name=mode.value)
        if mode is PermissionMode.DENY_ALL:
            return cls((), Decision.REJECT, name=mode.value)
        return cls((Rule(Decision.ALLOW, kinds=READ_KINDS),), Decision.ASK, name=mode.value)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, name: str = "") -> PermissionPolicy:
        """Build a policy from a decoded policy file.

        Raises:
            PolicyInvalid: a key or value the format does not allow (named in the text).
        """
        unknown = set(data) - {"default", "rule"}
        if unknown:
            raise PolicyInvalid(f"unknown key {sorted(unknown)[0]!r} (allowed: default, rule)")
        default = _decision(data.get("default", "ask"), "default")
        raw_rules = data.get("rule", [])
        if not isinstance(raw_rules, list):
            raise PolicyInvalid("rule must be an array of tables ([[rule]])")
        rules = []
        for n, raw in enumerate(raw_rules, 1):
            if not isinstance(raw, dict):
                raise PolicyInvalid(f"rule {n} must be a table")
            extra = set(raw) - {"kind", "title", "decision"}
            if extra:
                raise PolicyInvalid(
                    f"rule {n}: unknown key {sorted(extra)[0]!r} (allowed: kind, title, decision)"
                )
            if "decision" not in raw:
                raise PolicyInvalid(f"rule {n} needs a decision (allow, deny or ask)")
            kinds = raw.get("kind")
            if isinstance(kinds, str):
                kinds = [kinds]
            if kinds is not None and (
                not isinstance(kinds, list) or not all(isinstance(k, str) for k in kinds)
            ):
                raise PolicyInvalid(f"rule {n}: kind must be a string or a list of strings")
            title = raw.get("title")
            if title is not None and not isinstance(title, str):
                raise PolicyInvalid(f"rule {n}: title must be a string (a glob)")
            rules.append(
                Rule(
                    _decision(raw["decision"], f"rule {n} decision"),
                    kinds=frozenset(kinds) if kinds is not None else None,
                    title=title,
                )
            )
        return cls(rules, default, name=name)


class PolicyInvalid(ValueError):
    """A permission policy file does not follow the format (the text says where)."""


def _decision(value: Any, where: str) -> Decision:
    words = {"allow": Decision.ALLOW, "deny": Decision.REJECT, "ask": Decision.ASK}
    if value not in words:
        raise PolicyInvalid(f"{where} must be allow, deny or ask, not {value!r}")
    return words[value]


def load_policy(spec: str) -> PermissionPolicy:
    """A policy by preset name (``approve-all``, ``approve-reads``, ``deny-all``) or file.

    Raises:
        PolicyInvalid: the file cannot be read or is not a valid policy.
    """
    if spec in {m.value for m in PermissionMode}:
        return PermissionPolicy.preset(spec)
    import tomllib

    try:
        with open(spec, "rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise PolicyInvalid(f"cannot read the permission policy {spec}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:  # tomllib decodes the bytes as UTF-8
        raise PolicyInvalid(
            f"the permission policy {spec} is not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise PolicyInvalid(f"the permission policy {spec} is not valid TOML: {exc}") from None
    try:
        return PermissionPolicy.from_mapping(data, name=spec)
    except PolicyInvalid as exc:
        raise PolicyInvalid(f"the permission policy {spec}: {exc}") from None


def decide(
    mode: PermissionMode | PermissionPolicy, tool_call: Mapping[str, Any] | None
) -> Decision:
    """What the permission mode (or policy) says about this tool call."""
    if isinstance(mode, PermissionPolicy):
        return mode.decide(tool_call)
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
