"""What every test cluster offers, whether started here (`ControlPlane`) or reused (`ExistingCluster`).

Invariants:
- Credentials are files: `kubeconfig` names `ca_file`, `admin_cert_file` and `admin_key_file` by path, and the
  admin identity is in `system:masters`.
- `kubectl(...)` always targets this cluster's kubeconfig, never the ambient `KUBECONFIG`, and keeps its
  discovery cache in this cluster's scratch directory.
- Operations a cluster cannot offer (restarting kube-apiserver, compacting etcd) raise ClusterOperationError
  with the reason rather than silently doing nothing.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
from collections.abc import Iterable
from pathlib import Path

import yaml

from llmaz_dev.envtest._crds import install_crds, load_crds
from llmaz_dev.envtest._rest import ApiError, RestClient

_TOKEN_EXPIRATION_SECONDS = 3600
_NAMESPACE_NAME_MAX = 63


class ClusterOperationError(RuntimeError):
    """The cluster cannot do what was asked, or kubectl failed."""


class Cluster:
    """Connection details and helper operations shared by all test clusters."""

    kubeconfig: Path
    server: str
    ca_file: Path
    admin_cert_file: Path
    admin_key_file: Path
    kubectl_path: Path | None
    scratch_dir: Path

    @property
    def etcd_url(self) -> str:
        raise ClusterOperationError(f"{type(self).__name__} does not expose etcd")

    def restart_apiserver(self) -> None:
        raise ClusterOperationError(f"{type(self).__name__} cannot restart kube-apiserver")

    def compact_etcd(self) -> None:
        raise ClusterOperationError(f"{type(self).__name__} cannot compact etcd")

    def admin_client(self) -> RestClient:
        return RestClient(self.server, self.ca_file, self.admin_cert_file, self.admin_key_file)

    def write_kubeconfig(self, path: Path, user: dict[str, str], user_name: str = "user") -> Path:
        """A kubeconfig for this cluster with one user (`{"token": ...}`, or client certificate files)."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "cluster", "cluster": {"server": self.server, "certificate-authority": str(self.ca_file)}}
            ],
            "users": [{"name": user_name, "user": user}],
            "contexts": [{"name": "cluster", "context": {"cluster": "cluster", "user": user_name}}],
            "current-context": "cluster",
        }
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def kubectl(self, *args: str, input: str | None = None) -> str:
        """Run the pinned kubectl against this cluster; return stdout, raise with stderr on failure."""
        if self.kubectl_path is None:
            raise ClusterOperationError("no kubectl: run `make cluster-bins` or put one in KUBEBUILDER_ASSETS")
        env = {**os.environ, "KUBECACHEDIR": str(self.scratch_dir / "kubectl-cache")}
        argv = [str(self.kubectl_path), f"--kubeconfig={self.kubeconfig}", *args]
        result = subprocess.run(argv, input=input, capture_output=True, text=True, env=env, check=False)
        if result.returncode != 0:
            raise ClusterOperationError(f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr}")
        return result.stdout

    def install_crds(self, paths: Iterable[Path], timeout: float = 30.0) -> None:
        """Apply every CRD found under `paths` and wait until they are Established."""
        install_crds(self.admin_client(), load_crds(paths), timeout)

    def service_account_token(self, namespace: str, name: str) -> str:
        """A TokenRequest token for ServiceAccount `namespace/name`, creating the ServiceAccount if needed."""
        client = self.admin_client()
        accounts = f"/api/v1/namespaces/{namespace}/serviceaccounts"
        try:
            client.request("POST", accounts, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}})
        except ApiError as error:
            if error.status != 409:
                raise
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": _TOKEN_EXPIRATION_SECONDS},
        }
        response = client.request("POST", f"{accounts}/{name}/token", request)
        token: str = response["status"]["token"]
        return token

    def create_namespace(self, hint: str = "test") -> str:
        """Create a namespace whose name starts with a DNS-label form of `hint`; return the name."""
        suffix = secrets.token_hex(3)
        stem = re.sub(r"[^a-z0-9-]+", "-", hint.lower()).strip("-")[: _NAMESPACE_NAME_MAX - len(suffix) - 1]
        name = f"{stem.rstrip('-') or 'test'}-{suffix}"
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        self.admin_client().request("POST", "/api/v1/namespaces", namespace)
        return name

    def delete_namespace(self, name: str) -> None:
        """Request deletion (a cluster without kube-controller-manager leaves it Terminating)."""
        try:
            self.admin_client().request("DELETE", f"/api/v1/namespaces/{name}")
        except ApiError as error:
            if error.status != 404:
                raise
