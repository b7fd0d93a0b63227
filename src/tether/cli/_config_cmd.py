"""``tether config show`` and ``tether config init`` (acpx's ``config show|init``).

``show`` prints the merged configuration with the files it looked at and the ones it
loaded; credentials (``auth``) and the values of MCP servers' ``env`` and ``headers`` are
masked. ``init`` writes a commented template of every key to the user config file, only
when there is none (file 0600, its directory 0700), and never touches an existing file.
"""

from __future__ import annotations

import os
from typing import Any

from tether import config, paths
from tether.errors import StatePermission, UsageError

MASK = "***"


def masked(cfg: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` with every secret replaced by ``***`` (the keys stay, to show what is set)."""
    out = dict(cfg)
    out["auth"] = dict.fromkeys(cfg.get("auth") or {}, MASK)
    servers = []
    for server in cfg.get("mcpServers") or ():
        server = dict(server)
        for field in ("env", "headers"):
            if isinstance(server.get(field), list):
                server[field] = [
                    {**item, "value": MASK} if isinstance(item, dict) else MASK
                    for item in server[field]
                ]
        servers.append(server)
    out["mcpServers"] = servers
    return out


def run_config(ctx: Any) -> int:
    if ctx.inv.subcommand == "init":
        return _init(ctx)
    files = {"user": paths.user_config_file(), "project": paths.project_config_file(ctx.cwd)}
    loaded = [path for path in files.values() if os.path.isfile(path)]
    shown = masked(ctx.config)
    import json

    text = json.dumps(
        {"config": shown, "paths": files, "loaded": loaded}, indent=2, default=list, sort_keys=False
    )
    ctx.output.control(
        {"action": "config", "config": shown, "paths": files, "loaded": loaded},
        text=text,
        quiet="\n".join(loaded),
    )
    return 0


def template() -> str:
    """The user config template: every key, commented out, with its default."""
    lines = [
        "# Tether configuration (TOML). Every key is shown with its default, commented out.",
        "# A project's ./.tether.toml overrides this file; command-line flags override both.",
        "",
    ]
    tables: list[str] = []
    for name, key in config.SCHEMA.items():
        default = config.DEFAULTS[name]
        if not isinstance(default, dict):
            lines += [f"# {key.help}", f"# {name} = {_toml(default)}"]
            continue
        tables += ["", f"# [{name}]  {key.help}"]
        for sub, sub_key in (key.keys or {}).items():
            tables += [f"# {sub_key.help}", f"# {sub} = {_toml(default[sub])}"]
    return "\n".join([*lines, *tables]) + "\n"


def _toml(value: Any) -> str:
    if value is None:
        return '""  # unset'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, tuple | list):
        return "[]"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _init(ctx: Any) -> int:
    path = paths.user_config_file()
    if os.path.exists(path):
        ctx.output.control(
            {"action": "config_init", "path": path, "created": False},
            text=f"{path} exists; left as it is",
            quiet=path,
        )
        return 0
    directory = os.path.dirname(path)
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise UsageError(f"{path} appeared while writing it; left as it is") from None
    except PermissionError as exc:
        raise StatePermission(f"cannot write {path}: {exc.strerror}") from None
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(template())
    ctx.output.control(
        {"action": "config_init", "path": path, "created": True},
        text=f"wrote {path}",
        quiet=path,
    )
    return 0
