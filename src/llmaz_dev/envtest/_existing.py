"""A cluster that is already running, reached through a kubeconfig (kind, a dev control plane, ...).

Invariants:
- The kubeconfig's current context must authenticate with a client certificate; embedded `*-data` credentials
  are written to files in a private scratch directory so that every Cluster exposes file paths.
- Nothing is started or stopped: `close()` only removes the scratch directory. Restarting kube-apiserver and
  compacting etcd are refused (ClusterOperationError).
"""

from __future__ import annotations

import base64
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml

from llmaz_dev.envtest._assets import AssetsMissingError, find_assets
from llmaz_dev.envtest._cluster import Cluster, ClusterOperationError


class ExistingCluster(Cluster):
    """The cluster named by a kubeconfig's current context."""

    def __init__(self, kubeconfig: Path, kubectl_path: Path | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.scratch_dir = Path(tempfile.mkdtemp(prefix="llmaz-existing-cluster-"))
        self.kubectl_path = kubectl_path or _pinned_kubectl() or _path_kubectl()
        config = yaml.safe_load(kubeconfig.read_text())
        context = _named(config, "contexts", config.get("current-context"))["context"]
        cluster = _named(config, "clusters", context["cluster"])["cluster"]
        user = _named(config, "users", context["user"])["user"]
        self.server = cluster["server"]
        self.ca_file = self._credential(cluster, "certificate-authority")
        self.admin_cert_file = self._credential(user, "client-certificate")
        self.admin_key_file = self._credential(user, "client-key")

    def close(self) -> None:
        shutil.rmtree(self.scratch_dir, ignore_errors=True)

    def _credential(self, section: dict[str, Any], key: str) -> Path:
        if f"{key}-data" in section:
            path = self.scratch_dir / key
            path.touch(mode=0o600)
            path.write_bytes(base64.b64decode(section[f"{key}-data"]))
            return path
        if key in section:
            return (self.kubeconfig.parent / str(section[key])).resolve()
        raise ClusterOperationError(
            f"{self.kubeconfig}: current context has no {key}; client certificates are required"
        )


def _named(config: dict[str, Any], section: str, name: str | None) -> dict[str, Any]:
    for entry in config.get(section) or []:
        if entry.get("name") == name:
            return dict(entry)
    raise ClusterOperationError(f"kubeconfig has no {section} entry named {name!r}")


def _pinned_kubectl() -> Path | None:
    try:
        return find_assets().kubectl
    except AssetsMissingError:
        return None


def _path_kubectl() -> Path | None:
    found = shutil.which("kubectl")
    return Path(found) if found else None
