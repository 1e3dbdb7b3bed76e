"""What the Helm e2e tests share: the chart, the release's objects as rendered and as they are in the cluster, and
what an uninstall leaves behind.

Objects are read with kubectl (`kubectl get <kind>[.<version>.<group>] <name>`), so any kind the chart renders,
custom or built in, is found the same way.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from llmaz_dev.envtest import Cluster
from llmaz_dev.envtest.helm import Helm

from .conftest import REPO

CHART = REPO / "chart"
RELEASE = "llmaz"
NAMESPACE = "llmaz-system"
# The CRDs the chart installs (its crds/): llmaz's own and its copy of the InferencePool CRD.
CRD_NAMES = sorted(yaml.safe_load(path.read_text())["metadata"]["name"] for path in (CHART / "crds").glob("*.yaml"))


def release_objects(helm: Helm) -> list[dict[str, Any]]:
    """The objects of the installed release, as Helm rendered them (`helm get manifest`)."""
    return [doc for doc in yaml.safe_load_all(helm("get", "manifest", RELEASE, "-n", NAMESPACE)) if doc]


def _type(obj: dict[str, Any]) -> str:
    group, _, version = obj["apiVersion"].rpartition("/")
    return f"{obj['kind']}.{version}.{group}" if group else obj["kind"]


def live(cluster: Cluster, obj: dict[str, Any]) -> dict[str, Any] | None:
    """The cluster's copy of `obj` (same kind, namespace and name), or None."""
    scope = ["-n", obj["metadata"]["namespace"]] if obj["metadata"].get("namespace") else []
    out = cluster.kubectl("get", _type(obj), obj["metadata"]["name"], *scope, "-o", "json", "--ignore-not-found")
    found: dict[str, Any] | None = json.loads(out) if out.strip() else None
    return found


def missing_from(rendered: Any, found: Any, path: str = "") -> list[str]:
    """Where `found` (a live object) lacks or contradicts what `rendered` says; the API server's defaults and
    status are extra fields, never differences."""
    if isinstance(rendered, dict):
        if not isinstance(found, dict):
            return [f"{path}: {found!r} is not a map"]
        return [m for k, v in rendered.items() for m in missing_from(v, found.get(k), f"{path}.{k}")]
    if isinstance(rendered, list):
        if not isinstance(found, list) or len(found) != len(rendered):
            return [f"{path}: {found!r} is not a list of {len(rendered)}"]
        return [
            m for i, (r, f) in enumerate(zip(rendered, found, strict=True)) for m in missing_from(r, f, f"{path}[{i}]")
        ]
    return [] if rendered == found else [f"{path}: {found!r} instead of {rendered!r}"]


def labelled_leftovers(cluster: Cluster, kinds: set[str]) -> list[str]:
    """Every object of `kinds` (kubectl types) anywhere in the cluster that carries the release's instance label."""
    out = cluster.kubectl(
        "get", ",".join(sorted(kinds)), "-A", "-l", f"app.kubernetes.io/instance={RELEASE}", "-o", "name"
    )
    return out.split()


def release_records(cluster: Cluster) -> list[str]:
    """Helm's records of the release (its Secrets) in the release namespace."""
    out = cluster.kubectl("get", "secrets", "-n", NAMESPACE, "-l", f"owner=helm,name={RELEASE}", "-o", "name")
    return out.split()


def types_of(objects: list[dict[str, Any]]) -> set[str]:
    return {_type(obj) for obj in objects}
