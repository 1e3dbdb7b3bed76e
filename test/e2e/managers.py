"""The llmaz manager of an e2e run, as something the tests can stop, start, scale and kill.

Two implementations of one interface:
- `LocalManagers` (simulated cluster): replicas are local `llmaz-manager` processes started with the command and
  arguments of the installed Deployment, authenticated with a TokenRequest token of its ServiceAccount (so only
  the generated RBAC applies), listening on loopback. The webhook configurations call a `TcpForwarder`
  (`llmaz_dev.envtest.forward`) that, like the in-cluster webhook Service, forwards each connection to a replica that
  accepts it.
- `DeployedManager` (kind or an existing cluster): the Deployment `llmaz-system/llmaz-controller-manager`,
  scaled with kubectl; replicas are its pods.

In both, a replica's leader-election identity is `<hostname>_<uuid>` (the pod name in a cluster), and the
leader is whoever the Lease names.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from llmaz.certs import ensure_self_signed
from llmaz_dev.envtest import Cluster
from llmaz_dev.envtest._process import ManagedProcess, free_loopback_ports
from llmaz_dev.envtest.forward import TcpForwarder
from llmaz_dev.testing.waiting import eventually_sync

NAMESPACE = "llmaz-system"
DEPLOYMENT = "llmaz-controller-manager"
SERVICE_ACCOUNT = "llmaz-controller-manager"
LEASE = "fbb36db9.llmaz.io"
READY_TIMEOUT = 90.0
_IDENTITY = re.compile(r'"identity":\s*"([^"]+)"')


class Manager(Protocol):
    def scale(self, replicas: int) -> None:
        """Run exactly `replicas` replicas; return once each is ready (or, for 0, gone)."""

    def replica_identities(self) -> list[str]:
        """Leader-election identities (or their hostname part) of the running replicas."""

    def kill(self, identity: str) -> None:
        """Kill the replica holding `identity` at once, without a graceful shutdown."""

    def describe(self) -> str:
        """Logs or status for a failure message."""


def lease_holder(cluster: Cluster) -> str | None:
    lease = cluster.admin_client().request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{LEASE}")
    holder: str | None = (lease.get("spec") or {}).get("holderIdentity")
    return holder


@dataclass
class _Replica:
    process: ManagedProcess
    probe_port: int
    webhook_port: int
    extender_port: int


class LocalManagers:
    """`llmaz-manager` replicas as local processes (see the module docstring)."""

    def __init__(self, cluster: Cluster, work_dir: Path, service: TcpForwarder) -> None:
        self.cluster = cluster
        self.work_dir = work_dir
        self.service = service
        self.replicas: list[_Replica] = []
        self._started = 0
        container = _deployment_container(cluster)
        self._argv = [str(Path(sys.executable).with_name(container["command"][0])), *container["args"]]
        ensure_self_signed(work_dir / "metrics-certs", ["localhost"], ["127.0.0.1"])

    def scale(self, replicas: int) -> None:
        while len(self.replicas) > replicas:
            self.replicas.pop().process.stop()
        added = [self._start_replica() for _ in range(replicas - len(self.replicas))]
        self.service.backends = [("127.0.0.1", replica.webhook_port) for replica in self.replicas]
        for replica in added:
            _wait_ready(replica)

    def replica_identities(self) -> list[str]:
        return [identity for replica in self.replicas if (identity := _identity_in_log(replica))]

    def extender_url(self) -> str:
        """The scheduler extender of the first replica (every replica serves one)."""
        return f"http://127.0.0.1:{self.replicas[0].extender_port}"

    def kill(self, identity: str) -> None:
        replica = next(r for r in self.replicas if _identity_in_log(r) == identity)
        os.killpg(replica.process.pid, signal.SIGKILL)
        replica.process.stop()
        self.replicas.remove(replica)
        self.service.backends = [("127.0.0.1", r.webhook_port) for r in self.replicas]

    def describe(self) -> str:
        return "\n".join(f"--- {r.process.name} ---\n{r.process.log_tail(60)}" for r in self.replicas)

    def stop(self) -> None:
        self.scale(0)

    def _start_replica(self) -> _Replica:
        self._started += 1
        name = f"manager-{self._started}"
        probe, metrics, webhook, extender = free_loopback_ports(4)
        token = self.cluster.service_account_token(NAMESPACE, SERVICE_ACCOUNT)
        kubeconfig = self.cluster.write_kubeconfig(self.work_dir / f"{name}.kubeconfig", {"token": token})
        local = [  # later flags win: only addresses, certificate locations and credentials differ from the pod
            f"--health-probe-bind-address=127.0.0.1:{probe}",
            f"--metrics-bind-address=127.0.0.1:{metrics}",
            f"--metrics-cert-dir={self.work_dir / 'metrics-certs'}",
            "--webhook-bind-host=127.0.0.1",
            f"--webhook-port={webhook}",
            "--webhook-cert-ip-addresses=127.0.0.1",
            f"--webhook-cert-dir={self.work_dir / name / 'webhook-certs'}",
            f"--kubeconfig={kubeconfig}",
            # Off in the Deployment (config/scheduler turns it on); on here, for a second kube-scheduler to call.
            f"--scheduler-extender-bind-address=127.0.0.1:{extender}",
        ]
        process = ManagedProcess(f"llmaz-{name}", [*self._argv, *local], self.work_dir / f"{name}.log")
        process.start()
        replica = _Replica(process, probe, webhook, extender)
        self.replicas.append(replica)
        return replica


class DeployedManager:
    """The installed Deployment (see the module docstring)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def scale(self, replicas: int) -> None:
        self.cluster.kubectl("scale", f"deployment/{DEPLOYMENT}", "-n", NAMESPACE, f"--replicas={replicas}")
        self.wait_rolled_out(replicas)

    def wait_rolled_out(self, replicas: int | None = None) -> None:
        """Wait for the Deployment's rollout, and for exactly `replicas` pods (default: its spec's count)."""
        kubectl = self.cluster.kubectl
        kubectl("rollout", "status", f"deployment/{DEPLOYMENT}", "-n", NAMESPACE, f"--timeout={READY_TIMEOUT:.0f}s")
        if replicas is None:
            replicas = int(
                kubectl("get", f"deployment/{DEPLOYMENT}", "-n", NAMESPACE, "-o", "jsonpath={.spec.replicas}")
            )

        def settled() -> bool:
            # Terminating pods count until they are gone: in its preStop pause an old replica still runs for the
            # Lease.
            pods = self._pods(terminating=True)
            assert len(pods) == replicas, pods
            return True

        eventually_sync(settled, READY_TIMEOUT, f"{DEPLOYMENT} to settle at {replicas} pods", interval=0.5)

    def replica_identities(self) -> list[str]:
        return self._pods()

    def kill(self, identity: str) -> None:
        pod = identity.split("_", 1)[0]
        self.cluster.kubectl("delete", "pod", pod, "-n", NAMESPACE, "--grace-period=0", "--force", "--wait=false")

    def describe(self) -> str:
        return self.cluster.kubectl("logs", f"deployment/{DEPLOYMENT}", "-n", NAMESPACE, "--tail=60")

    def _pods(self, *, terminating: bool = False) -> list[str]:
        """Names of the manager's pods, without those being deleted unless `terminating`."""
        pods = self.cluster.admin_client().request(
            "GET", f"/api/v1/namespaces/{NAMESPACE}/pods", query={"labelSelector": "control-plane=controller-manager"}
        )["items"]
        return [p["metadata"]["name"] for p in pods if terminating or not p["metadata"].get("deletionTimestamp")]


def _deployment_container(cluster: Cluster) -> dict[str, Any]:
    deployment = cluster.admin_client().request("GET", f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{DEPLOYMENT}")
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


def _identity_in_log(replica: _Replica) -> str | None:
    """The identity the replica's leader election logged with its first message."""
    try:
        text = replica.process.log_path.read_text(errors="replace")
    except OSError:
        return None
    found = _IDENTITY.search(text)
    return found.group(1) if found else None


def _wait_ready(replica: _Replica) -> None:
    def ready() -> bool:
        if replica.process.exit_code() is not None:
            raise RuntimeError(f"{replica.process.name} exited:\n{replica.process.log_tail()}")
        return _ready(replica.probe_port)

    try:
        eventually_sync(ready, READY_TIMEOUT, f"{replica.process.name} to be ready", interval=0.2)
    except AssertionError as timeout:
        raise AssertionError(f"{timeout}:\n{replica.process.log_tail()}") from None


def _ready(port: int) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False
