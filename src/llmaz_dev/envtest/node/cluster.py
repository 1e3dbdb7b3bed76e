"""One real Kubernetes node on this machine: the simulated cluster's components plus containerd, kubelet,
kube-proxy, kube-router's firewall, CoreDNS and metrics-server, so that pods really run, NetworkPolicies are
enforced and HPAs see their CPU and memory.

On top of `SimulatedCluster` (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, the LeaderWorkerSet
controller, and kwok for any simulated node pools asked for) it runs:
- containerd (Debian's, with its own root, state, socket and runc root under the node's root) with the CNI
  bridge and host-local plugins, and the project's images imported (the pod sandbox image among them);
- kubelet, registered as `llmaz-node` with a client certificate of the `system:nodes` group;
- kube-proxy in nftables mode;
- kube-router with only its firewall running (no routes, no service proxy): it enforces NetworkPolicies with
  iptables rules and ipsets on pod traffic (the node's own traffic passes);
- CoreDNS on the bridge address, behind the `kube-dns` Service;
- metrics-server on the bridge address, behind the `kube-system/metrics-server` Service and the APIService
  `v1beta1.metrics.k8s.io`, which kube-apiserver's aggregator proxies to it (`_metrics`).
kube-apiserver listens on the bridge address, so pods reach it through the `kubernetes` Service.

Invariants:
- `start()` checks every prerequisite before starting anything, cleans what a crashed run left (saying what it
  cleaned), and returns only when the node is Ready, kube-proxy, kube-router and CoreDNS are healthy,
  metrics-server is live and its APIService Available; on any failure everything started is stopped and the host
  is restored before the error propagates. A node that never gets Ready is reported with its conditions and
  kubelet's last log lines.
  Pod metrics appear once metrics-server has scraped kubelet twice (10-20 s after a pod starts): whoever needs
  them waits for them.
- `stop()`, interpreter exit, SIGTERM and Ctrl-C stop the processes and undo every host change
  (`_host.teardown`); a SIGKILLed owner is cleaned up by the reaper process.
"""

from __future__ import annotations

import ssl
import subprocess
import sys
import urllib.error
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

from llmaz.certs import pki
from llmaz_dev.envtest._pki import ControlPlanePKI, write_key_pair
from llmaz_dev.envtest._process import ManagedProcess, on_exit, stop_detached, stop_in_reverse
from llmaz_dev.envtest._rest import ApiError
from llmaz_dev.envtest.control_plane import ControlPlaneError
from llmaz_dev.envtest.images import LocalImage
from llmaz_dev.envtest.node import _config, _host, _metrics
from llmaz_dev.envtest.node._assets import NodeAssets, find_node_assets
from llmaz_dev.envtest.node._layout import NodeLayout
from llmaz_dev.envtest.simulated.cluster import SimulatedCluster, _condition_true, _http_ok

_FIELD_MANAGER = "llmaz-envtest"
DEV_TAG = "dev"


