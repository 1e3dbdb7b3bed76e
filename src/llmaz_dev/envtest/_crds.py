"""Installing CustomResourceDefinitions and waiting until they serve.

Invariants:
- A path is a YAML file or a directory whose `*.yaml`/`*.yml` files are read in name order; documents that are
  not CustomResourceDefinitions are ignored, so a kustomize `kustomization.yaml` beside the CRDs is harmless.
- Installation is a server-side apply (field manager `llmaz-envtest`), so installing twice is a no-op and
  installing a changed CRD updates it.
- `install_crds` returns only once every CRD reports `Established=True` and `NamesAccepted=True`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from llmaz_dev.envtest._rest import RestClient

FIELD_MANAGER = "llmaz-envtest"
_CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
_POLL_INTERVAL = 0.1


class CRDNotEstablishedError(RuntimeError):
    """A CRD did not become Established in time."""


def load_crds(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Every CustomResourceDefinition document found under `paths`."""
    crds: list[dict[str, Any]] = []
    for path in paths:
        files = sorted([*path.glob("*.yaml"), *path.glob("*.yml")]) if path.is_dir() else [path]
        for file in files:
            for document in yaml.safe_load_all(file.read_text()):
                if isinstance(document, dict) and document.get("kind") == "CustomResourceDefinition":
                    crds.append(document)
    return crds


def install_crds(client: RestClient, crds: list[dict[str, Any]], timeout: float = 30.0) -> None:
    """Apply `crds` and wait until all of them are Established."""
    for crd in crds:
        client.apply(f"{_CRD_PATH}/{crd['metadata']['name']}", crd, FIELD_MANAGER)
    deadline = time.monotonic() + timeout
    for crd in crds:
        name = crd["metadata"]["name"]
        while not _is_established(client.request("GET", f"{_CRD_PATH}/{name}")):
            if time.monotonic() > deadline:
                raise CRDNotEstablishedError(f"CRD {name} not Established after {timeout:.0f}s")
            time.sleep(_POLL_INTERVAL)


def _is_established(crd: dict[str, Any]) -> bool:
    status = crd.get("status") or {}
    conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
    return conditions.get("Established") == "True" and conditions.get("NamesAccepted") == "True"
