"""llmaz installed on the node as users install it: `make deploy` of config/node with a local manager image.

`install_llmaz` returns once the manager and gateway Deployments have rolled out and admission works through the
webhook Service (its EndpointSlices and kube-proxy's rules follow the pods' readiness by a moment): installed means
admitting.
"""

from __future__ import annotations

import subprocess
import time

import yaml

from llmaz_dev.envtest._assets import AssetsMissingError, source_root
from llmaz_dev.envtest._cluster import Cluster, ClusterOperationError

NAMESPACE = "llmaz-system"
DEPLOYMENT = "llmaz-controller-manager"
GATEWAY = "llmaz-gateway"
_PROBE = {
    "apiVersion": "llmaz.io/v1alpha1",
    "kind": "OpenModel",
    "metadata": {"name": "admission-probe"},
    "spec": {"familyName": "probe", "source": {"modelHub": {"modelID": "llmaz/probe"}}},
}


class InstallError(RuntimeError):
    """`make deploy` failed, or llmaz did not become ready; the message has make's or kubectl's output."""


def install_llmaz(
    cluster: Cluster,
    image: str,
    timeout: float = 180.0,
    loader_image: str | None = None,
    pod_security: str | None = None,
) -> None:
    """`make deploy` of config/node with the manager `image` (and `LOADER_IMG=loader_image`,
    `MODEL_POD_SECURITY=pod_security` when given)."""
    root = source_root()
    if root is None:
        raise AssetsMissingError("installing llmaz needs the source checkout (make deploy, config/node)")
    kubectl = f"{cluster.kubectl_path} --kubeconfig={cluster.kubeconfig}"
    argv = ["make", "--no-print-directory", "deploy", f"IMG={image}", "DEPLOY_CONFIG=config/node", f"KUBECTL={kubectl}"]
    if loader_image is not None:
        argv.append(f"LOADER_IMG={loader_image}")
    if pod_security is not None:
        argv.append(f"MODEL_POD_SECURITY={pod_security}")
    result = subprocess.run(argv, cwd=root, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise InstallError(f"make deploy failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    try:
        for deployment in (DEPLOYMENT, GATEWAY):
            cluster.kubectl(
                "rollout", "status", f"deployment/{deployment}", "-n", NAMESPACE, f"--timeout={timeout:.0f}s"
            )
    except ClusterOperationError as error:
        raise InstallError(f"llmaz did not roll out: {error}") from None
    wait_admitting(cluster, timeout)


def wait_admitting(cluster: Cluster, timeout: float) -> None:
    """Return once a server-side dry run of an OpenModel passes admission (whichever llmaz serves the webhooks)."""
    probe = yaml.safe_dump(_PROBE)
    deadline = time.monotonic() + timeout
    while True:
        try:
            cluster.kubectl("apply", "--server-side", "--dry-run=server", "-f", "-", input=probe)
            return
        except ClusterOperationError as error:
            if time.monotonic() > deadline:
                raise InstallError(f"admission through the webhook Service never worked: {error}") from None
        time.sleep(0.5)
