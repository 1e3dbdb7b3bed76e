"""Command lines and configuration files of the components a simulated cluster adds to the control plane.

Invariants:
- Every component talks to kube-apiserver with the admin kubeconfig and listens on 127.0.0.1 only, on a port
  chosen by the caller; none runs leader election (there is one of each).
- kube-controller-manager runs only the controllers llmaz's behaviour depends on (listed below), signs
  ServiceAccount tokens with the control plane's service-account key, and syncs HPAs every few seconds. The
  node-lifecycle controller runs because it lifts the `node.kubernetes.io/not-ready` taint kube-apiserver puts
  on every new Node; its grace period is an hour, so a busy machine delaying kwok's heartbeats never makes a
  node NotReady (and there is no taint-eviction controller to evict anything).
- kwok manages only Nodes annotated `kwok.x-k8s.io/node: fake`, with the stages shipped next to its binary:
  nodes become Ready at once; pods become Running and Ready at once (init containers Completed); pods being
  deleted are removed at once (no grace period), so garbage collection is observable without waiting.
"""

from __future__ import annotations

from pathlib import Path

from llmaz_dev.envtest.simulated.nodes import KWOK_ANNOTATION

CONTROLLERS = (
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "clusterrole-aggregation-controller",
    "endpoints-controller",
    "endpointslice-controller",
    "statefulset-controller",
    "replicaset-controller",
    "deployment-controller",
    "horizontal-pod-autoscaler-controller",
    "pod-garbage-collector-controller",
    "node-lifecycle-controller",
)
HPA_SYNC_PERIOD = "3s"
NODE_GRACE_PERIOD = "1h"
_NODE_LEASE_SECONDS = 40


def controller_manager_args(
    kubeconfig: Path, port: int, cert_dir: Path, service_account_key: Path, ca_file: Path
) -> list[str]:
    return [
        *_serving_args(kubeconfig, port, cert_dir),
        f"--controllers={','.join(CONTROLLERS)}",
        f"--service-account-private-key-file={service_account_key}",
        f"--root-ca-file={ca_file}",
        f"--horizontal-pod-autoscaler-sync-period={HPA_SYNC_PERIOD}",
        f"--node-monitor-grace-period={NODE_GRACE_PERIOD}",
        "--kube-api-qps=200",
        "--kube-api-burst=400",
        "--v=1",
    ]


def scheduler_args(kubeconfig: Path, port: int, cert_dir: Path) -> list[str]:
    return [*_serving_args(kubeconfig, port, cert_dir), "--v=1"]


def _serving_args(kubeconfig: Path, port: int, cert_dir: Path) -> list[str]:
    """What kube-controller-manager and kube-scheduler share: the API server, a loopback-only health port with
    its own certificates, and no leader election (each runs once)."""
    return [
        f"--kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={cert_dir}",
        "--leader-elect=false",
    ]


def kwok_args(kubeconfig: Path, stages: Path, port: int) -> list[str]:
    """`stages` is kwok's `--config`: the node and pod lifecycle stages shipped next to the binary."""
    return [
        f"--kubeconfig={kubeconfig}",
        f"--config={stages}",
        f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
        f"--server-address=127.0.0.1:{port}",
        "--node-ip=127.0.0.1",
        f"--node-lease-duration-seconds={_NODE_LEASE_SECONDS}",
    ]


def lws_controller_args(kubeconfig: Path, config: Path) -> list[str]:
    return [f"--kubeconfig={kubeconfig}", f"--config={config}", "--leader-elect=false", "--zap-log-level=info"]
