"""The Kubernetes manifests in ``deploy/kubernetes``, checked without a cluster.

Every object is validated against the schema the API server would use: the Kubernetes
API's definitions (v1.37.0) for built-in kinds and agent-sandbox's CRDs (v0.5.6) for
its kinds, both vendored under ``tests/kubernetes/schemas`` (nothing is downloaded).
Unknown fields fail, as they do under the API server's strict field validation (the
default of ``kubectl apply``): every object schema that lists its properties and says
nothing of others is closed, except where a CRD preserves unknown fields.

Beyond the schemas: each kustomization lists every manifest beside it; the parameters
marked ``# PARAM NAME`` are exactly those ``docs/kubernetes.md`` documents; the
``tether`` command lines in the containers are ones Tether's own parser accepts and
whose gateway answers the Host names routers and probes send.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tether.cli._parse import parse
from tether.fleet.command import fleet_args
from tether.fleet.drain import RETIRE_WAIT_S
from tether.serve.hosts import host_rule

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "kubernetes"
SCHEMAS = ROOT / "tests" / "kubernetes" / "schemas"
K8S_DEFINITIONS = SCHEMAS / "kubernetes-v1.37.0.json"
CRD_DIR = SCHEMAS / "agent-sandbox-v0.5.6"
DOC = ROOT / "docs" / "kubernetes.md"
PARAM = re.compile(r"(?<!`)#\s*PARAM\s+([A-Z][A-Z0-9_]*)\b")  # `# PARAM X` is prose
UID = 10001  # the Containerfile's user, and every pod's runAsUser
# libyaml's loader where PyYAML has it: the pure-Python one takes seconds on the CRDs.
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load(path: Path) -> Any:
    return yaml.load(path.read_text(encoding="utf-8"), Loader=LOADER)


def _manifest_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*.yaml") if p.name != "kustomization.yaml")


@functools.cache
def _objects() -> list[tuple[str, dict[str, Any]]]:
    """Every object in deploy/kubernetes (shared: copy one before changing it)."""
    out = []
    for path in _manifest_files():
        for doc in yaml.load_all(path.read_text(encoding="utf-8"), Loader=LOADER):
            if doc is not None:
                out.append((f"{path.relative_to(DEPLOY)}:{doc['kind']}", doc))
    return out


def _closed(node: Any) -> Any:
    """The schema with every object that lists its properties closed to others."""
    if isinstance(node, list):
        return [_closed(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _closed(value) for key, value in node.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@functools.cache
def _k8s_defs() -> dict[str, Any]:
    defs: dict[str, Any] = json.loads(K8S_DEFINITIONS.read_text(encoding="utf-8"))["$defs"]
    return {name: _closed(schema) for name, schema in defs.items()}


def _k8s_schema(api_version: str, kind: str) -> dict[str, Any] | None:
    group, _, version = api_version.rpartition("/")
    for name, schema in _k8s_defs().items():
        for gvk in schema.get("x-kubernetes-group-version-kind", ()):
            if (gvk["group"], gvk["version"], gvk["kind"]) == (group, version, kind):
                return {"$ref": f"#/$defs/{name}", "$defs": _k8s_defs()}
    return None


@functools.cache
def _crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        crd = _load(path)
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if version.get("served"):
                schema = _closed(version["schema"]["openAPIV3Schema"])
                out[(f"{group}/{version['name']}", kind)] = schema
    return out


def _errors(doc: dict[str, Any]) -> list[str]:
    """Every schema error of one object (empty: valid); a kind with no schema is one."""
    api_version, kind = doc.get("apiVersion", ""), doc.get("kind", "")
    schema = _k8s_schema(api_version, kind)
    checks = [(schema, doc)]
    if schema is None:
        schema = _crd_schemas().get((api_version, kind))
        if schema is None:
            return [f"no vendored schema for {api_version} {kind}"]
        # A CRD's schema leaves metadata to the API server: check it as ObjectMeta.
        meta = {"$ref": "#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
        checks = [(schema, doc), ({**meta, "$defs": _k8s_defs()}, doc.get("metadata", {}))]
    found = []
    for one, instance in checks:
        validator = jsonschema.Draft202012Validator(one)
        found += [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in
                  validator.iter_errors(instance)]  # fmt: skip
    return found


@pytest.mark.parametrize(("where", "doc"), [pytest.param(w, d, id=w) for w, d in _objects()])
def test_every_manifest_matches_its_schema(where: str, doc: dict[str, Any]) -> None:
    """Each object in deploy/kubernetes is valid for the API server (unknown fields fail)."""
    assert _errors(doc) == []


def _first(kind: str) -> dict[str, Any]:
    return copy.deepcopy(next(doc for _, doc in _objects() if doc["kind"] == kind))


@pytest.mark.parametrize("kind", ["StatefulSet", "Deployment", "SandboxTemplate"])
def test_the_check_refuses_an_unknown_field_and_a_wrong_type(kind: str) -> None:
    """Positive control: a misspelt field deep in a pod, or a wrong type, is an error."""
    doc = _first(kind)
    pod = doc["spec"]["podTemplate" if kind == "SandboxTemplate" else "template"]["spec"]
    pod["containers"][0]["readinessProbes"] = pod["containers"][0].pop("readinessProbe")
    assert any("readinessProbes" in e for e in _errors(doc))
    doc = _first(kind)
    doc["metadata"]["labels"] = {"app": 3}
    assert _errors(doc) != []


def test_every_kind_used_has_a_vendored_schema() -> None:
    """No object goes unchecked: each apiVersion and kind has a schema here."""
    kinds = {(d["apiVersion"], d["kind"]) for _, d in _objects()}
    assert {
        ("apps/v1", "StatefulSet"),
        ("apps/v1", "Deployment"),
        ("v1", "Service"),
        ("policy/v1", "PodDisruptionBudget"),
        ("networking.k8s.io/v1", "NetworkPolicy"),
        ("extensions.agents.x-k8s.io/v1beta1", "SandboxTemplate"),
        ("extensions.agents.x-k8s.io/v1beta1", "SandboxWarmPool"),
    } <= kinds
    for api_version, kind in kinds:
        assert _k8s_schema(api_version, kind) or _crd_schemas().get((api_version, kind))


def test_each_kustomization_lists_every_manifest_beside_it() -> None:
    """Every manifest is in its directory's kustomization, and every listed one exists."""
    kustomizations = sorted(DEPLOY.rglob("kustomization.yaml"))
    assert {p.parent.name for p in kustomizations} == {"routers", "dense", "sandbox"}
    for path in kustomizations:
        doc = _load(path)
        assert doc["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
        assert doc["kind"] == "Kustomization"
        listed = doc["resources"]
        for entry in listed:
            target = (path.parent / entry).resolve()
            assert target.is_file() or (target / "kustomization.yaml").is_file(), entry
        beside = {p.name for p in path.parent.glob("*.yaml")} - {"kustomization.yaml"}
        assert beside <= set(listed), f"{path}: not listed: {sorted(beside - set(listed))}"


def _documented_parameters() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("\n## Parameters\n", 1)[1].split("\n#", 1)[0]
    return re.findall(r"^\| `([A-Z][A-Z0-9_]*)` \|", section, flags=re.MULTILINE)


def _marked_parameters() -> dict[str, list[str]]:
    """Each ``# PARAM NAME`` in deploy/kubernetes, with the lines that carry it."""
    out: dict[str, list[str]] = {}
    for path in sorted(DEPLOY.rglob("*.yaml")):
        for line in path.read_text(encoding="utf-8").splitlines():
            match = PARAM.search(line)
            if match:
                out.setdefault(match.group(1), []).append(line)
    return out


def test_every_documented_parameter_is_in_the_manifests_and_back() -> None:
    """docs/kubernetes.md's parameter table and the manifests' PARAM marks name the same
    values, each once in the table, and every mark sits on a line that sets a value."""
    documented = _documented_parameters()
    assert len(documented) == len(set(documented)), "a parameter documented twice"
    marked = _marked_parameters()
    assert set(documented) == set(marked)
    for name, lines in marked.items():
        for line in lines:
            value = line.split("#", 1)[0].strip()
            assert value, f"{name}: no value on {line!r}"
            assert not value.endswith(":"), f"{name}: no value on {line!r}"


def _pods() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for where, doc in _objects():
        spec = doc.get("spec", {})
        pod = (spec.get("template") or spec.get("podTemplate") or {}).get("spec")
        if pod is not None:
            out.append((where, pod))
    return out


def _tether_containers() -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{where}/{c['name']}", c)
        for where, pod in _pods()
        for c in pod["containers"]
        if "args" in c
    ]


