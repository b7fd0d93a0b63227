"""The benchmark's runner (``bench/run.py``) as a module: its pinned npm installers."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def bench_run() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_bench_run", ROOT / "bench" / "run.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("_bench_run", module)
    spec.loader.exec_module(module)
    return module
