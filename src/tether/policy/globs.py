"""Agent-id patterns for the agent-to-agent policy: exact, ``*``, or a linear-time glob.

A pattern without ``*`` matches exactly and case-sensitively; a pattern with ``*``
matches case-insensitively, ``*`` standing for any run of characters, by a linear-time
matcher (prefix, suffix, then ordered interior segments, each found with
Knuth-Morris-Pratt) -- never a regular expression, so a hostile pattern such as
``*a*a*a*a*b`` cannot make matching backtrack. A blank pattern matches nothing (it denies
rather than silently allowing everything). Used by
:class:`tether.policy.visibility.A2APolicy`; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Pattern", "glob_match", "match_parts"]


@dataclass(frozen=True, slots=True)
class Pattern:
    """One compiled allow pattern."""

    kind: str  # "any" | "deny" | "exact" | "glob"
    exact: str = ""
    parts: tuple[str, ...] = ()  # lower-cased segments between the *s (first, ..., last)

    @classmethod
    def compile(cls, pattern: str) -> Pattern:
        """The pattern as written in ``[agentToAgent] allow``."""
        raw = pattern.strip()
        if not raw:
            return cls("deny")
        if raw == "*":
            return cls("any")
        if "*" not in raw:
            return cls("exact", exact=raw)
        return cls("glob", parts=tuple(raw.lower().split("*")))

    def matches(self, agent_id: str) -> bool:
        """Whether ``agent_id`` matches this pattern."""
        if self.kind == "any":
            return True
        if self.kind == "exact":
            return self.exact == agent_id
        if self.kind == "glob":
            return match_parts(self.parts, agent_id.lower(), None)
        return False


def glob_match(pattern: str, text: str, steps: list[int] | None = None) -> bool:
    """Case-insensitive ``*`` glob match in time linear in ``len(pattern) + len(text)``.

    ``steps``, when given, gets the number of character comparisons made appended to
    it (the backtracking guard's tests measure work, not time).
    """
    return match_parts(tuple(pattern.lower().split("*")), text.lower(), steps)


def match_parts(parts: tuple[str, ...], text: str, steps: list[int] | None) -> bool:
    """Whether lower-cased ``text`` matches the pattern split at its ``*``s."""
    counter = [0]
    try:
        if len(parts) == 1:
            counter[0] += len(text)
            return parts[0] == text
        first, *interior, last = parts
        if not text.startswith(first):
            return False
        counter[0] += len(first)
        end = len(text) - len(last)
        if end < len(first) or not text.endswith(last):
            return False
        counter[0] += len(last)
        pos = len(first)
        # Greedy leftmost placement of each interior segment is optimal for a pattern
        # whose only metacharacter is "*": any later placement leaves less room for the
        # rest. Each search resumes where the last one ended, so the text is scanned once.
        for part in interior:
            if not part:
                continue
            found = _kmp_find(text, part, pos, end, counter)
            if found < 0:
                return False
            pos = found + len(part)
        return True
    finally:
        if steps is not None:
            steps.append(counter[0])


def _kmp_find(text: str, needle: str, start: int, end: int, counter: list[int]) -> int:
    """Index of ``needle`` in ``text[start:end]`` (or -1), by Knuth-Morris-Pratt."""
    fail = [0] * len(needle)
    k = 0
    for i in range(1, len(needle)):
        while k and needle[i] != needle[k]:
            k = fail[k - 1]
            counter[0] += 1
        counter[0] += 1
        if needle[i] == needle[k]:
            k += 1
        fail[i] = k
    k = 0
    for i in range(start, end):
        while k and text[i] != needle[k]:
            k = fail[k - 1]
            counter[0] += 1
        counter[0] += 1
        if text[i] == needle[k]:
            k += 1
            if k == len(needle):
                return i - k + 1
    return -1