def test_every_pod_runs_as_the_images_user_and_not_as_root() -> None:
    """Each pod runs as the fixed non-root UID, needs no service account token, and each
    container drops every capability on a read-only root file system."""
    pods = _pods()
    assert len(pods) == 3  # routers, dense hosts, sandboxes
    for where, pod in pods:
        assert pod["securityContext"]["runAsUser"] == UID, where
        assert pod["securityContext"]["runAsNonRoot"] is True, where
        assert pod["automountServiceAccountToken"] is False, where
        for c in pod.get("initContainers", []) + pod["containers"]:
            assert c["securityContext"]["capabilities"]["drop"] == ["ALL"], where
            assert c["securityContext"]["readOnlyRootFilesystem"] is True, where
            assert c["securityContext"]["allowPrivilegeEscalation"] is False, where


@pytest.mark.parametrize(
    ("where", "container"), [pytest.param(w, c, id=w) for w, c in _tether_containers()]
)
def test_each_command_line_is_one_tether_accepts(
    where: str, container: dict[str, Any], tmp_path: Path
) -> None:
    """The args parse as `tether serve` with real flags, make a fleet host or router,
    and a host answers the Host a router sends (what it advertises) and the probe's
    (loopback); a host that advertises https:// serves TLS, and routers hold the CA."""
    values = {"POD_NAME": "tether-host-0", "POD_IP": "10.1.2.3", "TETHER_USER_TOKEN": "u" * 32,
              "POD_NAMESPACE": "tether"}  # fmt: skip
    args = [re.sub(r"\$\((\w+)\)", lambda m: values[m.group(1)], a) for a in container["args"]]
    token = tmp_path / "fleet-token"
    token.write_text("f" * 32, encoding="utf-8")
    args = [str(token) if a == "/run/secrets/tether/fleet-token" else a for a in args]
    inv = parse(args)
    assert inv.command == "serve"
    env = {e["name"] for e in container["env"]}
    assert "TETHER_FLEET_INDEX" in env  # the DSN comes from a Secret, never the args
    fleet = fleet_args(inv, {"TETHER_FLEET_INDEX": "postgresql://tether@db/tether"})
    assert fleet is not None
    if fleet.router:
        assert inv.fleet_ca == "/run/secrets/tether-tls/ca.crt"
        return
    assert fleet.host_id == "tether-host-0"
    assert fleet.advertise in (
        "http://10.1.2.3:8787",  # a sandbox: plain HTTP at its pod IP
        "https://tether-host-0.tether-hosts.tether.svc.cluster.local:8787",  # dense: TLS
    )
    if fleet.advertise.startswith("https://"):
        assert inv.tls_cert == "/run/secrets/tether-tls/tls.crt"
        assert inv.tls_key == "/run/secrets/tether-tls/tls.key"
    rule = host_rule(inv.host, inv.port or 0, inv.allowed_hosts, hostname="tether-host-0")
    assert rule is not None
    assert rule.allows(fleet.advertise.split("://", 1)[1])
    assert rule.allows("10.1.2.3:8787")
    assert rule.allows("127.0.0.1:8787")
    # Tether's own probe routes, asked without the credential (drain: readiness drops).
    for probe, path in (("livenessProbe", "/livez"), ("readinessProbe", "/readyz")):
        get = container[probe]["httpGet"]
        assert (get["path"], get["port"]) == (path, "http"), where
        assert "exec" not in container[probe], where
    assert fleet.drain_grace is not None


