"""The official ACP schema as a test oracle: validate frames Tether sends or receives.

The schema is a copy of ``shared/acp/schema.json`` (the stable v1 schema shipped in
``@agentclientprotocol/sdk@2.4.0``, the SDK both current adapters bundle: the realagents
tier checks the copy against theirs), kept in ``tests/golden/`` so that the suite does
not depend on anything outside the repository. The PyPI SDK ships no schema file.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

SCHEMA_PATH = Path(__file__).resolve().parent / "golden" / "acp-schema.json"

Frame = dict[str, Any]


@cache
def _schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text())  # type: ignore[no-any-return]


@cache
def _validator(def_name: str) -> jsonschema.Draft202012Validator:
    defs = _schema()["$defs"]
    return jsonschema.Draft202012Validator({"$defs": defs, "$ref": f"#/$defs/{def_name}"})


@cache
def _method_defs() -> dict[tuple[str, str], str]:
    """(method, Request|Response|Notification) -> $defs name, from x-method."""
    out: dict[tuple[str, str], str] = {}
    for name, d in _schema()["$defs"].items():
        method = d.get("x-method") if isinstance(d, dict) else None
        if not method:
            continue
        for suffix in ("Request", "Response", "Notification"):
            if name.endswith(suffix):
                out[(method, suffix)] = name
    return out


def schema_errors(frame: Frame, sender: str, answered_method: str | None = None) -> list[str]:
    """Schema problems of ``frame`` sent by ``sender`` ("client" or "agent").

    ``answered_method`` is the method of the request a response answers, when known.
    Extension methods (``_...``) are only checked at the envelope level.
    """
    prefix = "Client" if sender == "client" else "Agent"
    if "method" in frame:
        kind = "Request" if "id" in frame else "Notification"
        envelope = prefix + kind
        method = frame["method"]
    else:
        kind = "Response"
        envelope = prefix + "Response"
        method = answered_method
    errs = [f"{envelope}: {e.message}" for e in _validator(envelope).iter_errors(frame)]
    if frame.get("jsonrpc") != "2.0":
        errs.append(f"jsonrpc is {frame.get('jsonrpc')!r}, not '2.0'")
    if method and not method.startswith("_"):
        def_name = _method_defs().get((method, kind))
        if kind == "Response" and "error" in frame:
            def_name = None  # the envelope already checked the error object
        payload = frame.get("result") if kind == "Response" else frame.get("params")
        if def_name is None and "error" not in frame:
            if not method.startswith("$/"):
                errs.append(f"no $defs entry for {method} {kind}")
        elif def_name is not None:
            errs += [f"{def_name}: {e.message}" for e in _validator(def_name).iter_errors(payload)]
    return errs


def validate_def(def_name: str, value: Any) -> list[str]:
    """Schema problems of ``value`` as the ``$defs`` entry ``def_name``."""
    return [f"{def_name}: {e.message}" for e in _validator(def_name).iter_errors(value)]
