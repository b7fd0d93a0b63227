"""Re-make the vendored schemas in this directory (run by hand; never by the tests).

    python tests/kubernetes/schemas/vendor.py WHEEL AGENT_SANDBOX_CHECKOUT

WHEEL is kubernetes_validate-1.37.0-py3-none-any.whl (PyPI); AGENT_SANDBOX_CHECKOUT a
git clone of kubernetes-sigs/agent-sandbox with the tag ``v0.5.6`` (see README.md here).
The Kubernetes definitions are trimmed to those reachable from the kinds the manifests
use, with their descriptions dropped; the CRDs are copied as they are.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
K8S_VERSION = "v1.37.0"
AGENT_SANDBOX_TAG = "v0.5.6"
KINDS = (
    "io.k8s.api.apps.v1.StatefulSet",
    "io.k8s.api.apps.v1.Deployment",
    "io.k8s.api.core.v1.Service",
    "io.k8s.api.policy.v1.PodDisruptionBudget",
    "io.k8s.api.networking.v1.NetworkPolicy",
)
CRDS = (
    "extensions.agents.x-k8s.io_sandboxtemplates.yaml",
    "extensions.agents.x-k8s.io_sandboxwarmpools.yaml",
)
REF_PREFIXES = ("#/$defs/", "/api/_definitions.json#/$defs/")


def _walk(node: Any, found: set[str]) -> Any:
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "description" and isinstance(value, str):
                continue
            if key == "$ref" and isinstance(value, str) and value.startswith(REF_PREFIXES):
                name = value.rpartition("/")[2]
                found.add(name)
                out[key] = "#/$defs/" + name
                continue
            out[key] = _walk(value, found)
        return out
    if isinstance(node, list):
        return [_walk(item, found) for item in node]
    return node


def trim_definitions(wheel: Path) -> dict[str, Any]:
    member = f"kubernetes_validate/kubernetes-json-schema/{K8S_VERSION}-local/_definitions.json"
    with zipfile.ZipFile(wheel) as z:
        every = json.loads(z.read(member))["$defs"]
    kept: dict[str, Any] = {}
    todo = list(KINDS)
    while todo:
        name = todo.pop()
        if name in kept:
            continue
        found: set[str] = set()
        kept[name] = _walk(every[name], found)
        todo.extend(sorted(found - kept.keys()))
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$comment": f"Kubernetes {K8S_VERSION} definitions, trimmed: see README.md",
        "$defs": dict(sorted(kept.items())),
    }


def main(wheel: str, checkout: str) -> None:
    doc = trim_definitions(Path(wheel))
    out = HERE / f"kubernetes-{K8S_VERSION}.json"
    out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    for name in CRDS:
        text = subprocess.run(
            ["git", "-C", checkout, "show", f"{AGENT_SANDBOX_TAG}:k8s/crds/{name}"],
            check=True,
            capture_output=True,
        ).stdout
        (HERE / f"agent-sandbox-{AGENT_SANDBOX_TAG}" / name).write_bytes(text)


if __name__ == "__main__":
    main(*sys.argv[1:3])