def test_each_hosts_pod_grace_covers_its_drain() -> None:
    """A host pod's terminationGracePeriodSeconds covers its drain: the --drain-grace its
    turns get, then the owners' retirement, before the kubelet's SIGKILL."""
    hosts = 0
    for where, pod in _pods():
        for c in pod["containers"]:
            args = c.get("args", [])
            if "--router" in args or "serve" not in args:
                continue
            hosts += 1
            grace = float(args[args.index("--drain-grace") + 1])
            assert pod["terminationGracePeriodSeconds"] >= grace + RETIRE_WAIT_S, where
    assert hosts == 2  # dense hosts, sandboxes


def test_the_image_runs_as_the_manifests_user_without_a_shell() -> None:
    """The Containerfile's user is the pods' fixed non-root UID, and its entrypoint is an
    exec-form list (no shell between the runtime and Tether)."""
    text = (DEPLOY / "Containerfile").read_text(encoding="utf-8")
    assert re.search(rf"^USER {UID}:{UID}$", text, flags=re.MULTILINE)
    entry = re.search(r"^ENTRYPOINT (.+)$", text, flags=re.MULTILINE)
    assert entry is not None
    argv = json.loads(entry.group(1))
    assert argv[0].startswith("/")
    assert Path(argv[0]).name not in {"sh", "bash", "dash"}
    base = re.search(r"^ARG BASE_IMAGE=(\S+)$", text, flags=re.MULTILINE)
    assert base is not None
    assert re.fullmatch(r"\S*/node:22-(bookworm|trixie)(-slim)?", base.group(1))  # Debian