class NodeCluster(SimulatedCluster):
    """SimulatedCluster + containerd + kubelet + kube-proxy + kube-router + CoreDNS + metrics-server: one node where
    pods really run."""

    def __init__(
        self,
        *,
        sandbox_image: LocalImage,
        images: Sequence[LocalImage] = (),
        layout: NodeLayout | None = None,
        node_assets: NodeAssets | None = None,
        node_pools: Sequence[Any] = (),
        **control_plane_options: Any,
    ) -> None:
        """`sandbox_image` and `images` are imported into the node's containerd; `node_pools` adds kwok nodes
        beside the real one; other options are ControlPlane's."""
        self.layout = layout or NodeLayout()
        super().__init__(
            node_pools=node_pools,
            address=self.layout.host_ip,
            service_cidr=self.layout.service_cidr,
            **control_plane_options,
        )
        self.node_assets = node_assets or find_node_assets()
        self.sandbox_image = sandbox_image
        self.images = [sandbox_image, *(image for image in images if image.image != sandbox_image.image)]
        self._node_processes: list[ManagedProcess] = []
        self._host_state: _host.HostState | None = None
        self._reaper: ManagedProcess | None = None
        self._node_pki: ControlPlanePKI | None = None
        self._metrics_pki: _metrics.MetricsPKI | None = None

    @property
    def node_name(self) -> str:
        return self.layout.node_name

    def start(self) -> Self:
        _host.check_prerequisites(self.layout)
        self._clean_leftovers()
        self._host_state = _host.prepare_host(self.layout)
        on_exit(id(self._host_state), self._teardown_host)
        with self._stopped_on_failure():
            _host.check_ports(self.layout)
            self._start_reaper()
            super().start()
            self._start_node()
        return self

    def stop(self) -> None:
        stop_in_reverse(self._node_processes)
        try:
            super().stop()
        finally:
            self._teardown_host()

    def _teardown_host(self) -> None:
        if self._host_state is not None:
            on_exit(id(self._host_state), None)
            _host.teardown(self.layout, self._host_state)
            self._host_state = None
        if self._reaper is not None:
            stop_detached(self._reaper.pid, Path(sys.executable))
            self._reaper = None

    def node_logs(self, lines: int = 30) -> str:
        """The last `lines` of each node process's log (containerd, kubelet, kube-proxy, kube-router, CoreDNS,
        metrics-server)."""
        return "\n".join(f"--- {p.name} ---\n{p.log_tail(lines)}" for p in self._node_processes)

    def component_logs(self, lines: int = 30) -> str:
        return "\n".join([super().component_logs(lines), self.node_logs(lines)])

    def ctr(self, *args: str) -> str:
        """Run `ctr` against the node's containerd (namespace k8s.io); return stdout."""
        argv = ["ctr", "--address", str(self.layout.containerd_socket), "--namespace", "k8s.io", *args]
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise ControlPlaneError(f"ctr {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
        return result.stdout

    def kill_container(self, container_id: str) -> None:
        """SIGKILL a container's process, as a crash would (`containerd://<id>` from a pod's status, or the id)."""
        self.ctr("tasks", "kill", "--signal", "SIGKILL", container_id.removeprefix("containerd://"))

    def import_images(self, images: Sequence[LocalImage]) -> None:
        """Import OCI archives into the node's containerd, skipping images it already has, and tag each one also
        `<repository>:dev` (`DEV_TAG`), the name config/node gives the images it does not set per build."""
        present = set(self.ctr("images", "list", "--quiet").split())
        for image in images:
            if image.image not in present:
                self.ctr("images", "import", str(image.archive))
            self.ctr("images", "tag", "--force", image.image, f"{image.image.rsplit(':', 1)[0]}:{DEV_TAG}")

    def _clean_leftovers(self) -> None:
        stale = _host.find_leftovers(self.layout)
        if stale is None:
            return
        cleaned = _host.teardown(self.layout, stale)
        owner = f"pid {stale.owner_pid}" if stale.owner_pid else "an unknown run"
        print(f"node: cleaned what {owner} left behind: {', '.join(cleaned) or 'nothing'}", file=sys.stderr)

    def _start_reaper(self) -> None:
        argv = [
            sys.executable,
            "-m",
            "llmaz_dev.envtest.node._reaper",
            str(self._host_state_owner()),
            str(self.layout.root),
        ]
        self._reaper = ManagedProcess("node-reaper", argv, self.work_dir / "logs" / "node-reaper.log", detached=True)
        self._reaper.start()

    def _host_state_owner(self) -> int:
        assert self._host_state is not None
        return self._host_state.owner_pid

    def _apiserver_args(self, pki_paths: ControlPlanePKI) -> list[str]:
        self._node_pki = pki_paths
        self._metrics_pki = _metrics.write_pki(pki_paths.ca_cert.parent / "aggregation", self._ca(), self.layout)
        return [
            *super()._apiserver_args(pki_paths),
            # logs, exec and port-forward go through kubelet, which admits the admin's certificate.
            f"--kubelet-client-certificate={pki_paths.admin_cert}",
            f"--kubelet-client-key={pki_paths.admin_key}",
            "--kubelet-preferred-address-types=InternalIP",
            *_metrics.aggregator_args(self._metrics_pki),
        ]

    def _ca(self) -> pki.KeyPair:
        assert self._node_pki is not None
        return pki.KeyPair(self._node_pki.ca_cert.read_bytes(), self._node_pki.ca_key.read_bytes())

    def _start_node(self) -> None:
        layout, assets = self.layout, self.node_assets
        config = layout.config_dir
        config.mkdir(parents=True, exist_ok=True)
        for directory in (layout.cni_conf_dir, layout.cni_ipam_dir, layout.kubelet_dir, layout.pod_logs_dir):
            directory.mkdir(parents=True, exist_ok=True)
        node_kubeconfig = self._write_node_kubeconfig(config / "kubelet.kubeconfig")
        kubelet_cert, kubelet_key = config / "kubelet-serving.crt", config / "kubelet-serving.key"
        write_key_pair(_metrics.kubelet_serving_pair(self._ca(), layout), kubelet_cert, kubelet_key)
        (config / "containerd.toml").write_text(_config.containerd_config(layout, self.sandbox_image.image))
        (layout.cni_conf_dir / "10-llmaz-node.conflist").write_text(_config.cni_config(layout))
        (config / "kubelet.yaml").write_text(_config.kubelet_config(layout, self.ca_file, kubelet_cert, kubelet_key))
        (config / "kube-proxy.yaml").write_text(_config.kube_proxy_config(layout, self.kubeconfig))
        (config / "Corefile").write_text(_config.corefile(layout, self.kubeconfig))

        containerd = self._spawn_node("containerd", ["containerd", f"--config={config / 'containerd.toml'}"])
        self._wait(containerd, lambda: _host._connectable(layout.containerd_socket), "containerd's socket")
        self.import_images(self.images)

        kubelet = self._spawn_node(
            "kubelet",
            [
                str(assets.kubelet),
                f"--config={config / 'kubelet.yaml'}",
                f"--kubeconfig={node_kubeconfig}",
                f"--root-dir={layout.kubelet_dir}",
                f"--hostname-override={layout.node_name}",
                f"--node-ip={layout.host_ip}",
                "--v=1",
            ],
        )
        proxy = self._spawn_node("kube-proxy", [str(assets.kube_proxy), f"--config={config / 'kube-proxy.yaml'}"])
        coredns = self._spawn_node("coredns", [str(assets.coredns), "-conf", str(config / "Corefile")])
        for manifest in _config.dns_manifests(layout):
            self.admin_client().apply(_manifest_path(manifest), manifest, _FIELD_MANAGER)
        metrics_server = self._start_metrics_server(config)
        self._wait_node_ready(kubelet)
        ports = layout.ports
        # kube-router reads its Node at start: only once kubelet has registered it.
        router_args = _config.kube_router_args(layout, self._node_copy(config))
        router = self._spawn_node("kube-router", [str(assets.kube_router), *router_args])
        self._wait(proxy, lambda: _http_ok(f"http://127.0.0.1:{ports.proxy_healthz}/healthz"), "kube-proxy /healthz")
        self._wait(router, lambda: _http_ok(f"http://127.0.0.1:{ports.router_healthz}/healthz"), "kube-router /healthz")
        self._wait(coredns, lambda: _http_ok(f"http://127.0.0.1:{ports.dns_ready}/ready"), "CoreDNS /ready")
        self._wait(metrics_server, self._metrics_server_live, "metrics-server /livez")
        api_service = _metrics.api_service(self.ca_file.read_bytes())
        self.admin_client().apply(_manifest_path(api_service), api_service, _FIELD_MANAGER)
        self._wait(metrics_server, self._metrics_api_available, f"APIService {_metrics.API_SERVICE} Available")

    def _node_copy(self, config: Path) -> Path:
        """The admin kubeconfig under the node's root, so that teardown finds whoever reads it by its command line."""
        path = config / "kube-router.kubeconfig"
        path.write_bytes(Path(self.kubeconfig).read_bytes())
        return path

    def _start_metrics_server(self, config: Path) -> ManagedProcess:
        """Apply metrics-server's RBAC, Service and EndpointSlice, then start it once kube-apiserver grants it what
        it reads at start (the request-header CA's ConfigMap)."""
        assert self._metrics_pki is not None
        assert self._apiserver is not None
        client = self.admin_client()
        for manifest in _metrics.metrics_server_manifests(self.layout):
            client.apply(_manifest_path(manifest), manifest, _FIELD_MANAGER)
        self._wait(self._apiserver, self._metrics_server_authorized, "metrics-server's RBAC to take effect")
        cert, key = self._metrics_pki.client_cert, self._metrics_pki.client_key
        user = {"client-certificate": str(cert), "client-key": str(key)}
        kubeconfig = self.write_kubeconfig(config / "metrics-server.kubeconfig", user, _metrics.NAME)
        argv = _metrics.metrics_server_args(self.layout, self._metrics_pki, kubeconfig, self.ca_file)
        return self._spawn_node(_metrics.NAME, [str(self.node_assets.metrics_server), *argv])

    def _metrics_server_authorized(self) -> bool:
        """kube-apiserver's RBAC cache has the RoleBinding that lets metrics-server read the request-header CA."""
        answer = self.admin_client().request("POST", _metrics.ACCESS_REVIEWS, _metrics.startup_access_review())
        return bool((answer.get("status") or {}).get("allowed"))

    def _metrics_server_live(self) -> bool:
        context = ssl.create_default_context(cadata=self.ca_file.read_text())
        return _http_ok(f"https://{self.layout.host_ip}:{self.layout.ports.metrics_server}/livez", context)

    def _metrics_api_available(self) -> bool:
        """kube-apiserver's aggregator reached metrics-server through the Service (its discovery check passed)."""
        path = f"/apis/apiregistration.k8s.io/v1/apiservices/{_metrics.API_SERVICE}"
        return _condition_true(self.admin_client().request("GET", path), "Available")

    def _spawn_node(self, name: str, argv: list[str]) -> ManagedProcess:
        process = self._spawn(name, argv)
        self._node_processes.append(process)
        return process

    def _write_node_kubeconfig(self, path: Path) -> Path:
        node = pki.new_client_cert(
            self._ca(), datetime.now(UTC), f"system:node:{self.layout.node_name}", "system:nodes", new_key=pki.ec_key
        )
        cert, key = path.with_suffix(".crt"), path.with_suffix(".key")
        write_key_pair(node, cert, key)
        return self.write_kubeconfig(path, {"client-certificate": str(cert), "client-key": str(key)}, "node")

    def _wait_node_ready(self, kubelet: ManagedProcess) -> None:
        try:
            self._wait(kubelet, self._node_ready, f"node {self.layout.node_name} to be Ready")
        except ControlPlaneError as error:
            raise ControlPlaneError(f"{error}\nnode conditions: {self._node_conditions()}") from None

    def _node_ready(self) -> bool:
        try:
            node = self.admin_client().request("GET", f"/api/v1/nodes/{self.layout.node_name}")
        except (ApiError, OSError, urllib.error.URLError):
            return False
        return _condition_true(node, "Ready")

    def _node_conditions(self) -> str:
        try:
            node = self.admin_client().request("GET", f"/api/v1/nodes/{self.layout.node_name}")
        except (ApiError, OSError) as error:
            return f"the node is not registered ({error})"
        conditions = (node.get("status") or {}).get("conditions") or []
        return "; ".join(f"{c['type']}={c['status']} {c.get('reason', '')}: {c.get('message', '')}" for c in conditions)


def _manifest_path(manifest: dict[str, Any]) -> str:
    """The object's own URL; the plural of each kind the node applies is its lower-cased kind plus "s"."""
    group = "/api/v1" if manifest["apiVersion"] == "v1" else f"/apis/{manifest['apiVersion']}"
    metadata = manifest["metadata"]
    namespace = f"/namespaces/{metadata['namespace']}" if "namespace" in metadata else ""
    return f"{group}{namespace}/{manifest['kind'].lower()}s/{metadata['name']}"
