"""``sessions watch | read | history | export | prune``: reading the journal.

Every one of these reads the state database directly and works with no owner running;
none starts one. ``watch`` attaches to the live owner, if there is one, only to get new
entries the moment they happen (:func:`tether.operations.watch`, the blocking flavour).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Any

from tether import operations
from tether.errors import JournalDamaged, TetherError, UsageError
from tether.state.journal import render, store
from tether.state.journal.entry import parse_duration, parse_line

TYPE_CHECKING = False
if TYPE_CHECKING:
    from tether.state.registry import Registry


def run(ctx: Any, key: str, no_session: Any) -> int:
    sub = ctx.inv.subcommand
    if sub == "prune":
        return _prune(ctx)
    action = "watch" if sub == "watch" else "history"
    with operations.open_journal(key, action, missing=no_session) as registry:
        if sub == "watch":
            return _watch(ctx, registry, key)
        if sub == "read":
            return _read(ctx, registry, key)
        if sub == "history":
            return _history(ctx, registry, key)
        if sub == "export":
            return _export(ctx, registry, key)
    raise UsageError(f"unknown sessions command {sub}")


class _TextView:
    """Entries rendered as ``prompt`` prints a turn, plus who prompted and control lines."""

    def __init__(self, ctx: Any) -> None:
        self.out = ctx.output
        self.fmt = ctx.fmt
        # With --control the asker shows the questions; their entries are not repeated.
        self.skip = ("interaction_opened", "interaction_resolved") if ctx.inv.control else ()

    def show(self, entry: dict[str, Any]) -> None:
        kind = entry.get("kind")
        if kind == "acp":
            frame = entry.get("frame")
            if not isinstance(frame, dict):
                return
            if entry.get("direction") == "out":
                text = render.prompt_text(frame)
                if text is not None and self.fmt == "text":
                    self.out.control({}, text="> " + text.replace("\n", "\n> "))
                return
            self.out.frame("in", frame)
            return
        if self.fmt == "text" and kind not in self.skip:
            line = render.control_text(entry)
            if line is not None:
                self.out.control({}, text=line)
        elif self.fmt == "quiet" and kind == "turn_ended":
            self.out.done(str(entry.get("stopReason")))


class _Damage:
    """The damaged chunks a reader skipped: each named on stderr as it is met; at the end
    :meth:`check` fails the command (exit 1), after every readable entry was delivered."""

    def __init__(self, ctx: Any, key: str) -> None:
        self.output = ctx.output
        self.key = key
        self.ranges: list[tuple[int, int]] = []

    def __call__(self, damage: store.Damage) -> None:
        first, last, why = damage
        self.ranges.append((first, last))
        self.output.warning(
            f"journal entries {first}-{last} are damaged ({why}) and were skipped;"
            " `tether doctor --repair` sets them aside"
        )

    def parsed(self, seq: int, line: str) -> dict[str, Any] | None:
        """``line`` decoded, or None (reported as damage) when it is not an entry."""
        try:
            return parse_line(line)
        except ValueError:
            self((seq, seq, "not valid JSON"))
            return None

    def check(self) -> None:
        """Raises JournalDamaged when anything was skipped."""
        if self.ranges:
            spans = ", ".join(f"{a}-{b}" for a, b in self.ranges[:5])
            more = f" and {len(self.ranges) - 5} more" if len(self.ranges) > 5 else ""
            raise JournalDamaged(
                f"the journal has damaged entries ({spans}{more}) that were skipped;"
                " `tether doctor` reports them and `--repair` sets them aside",
                session_key=self.key,
                ranges=[list(r) for r in self.ranges],
            )


def _watch(ctx: Any, registry: Registry, key: str) -> int:
    inv = ctx.inv
    if inv.from_seq is not None and inv.tail is not None:
        raise UsageError("--from and --tail cannot be combined")
    flush = ctx.output.flush
    emit_block = None
    damage = _Damage(ctx, key)
    if ctx.fmt == "json":
        # Bytes straight to stdout: a live block of entries is written as it came, with
        # no work per entry (three watchers of a 50,000-updates/s turn are three
        # processes competing with the turn for the CPU).
        out = sys.stdout.buffer
        write = out.write
        flush = out.flush  # once per batch: before the follower waits for more

        def emit(_seq: int, line: str) -> None:
            write(line.encode() + b"\n")

        def emit_block(_first: int, _last: int, entries: list[bytes]) -> None:
            write(b"\n".join(entries) + b"\n")

    else:
        view = _TextView(ctx)

        def emit(_seq: int, line: str) -> None:
            entry = damage.parsed(_seq, line)
            if entry is not None:
                view.show(entry)

    if inv.control and inv.no_follow:
        raise UsageError("--control answers questions live: it cannot be combined with --no-follow")
    if inv.from_seq is not None:
        last = registry.journal_last_seq(key)
        if inv.from_seq > last + 1:  # last + 1 is simply the next entry
            waiting = f": waiting for an entry numbered {inv.from_seq} or more"
            ctx.output.notice(
                f"--from {inv.from_seq} is past the end of the journal (its last entry is"
                f" {last}){'' if inv.no_follow else waiting}"
            )
    asker = None
    if inv.control:
        from tether.cli._questions import Asker

        asker = Asker(key, tty=sys.stdin.isatty() and sys.stderr.isatty())
    try:
        if asker is None:
            operations.watch(
                key,
                emit,
                check=False,  # open_journal checked
                from_seq=inv.from_seq,
                tail=inv.tail,
                follow=not inv.no_follow,
                flush=flush,
                emit_block=emit_block,
                door="cli",
                on_damage=damage,
            )
        else:
            with asker:
                operations.watch(
                    key,
                    emit,
                    check=False,
                    from_seq=inv.from_seq,
                    tail=inv.tail,
                    control=asker.on_frame,
                    flush=flush,
                    door="cli",
                    on_damage=damage,
                )
    except KeyboardInterrupt:
        pass
    ctx.output.flush()
    damage.check()
    return 0


def _read(ctx: Any, registry: Registry, key: str) -> int:
    """The conversation: prompts, assistant text, tool calls, stop reasons."""
    cursor = max(
        registry.journal_turns_start(key, ctx.inv.tail), operations.first_seq(registry, key)
    )
    damage = _Damage(ctx, key)
    lines = registry.journal_lines(key, cursor, on_damage=damage)
    if ctx.fmt == "json":
        valid = ((seq, line) for seq, line in lines if damage.parsed(seq, line) is not None)
        transcript = render.transcript(valid)
        ctx.output.control({"action": "transcript", "sessionKey": key, "turns": transcript})
        damage.check()
        return 0
    view = _TextView(ctx)
    shown = False
    for seq, line in lines:
        entry = damage.parsed(seq, line)
        if entry is not None and entry.get("kind") in ("acp", "turn_ended", "session_ended"):
            view.show(entry)
            shown = True
    if not shown:
        ctx.output.control({}, text="no conversation yet")
    ctx.output.flush()
    damage.check()
    return 0


def _history(ctx: Any, registry: Registry, key: str) -> int:
    first = operations.first_seq(registry, key)  # not what an earlier session of this key did
    turns = render.turns([r for r in registry.journal_turn_rows(key) if r[0] >= first])
    limit = ctx.inv.limit if ctx.inv.limit is not None else 20
    shown = turns[-limit:] if limit > 0 else []
    return show_history(ctx, key, [t.to_json() for t in shown])


def show_history(ctx: Any, key: str, items: list[dict[str, Any]]) -> int:
    """``sessions history``'s output of turn summaries (``Turn.to_json``'s form)."""
    lines = []
    for t in items:
        start = t.get("startedAt") or t.get("queuedAt")
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(start)) if start else "-"
        took = render.duration(t.get("durationMs"))
        outcome = t.get("stopReason") or ("failed" if t.get("error") else "running")
        lines.append(f"{t['requestId']}  {when}  {took:>8}  {outcome:<10}  {t.get('preview')}")
    ctx.output.control(
        {"action": "history", "sessionKey": key, "turns": items},
        text="\n".join(lines) or "no turns yet",
        quiet="\n".join(t["requestId"] for t in items),
    )
    return 0


def _export(ctx: Any, registry: Registry, key: str) -> int:
    path = ctx.inv.output_file
    damage = _Damage(ctx, key)
    # Lines go out as stored: a chunk's lines were checked when it was read (its zlib
    # checksum, or every line's JSON for a small plain one).
    lines = (line for _seq, line in registry.journal_lines(key, on_damage=damage))
    count = 0
    try:
        if path and path != "-":
            tmp = f"{path}.tmp-{os.getpid()}"
            with open(tmp, "w", encoding="utf-8") as f:
                for line in lines:
                    f.write(line + "\n")
                    count += 1
            os.replace(tmp, path)  # a partial export never takes the name
            ctx.output.banner(f"exported {count} entries to {path}")
    except OSError as exc:
        if path and path != "-":
            with contextlib.suppress(OSError):
                os.unlink(f"{path}.tmp-{os.getpid()}")
        raise TetherError(f"cannot write {path}: {exc.strerror or exc}") from exc
    else:
        if not path or path == "-":
            # stdout: a closed pipe (`| head`) ends us quietly, as everywhere (exit 141)
            out = sys.stdout
            for line in lines:
                out.write(line + "\n")
            out.flush()
    damage.check()
    return 0


def _prune(ctx: Any) -> int:
    inv = ctx.inv
    if inv.older_than is None and not inv.closed:
        raise UsageError("sessions prune needs --older-than DURATION and/or --closed")
    cutoff = None
    if inv.older_than is not None:
        if inv.older_than.strip().replace(".", "", 1).isdigit():
            # acpx's --older-than N meant N days; Tether's bare number would be seconds.
            raise UsageError(
                f"--older-than takes a duration with its unit: {inv.older_than}d for days"
                " (acpx's bare number meant days), or 12h, 30m"
            )
        try:
            cutoff = time.time() - parse_duration(inv.older_than)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if inv.all_agents and (inv.agent or inv.agent_cmd):
        raise UsageError("--all-agents prunes every agent's sessions: name no agent with it")
    scope = "every agent" if inv.all_agents else f"agent {ctx.agent_label}"
    report = operations.prune(
        older_than=cutoff,
        closed=inv.closed,
        agent_scope=None if inv.all_agents else ctx.agent_scope,
        dry_run=inv.dry_run,
    )
    verb = "would prune" if inv.dry_run else "pruned"
    ctx.output.control(
        {
            "action": "pruned",
            "scope": "all-agents" if inv.all_agents else ctx.agent_label,
            **report,
        },
        text=(
            f"{verb} {report['entriesRemoved']} journal entries"
            f" and {len(report['sessionsRemoved'])} closed sessions of {scope}"
            + ("" if inv.all_agents else " (every agent's: --all-agents)")
        ),
        quiet=str(report["entriesRemoved"]),
    )
    return 0
