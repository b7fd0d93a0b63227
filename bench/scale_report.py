"""``bench/scale.py``'s results as JSON, a Markdown table and a plot (PNG and SVG).

matplotlib comes from the ``bench`` extra (``pip install -e '.[bench]'``) and is
imported here only; without it the JSON and the Markdown are still written and the
plot is said to be missing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SIDES = (
    ("tether", "Tether (tether serve)", "tab:blue"),
    ("sandbox_agent", "sandbox-agent 0.4.2", "tab:orange"),
)
HOSTS_GIB = (8, 16, 32, 64)


def _pair(d: dict[str, Any], a: str = "p50_ms", b: str = "p99_ms") -> str:
    return f"{d[a]} / {d[b]}" if a in d and b in d else "-"


def all_in(row: dict[str, Any]) -> float:
    """MiB per session of everything a session costs: own processes' and agent's PSS, the
    server's growth, and the kernel's page tables and stacks for those processes."""
    parts = ("own_pss_mib", "agent_pss_mib", "server_growth_pss_mib", "kernel_mib")
    return float(sum(row.get(k, 0.0) for k in parts))


def size_table(report: dict[str, Any]) -> list[str]:
    rate = report["args"]["rate"]
    out = [
        "| server | sessions | own processes PSS / RSS MiB per session | agent PSS / RSS MiB "
        "per session | server growth PSS MiB per session | kernel (page tables, stacks) MiB "
        "per session | all-in MiB per session | "
        "MemAvailable drop MiB per session | create → ready p50 / p99 ms | create → warm "
        f"p50 / p99 ms | prompt p50 / p99 ms at {rate}/s | prompts done / sent |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, label, _ in SIDES:
        for row in report.get(key, {}).get("sizes", []):
            load = row["load"]
            own = (
                f"{row['own_pss_mib']} / {row['own_rss_mib']}"
                if row["own_processes"]
                else "- (none: one process)"
            )
            out.append(
                f"| {label} | {row['sessions']} | {own} | {row['agent_pss_mib']} / "
                f"{row['agent_rss_mib']} | {row['server_growth_pss_mib']} | "
                f"{row.get('kernel_mib', '-')} | "
                f"{all_in(row):.1f} | {row['mem_available_drop_mib']} | "
                f"{_pair(row['create_ready'])} | {_pair(row['create_warm'])} | "
                f"{_pair(load)} | {load['completed']} / {load['sent']} |"
            )
    return out


def idle_table(report: dict[str, Any]) -> list[str]:
    out = [
        "| server | sessions | idle CPU, own processes, ms/s per session | idle CPU, agent, "
        "ms/s per session | idle CPU, server, ms/s | load average (1 min) |",
        "|---|---|---|---|---|---|",
    ]
    for key, label, _ in SIDES:
        for row in report.get(key, {}).get("sizes", []):
            if "idle_cpu_server_ms_per_s" not in row:
                continue
            out.append(
                f"| {label} | {row['sessions']} | {row['idle_cpu_own_ms_per_s_per_session']} | "
                f"{row['idle_cpu_agent_ms_per_s_per_session']} | "
                f"{row['idle_cpu_server_ms_per_s']} | {row.get('loadavg_1m', '-')} |"
            )
    return out


def sweep_table(report: dict[str, Any]) -> list[str]:
    out = [
        "| server | sessions | in flight | prompts done / sent | p50 / p99 ms | prompts/s "
        "| errors |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, label, _ in SIDES:
        for row in report.get(key, {}).get("concurrency", []):
            if "skipped" in row:
                out.append(f"| {label} | | {row['in_flight']} | skipped: {row['skipped']} | | | |")
                continue
            out.append(
                f"| {label} | {row['sessions']} | {row['in_flight']} | {row['completed']} / "
                f"{row['sent']} | {_pair(row)} | {row['throughput_per_s']} | {row['errors']} |"
            )
    return out


def capacity(report: dict[str, Any]) -> list[str]:
    """Sessions a host of each size holds, from the largest population measured."""
    floor = report["args"]["floor_gib"]
    out = []
    for key, label, _ in SIDES:
        sizes = report.get(key, {}).get("sizes", [])
        if not sizes:
            continue
        row = sizes[-1]
        pss, drop = all_in(row), row["mem_available_drop_mib"]
        if pss <= 0:
            continue

        def held(per: float) -> str:
            return ", ".join(
                f"{g} GiB: {int((g - floor) * 1024 / per)}" for g in HOSTS_GIB if g > floor
            )

        text = (
            f"- {label}, at {row['sessions']} sessions, keeping {floor} GiB free: by all-in "
            f"memory ({pss:.1f} MiB per session) {held(pss)} sessions"
        )
        if drop > 0:
            text += f"; by MemAvailable drop ({drop:.1f} MiB per session) {held(drop)}"
        out.append(text + ". Mock agent: add a real agent's own memory per session.")
    return out


def markdown(report: dict[str, Any]) -> str:
    args = report["args"]
    lines = [
        f"# How cost grows with sessions (bench/scale.py), {report['date']}",
        "",
        f"Sizes {args['sizes']}, offered load {args['rate']} prompts/s for "
        f"{args['duration']} s per size, memory floor {args['floor_gib']} GiB; "
        f"load average at the start {report.get('loadavg')} (the machine's other work).",
    ]
    if "sandbox_agent_absent" in report:
        lines.append(f"\nsandbox-agent: {report['sandbox_agent_absent']}")
    lines += ["", *size_table(report), "", *idle_table(report), "", *sweep_table(report)]
    lines += ["", *capacity(report), ""]
    for key, label, _ in SIDES:
        side = report.get(key, {})
        if side.get("stopped"):
            stop = side["stopped"]
            avail = stop.get("mem_available_mib")
            lines.append(
                f"- {label} stopped creating sessions at {stop.get('sessions')}: {stop['reason']}"
                + (f" (MemAvailable {avail} MiB)" if avail is not None else "")
            )
        if side.get("error"):
            lines.append(f"- {label} failed: {side['error']}")
        if side.get("stop_errors"):
            lines.append(f"- {label} while ending: {side['stop_errors'][:3]}")
    lines.append(
        f"- processes left after the run: {report.get('survivors')} "
        f"(after killing those: {report.get('survivors_after_kill')})"
    )
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], out: Path) -> str:
    """Four panels to PNG and SVG; an empty string, or why there is no plot."""
    try:
        import matplotlib
    except ImportError:
        return "no plot: matplotlib is not installed (pip install -e '.[bench]')"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    mem, load, start, sweep = axes.flat
    for key, label, color in SIDES:
        side = report.get(key, {})
        rows = side.get("sizes", [])
        n = [r["sessions"] for r in rows]
        if rows:
            mem.plot(n, [all_in(r) for r in rows], "o-", color=color, label=f"{label}: all-in")
            mem.plot(
                n,
                [r["own_pss_mib"] + r["server_growth_pss_mib"] for r in rows],
                "s--",
                color=color,
                label=f"{label}: without the agent",
            )
            mem.plot(
                n,
                [r["mem_available_drop_mib"] for r in rows],
                "x:",
                color=color,
                label=f"{label}: MemAvailable drop",
            )
            for q, style in (("p50_ms", "o-"), ("p99_ms", "^--")):
                for ax, part in ((load, "load"), (start, "create_ready")):
                    pts = [(x, r[part][q]) for x, r in zip(n, rows, strict=True) if q in r[part]]
                    if pts:
                        xs, ys = zip(*pts, strict=True)
                        ax.plot(xs, ys, style, color=color, label=f"{label} {q[:3]}")
        done = [r for r in side.get("concurrency", []) if "p50_ms" in r]
        for q, style in (("p50_ms", "o-"), ("p99_ms", "^--")):
            if done:
                sweep.plot(
                    [r["in_flight"] for r in done],
                    [r[q] for r in done],
                    style,
                    color=color,
                    label=f"{label} {q[:3]}",
                )
    rate = report["args"]["rate"]
    titles = (
        (mem, "idle memory per session (MiB)", "warm sessions"),
        (load, f"prompt latency at {rate} prompts/s (ms)", "warm sessions"),
        (start, "create → ready per session (ms)", "sessions on the host"),
        (sweep, "prompt latency by prompts in flight (ms)", "prompts in flight"),
    )
    for ax, title, xlabel in titles:
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(xlabel)
        ax.set_xscale("log")
        ticks = sorted({int(x) for line in ax.get_lines() for x in line.get_xdata()})
        if ticks:
            ax.set_xticks(ticks, [str(t) for t in ticks])
            ax.minorticks_off()
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ys = [float(y) for line in ax.get_lines() for y in line.get_ydata()]
            # room for the legend above the lines; a negative MemAvailable drop stays in view
            ax.set_ylim(min(0.0, *ys), max(1.0, *ys) * 1.5)
            ax.legend(fontsize=7, loc="upper left", ncols=2)
    fig.suptitle(f"bench/scale.py, {report['date']}, mock agent, one host", fontsize=11)
    fig.tight_layout()
    for ext in ("png", "svg"):
        fig.savefig(out.with_suffix(f".{ext}"), dpi=110)
    plt.close(fig)
    return ""


def write(report: dict[str, Any], out: Path) -> None:
    """``out``.json, .md, .png and .svg (the directory is made if needed)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    missing = plot(report, out)
    if missing:
        report["plot"] = missing
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    text = markdown(report)
    if missing:
        text += f"\n{missing}\n"
    out.with_suffix(".md").write_text(text)
