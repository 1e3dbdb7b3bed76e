"""etcd plus kube-apiserver on loopback, started and stopped by the caller.

Invariants:
- Everything listens on 127.0.0.1 only, on ports free at start: etcd client (plain http), etcd peer, and the
  kube-apiserver secure port. The kube-apiserver port survives `restart_apiserver()`. The one exception is a
  control plane given another `address` (the node tier's bridge address, so that pods reach it): kube-apiserver
  then listens and advertises there, and its endpoint reconciler publishes the `kubernetes` Service's endpoints.
- `start()` returns only when etcd is healthy, `/readyz` answers `ok`, and every CRD is Established; if any
  step fails, whatever was started is stopped before the error propagates (with the failing log's tail).
- `stop()` stops kube-apiserver, then etcd (reaping both process groups), checks that no port still listens,
  and deletes the working directory if it created it. It is idempotent; `_process` also stops the processes at
  interpreter exit and on SIGTERM/SIGHUP.
- kube-apiserver runs with the default admission plugins, `--authorization-mode=Node,RBAC`, client-certificate
  authentication against a generated CA, and a service-account signing key (TokenRequest API). There is no
  kube-controller-manager: no garbage collection, no namespace finalization, no default ServiceAccounts.
- A detached control plane (`make dev-up`) outlives this process; `state()` records its pids for
  `stop_detached`.
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from llmaz_dev.envtest._assets import ClusterAssets, find_assets
from llmaz_dev.envtest._cluster import Cluster, ClusterOperationError
from llmaz_dev.envtest._pki import ControlPlanePKI, write_pki
from llmaz_dev.envtest._process import ManagedProcess, free_loopback_ports, is_listening, on_exit
from llmaz_dev.envtest._rest import ApiError, plain_http

_SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
# Room for 65,534 Services: benchmarks and long `make run` sessions create thousands.
SERVICE_CIDR = "10.0.0.0/16"
LOOPBACK = "127.0.0.1"
_POLL_INTERVAL = 0.1
_WORK_DIR_PREFIX = "llmaz-envtest-"
_OWNER_FILE = "owner.pid"


class ControlPlaneError(RuntimeError):
    """The control plane failed to start, restart or stop cleanly."""


class ControlPlane(Cluster):
    """An etcd + kube-apiserver pair on loopback. Use as a context manager or call start()/stop()."""

    def __init__(
        self,
        *,
        crd_paths: Sequence[Path] = (),
        assets: ClusterAssets | None = None,
        work_dir: Path | None = None,
        kubeconfig: Path | None = None,
        detached: bool = False,
        start_timeout: float = 60.0,
        address: str = LOOPBACK,
        service_cidr: str = SERVICE_CIDR,
    ) -> None:
        """`crd_paths` (files or directories) and the LWS CRD, if the assets have it, are installed at start.

        `work_dir` defaults to a fresh temporary directory that `stop()` deletes; a given one is kept.
        `kubeconfig` defaults to `<work_dir>/kubeconfig`.
        `detached` processes survive this interpreter (see `state()`); etcd then keeps fsync on.
        `address` is where kube-apiserver listens (an address of this host); `service_cidr` is its ClusterIP range.
        """
        self.assets = assets or find_assets()
        self.crd_paths = [*crd_paths, *([self.assets.lws_crd] if self.assets.lws_crd else [])]
        self.kubectl_path = self.assets.kubectl
        self.detached = detached
        self.start_timeout = start_timeout
        self.address = address
        self.service_cidr = service_cidr
        self._owns_work_dir = work_dir is None
        self.work_dir = work_dir or _new_temporary_work_dir()
        self.scratch_dir = self.work_dir
        self.kubeconfig = kubeconfig or self.work_dir / "kubeconfig"
        self._etcd: ManagedProcess | None = None
        self._apiserver: ManagedProcess | None = None
        self._ports: dict[str, int] = {}
        if self._owns_work_dir:
            on_exit(id(self), self._remove_work_dir)

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self._ports['etcd']}"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()

    def start(self) -> Self:
        with self._stopped_on_failure():
            pki = write_pki(self.work_dir / "pki", [self.address, _first_host(self.service_cidr)])
            self.ca_file = pki.ca_cert
            self.admin_cert_file, self.admin_key_file = pki.admin_cert, pki.admin_key
            etcd, peer, apiserver = free_loopback_ports(3)
            self._ports = {"etcd": etcd, "etcd-peer": peer, "apiserver": apiserver}
            self.server = f"https://{self.address}:{apiserver}"
            self._etcd = self._spawn("etcd", [str(self.assets.etcd), *self._etcd_args()])
            self._wait(self._etcd, self._etcd_healthy, "etcd to report healthy")
            self._write_kubeconfig()
            self._apiserver_argv = [str(self.assets.kube_apiserver), *self._apiserver_args(pki)]
            self._start_apiserver()
            self.install_crds(self.crd_paths, timeout=self.start_timeout)
        return self

    @contextlib.contextmanager
    def _stopped_on_failure(self) -> Iterator[None]:
        """Whatever fails in the block (or interrupts it) first stops what has started, then propagates."""
        try:
            yield
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop kube-apiserver and etcd, verify nothing is left, remove a temporary work dir."""
        for process in (self._apiserver, self._etcd):
            if process is not None:
                process.stop()
        hosts = {"apiserver": self.address}
        leftovers = [name for name, port in self._ports.items() if is_listening(port, hosts.get(name, LOOPBACK))]
        self._apiserver = self._etcd = None
        if self._owns_work_dir:
            on_exit(id(self), None)
            self._remove_work_dir()
        if leftovers:
            raise ControlPlaneError(f"ports still listening after stop: {leftovers} ({self._ports})")

    def restart_apiserver(self) -> None:
        """Stop kube-apiserver and start it again on the same port against the same etcd; wait for /readyz."""
        self.stop_apiserver()
        self.start_apiserver()

    def stop_apiserver(self) -> None:
        """Stop kube-apiserver alone (an outage: etcd keeps running); `start_apiserver` brings it back."""
        if self._apiserver is None:
            raise ClusterOperationError("control plane is not running")
        self._apiserver.stop()

    def start_apiserver(self) -> None:
        """Start a stopped kube-apiserver on its old port against the same etcd; wait for /readyz."""
        if self._apiserver is None:
            raise ClusterOperationError("control plane is not running")
        self._start_apiserver()

    def compact_etcd(self) -> None:
        """Compact etcd at its current revision: watches and lists at older resourceVersions then get 410 Gone.

        kube-apiserver's watch cache keeps serving recent history from memory after a compaction (as in a real
        cluster), so kube-apiserver is restarted too: its cache then starts at the compacted revision. Open
        watches are cut, as in an API server rollout; a client re-watching at an older resourceVersion gets 410.
        """
        header = plain_http(f"{self.etcd_url}/v3/kv/range", {"key": base64.b64encode(b"/").decode()})
        revision = int(header["header"]["revision"])
        try:
            plain_http(f"{self.etcd_url}/v3/kv/compaction", {"revision": revision, "physical": True})
        except ApiError as error:
            if "compacted" not in error.body:  # already compacted at this revision: nothing newer to drop
                raise
        self.restart_apiserver()

    def state(self) -> dict[str, Any]:
        """What `stop_detached` needs to stop this control plane from another process."""
        processes = {"kube-apiserver": self._apiserver, "etcd": self._etcd}
        return {
            "processes": [
                {"name": name, "pid": process.pid, "executable": process.argv[0]}
                for name, process in processes.items()
                if process is not None
            ],
            "ports": self._ports,
            "kubeconfig": str(self.kubeconfig),
            "server": self.server,
            "work_dir": str(self.work_dir),
        }

    def _remove_work_dir(self) -> None:
        shutil.rmtree(self.work_dir, ignore_errors=True)

    def _start_apiserver(self) -> None:
        self._apiserver = self._spawn("kube-apiserver", self._apiserver_argv)
        self._wait(self._apiserver, self._apiserver_ready, "kube-apiserver /readyz")

    def _spawn(self, name: str, argv: list[str]) -> ManagedProcess:
        process = ManagedProcess(name, argv, self.work_dir / "logs" / f"{name}.log", detached=self.detached)
        process.start()
        return process

    def _wait(self, process: ManagedProcess, ready: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + self.start_timeout
        while not ready():
            code = process.exit_code()
            if code is not None:
                raise ControlPlaneError(f"{process.name} exited ({code}) waiting for {what}:\n{process.log_tail()}")
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"timed out after {self.start_timeout:.0f}s waiting for {what}:\n{process.log_tail()}"
                )
            time.sleep(_POLL_INTERVAL)

    def _etcd_healthy(self) -> bool:
        try:
            return bool(plain_http(f"{self.etcd_url}/health", timeout=2).get("health") == "true")
        except (OSError, ApiError, AttributeError):
            return False

    def _apiserver_ready(self) -> bool:
        try:
            return self.admin_client().get_text("/readyz", timeout=5) == "ok"
        except (OSError, ApiError):
            return False

    def _etcd_args(self) -> list[str]:
        peer = f"http://127.0.0.1:{self._ports['etcd-peer']}"
        args = [
            "--name=default",
            f"--data-dir={self.work_dir / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            "--log-level=warn",
        ]
        # Throwaway data: skipping fsync makes every write (and so every test) faster.
        return args if self.detached else [*args, "--unsafe-no-fsync"]

    def _apiserver_args(self, pki: ControlPlanePKI) -> list[str]:
        # A loopback address cannot back the `kubernetes` Service's endpoints; nothing on loopback needs them.
        reconciler = ["--endpoint-reconciler-type=none"] if self.address == LOOPBACK else []
        return [
            f"--etcd-servers={self.etcd_url}",
            f"--bind-address={self.address}",
            f"--advertise-address={self.address}",
            f"--secure-port={self._ports['apiserver']}",
            f"--cert-dir={self.work_dir / 'apiserver-certs'}",
            f"--tls-cert-file={pki.serving_cert}",
            f"--tls-private-key-file={pki.serving_key}",
            f"--client-ca-file={pki.ca_cert}",
            f"--service-account-issuer={_SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={pki.service_account_public_key}",
            f"--service-account-signing-key-file={pki.service_account_key}",
            f"--service-cluster-ip-range={self.service_cidr}",
            "--authorization-mode=Node,RBAC",
            "--allow-privileged=true",
            *reconciler,
        ]

    def _write_kubeconfig(self) -> None:
        admin = {"client-certificate": str(self.admin_cert_file), "client-key": str(self.admin_key_file)}
        self.write_kubeconfig(self.kubeconfig, admin, user_name="envtest-admin")


def _first_host(cidr: str) -> str:
    """The `kubernetes` Service's ClusterIP: the first address of the Service range."""
    return str(next(ipaddress.ip_network(cidr).hosts()))


def _new_temporary_work_dir() -> Path:
    """A fresh temporary directory tagged with this pid, after sweeping those of dead owners.

    Normal exits remove their directory; only a SIGKILLed owner leaves one behind, and the next start removes it.
    """
    for stale in Path(tempfile.gettempdir()).glob(f"{_WORK_DIR_PREFIX}*"):
        if _abandoned(stale):
            shutil.rmtree(stale, ignore_errors=True)
    work_dir = Path(tempfile.mkdtemp(prefix=_WORK_DIR_PREFIX))
    (work_dir / _OWNER_FILE).write_text(str(os.getpid()))
    return work_dir


def _abandoned(work_dir: Path) -> bool:
    # Without a readable owner file the directory may be another process's, just created: never touch it.
    try:
        owner = int((work_dir / _OWNER_FILE).read_text())
    except (OSError, ValueError):
        return False
    return not Path(f"/proc/{owner}").exists()
