"""The mock agent's script language: the verb table and the parser.

See the package docstring (:mod:`tether.testing.mock_agent`) for what each verb does.
"""

from __future__ import annotations

# verb -> (hint for available_commands_update, required int args, optional int args).
# Int args come first; anything after them is free text.
VERBS: dict[str, tuple[str, int, int]] = {
    "echo": ("TEXT", 0, 0),
    "stream": ("N [TEXT]", 1, 0),
    "sleep": ("MS", 1, 0),
    "hang": ("", 0, 0),
    "late": ("MS [TEXT]", 1, 0),
    "tool": ("KIND [TITLE]", 0, 0),
    "cancel-request": ("", 0, 0),
    "elicit": ("form|url [TEXT]", 0, 0),
    "read": ("PATH", 0, 0),
    "write": ("PATH TEXT...", 0, 0),
    "spawn-group": ("", 0, 0),
    "spawn-setsid": ("", 0, 0),
    "spawn-daemon": ("", 0, 0),
    "spawn-envclear": ("", 0, 0),
    "crash": ("[CODE]", 0, 1),
    "stderr": ("BYTES", 1, 0),
    "malformed": ("", 0, 0),
    "oversized": ("BYTES", 1, 0),
    "surrogate": ("", 0, 0),
    "big": ("BYTES", 1, 0),
    "unknown-update": ("", 0, 0),
    "plan": ("", 0, 0),
    "thought": ("TEXT", 0, 0),
    "usage": ("", 0, 0),
    "session-params": ("", 0, 0),
    "mode": ("ID", 0, 0),
    "stop": ("[REASON]", 0, 0),
    "error": ("CODE [MSG]", 1, 0),
    "exit": ("[CODE]", 0, 1),
    "run": ("CMD...", 0, 0),
    "mcp-call": ("SERVER TOOL [JSON]", 0, 0),
    "terminal": ("[--kill|--release|--keep] CMD...", 0, 0),
}
# Verbs whose first free-text word is required.
NEEDS_WORD = frozenset({"tool", "read", "write", "mode", "run", "mcp-call", "elicit", "terminal"})


class ScriptError(ValueError):
    """A prompt script that cannot run: answered with -32602 before anything happens."""


def parse_script(text: str) -> list[tuple[str, str]] | None:
    """Split a prompt into ``(verb, rest)`` commands; None means "echo the text back".

    Raises ScriptError when the first word is a verb but some command is invalid.
    """
    words = text.split(None, 1)
    if not words or words[0] not in VERBS:
        return None
    commands: list[tuple[str, str]] = []
    for line in text.splitlines():
        for part in line.split(" ; "):
            part = part.strip()
            if not part:
                continue
            verb, _, rest = part.partition(" ")
            verb, rest = verb.strip(), rest.strip()
            spec = VERBS.get(verb)
            if spec is None:
                raise ScriptError(f"unknown verb {verb!r} in {part!r}")
            _, required, optional = spec
            fields = rest.split(None, required + optional)
            for i in range(required + optional):
                if i >= len(fields):
                    if i < required:
                        raise ScriptError(f"{verb}: missing argument in {part!r}")
                    break
                try:
                    int(fields[i])
                except ValueError:
                    raise ScriptError(f"{verb}: {fields[i]!r} is not an integer") from None
            if verb in NEEDS_WORD and len(fields) <= required + optional:
                raise ScriptError(f"{verb}: missing argument in {part!r}")
            commands.append((verb, rest))
    return commands


def ints(rest: str, count: int) -> tuple[list[int], str]:
    """The first ``count`` words of ``rest`` as ints (already validated) and the rest."""
    fields = rest.split(None, count)
    nums = [int(f) for f in fields[:count]]
    return nums, fields[count] if len(fields) > count else ""
