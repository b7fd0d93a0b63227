"""`tether config show|init` (acpx's): the files behind the config, secrets masked; a template."""

from __future__ import annotations

import json
import stat
import tomllib
from pathlib import Path

from tests._cli import run_tether


def test_show_names_the_files_and_masks_the_secrets(tether_home: Path, project_dir: Path) -> None:
    """`config show` lists the files it looked at and loaded; credentials show as ***."""
    (tether_home / "config.toml").write_text('[auth]\n"api-key" = "sk-very-secret"\n')
    (project_dir / ".tether.toml").write_text("ttl = 60\n")
    r = run_tether("--format", "json", "config", "show", cwd=project_dir)
    assert r.returncode == 0, r.stderr
    shown = json.loads(r.stdout)
    assert shown["loaded"] == [str(tether_home / "config.toml"), str(project_dir / ".tether.toml")]
    assert shown["config"]["auth"] == {"api-key": "***"}
    assert shown["config"]["ttl"] == 60
    assert "sk-very-secret" not in r.stdout
    text = run_tether("config", cwd=project_dir)
    assert "sk-very-secret" not in text.stdout
    assert str(project_dir / ".tether.toml") in text.stdout


def test_init_writes_a_private_template_once(tether_home: Path, project_dir: Path) -> None:
    """`config init` writes every key commented out (0600), and never overwrites."""
    path = tether_home / "config.toml"
    r = run_tether("config", "init", cwd=project_dir)
    assert (r.returncode, r.stdout) == (0, f"wrote {path}\n"), r.stderr
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert tomllib.loads(path.read_text()) == {}  # all commented: the defaults hold
    assert "# promptRetries = 0" in path.read_text()
    path.write_text("ttl = 5\n")
    again = run_tether("config", "init", cwd=project_dir)
    assert (again.returncode, again.stdout) == (0, f"{path} exists; left as it is\n")
    assert path.read_text() == "ttl = 5\n"
