"""A whole cluster without containers: the control plane plus the components that make pods happen.

On top of `ControlPlane` (etcd, kube-apiserver, CRDs) it runs kube-controller-manager, kube-scheduler, kwok
(simulated nodes and kubelets) and the LeaderWorkerSet controller with its webhooks, then registers the nodes of
its node pools.

Invariants:
- `start()` returns only when every component is healthy, the LWS webhooks answer, every node is Ready and the
  `default` ServiceAccount exists (the ServiceAccount controller works); on any failure whatever was started is
  stopped before the error propagates, with the failing component's log tail.
- `stop()` stops the components in reverse start order, then the control plane (which checks that no port is
  left listening); the components' own ports are checked too. Every process is a `ManagedProcess`, so the
  interpreter's exit, SIGTERM and the parent's death stop them as they stop the control plane.
- Components run with the admin identity; what runs on top (llmaz) brings its own.
"""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any, Self

from llmaz_dev.envtest._pki import ControlPlanePKI
from llmaz_dev.envtest._process import ManagedProcess, free_loopback_ports, is_listening, stop_in_reverse
from llmaz_dev.envtest.control_plane import ControlPlane, ControlPlaneError
from llmaz_dev.envtest.simulated import _components, _lws
from llmaz_dev.envtest.simulated._assets import SimulatedAssets, find_simulated_assets
from llmaz_dev.envtest.simulated.nodes import NodePool, default_node_pools, node_manifests

_PORT_NAMES = ("kube-controller-manager", "kube-scheduler", "kwok", "lws-webhook", "lws-probe")


class SimulatedCluster(ControlPlane):
    """ControlPlane + kube-controller-manager + kube-scheduler + kwok nodes + LeaderWorkerSet controller."""

    def __init__(
        self,
        *,
        node_pools: Sequence[NodePool] | None = None,
        simulated_assets: SimulatedAssets | None = None,
        **control_plane_options: Any,
    ) -> None:
        """`node_pools` defaults to `default_node_pools()`; other options are ControlPlane's."""
        super().__init__(**control_plane_options)
        self.node_pools = list(default_node_pools() if node_pools is None else node_pools)
        self.simulated_assets = simulated_assets or find_simulated_assets()
        self._components: list[ManagedProcess] = []
        self._component_ports: dict[str, int] = {}
        self._pki: ControlPlanePKI | None = None

    def start(self) -> Self:
        super().start()
        with self._stopped_on_failure():
            self._start_components()
            self._register_nodes()
        return self

    def stop(self) -> None:
        stop_in_reverse(self._components)
        leftovers = [name for name, port in self._component_ports.items() if is_listening(port)]
        super().stop()
        if leftovers:
            raise ControlPlaneError(f"component ports still listening after stop: {leftovers}")

    def node_names(self) -> list[str]:
        return [node["metadata"]["name"] for node in node_manifests(self.node_pools)]

    def state(self) -> dict[str, Any]:
        """ControlPlane's state with the components' processes and ports added."""
        state = super().state()
        state["processes"] += [
            {"name": process.name, "pid": process.pid, "executable": process.argv[0]} for process in self._components
        ]
        state["ports"] = {**state["ports"], **self._component_ports}
        return state

    def component_logs(self, lines: int = 30) -> str:
        """The last `lines` of each component's log (for failure reports)."""
        return "\n".join(f"--- {p.name} ---\n{p.log_tail(lines)}" for p in self._components)

    def _apiserver_args(self, pki: ControlPlanePKI) -> list[str]:
        self._pki = pki  # kube-controller-manager signs ServiceAccount tokens with the same key
        return super()._apiserver_args(pki)

    def _start_components(self) -> None:
        """Start every component, wait until each is healthy, then register LWS's webhooks."""
        ports = dict(zip(_PORT_NAMES, free_loopback_ports(len(_PORT_NAMES)), strict=True))
        self._component_ports = ports
        lws_ca = _lws.write_serving_certificate(self.work_dir / "lws-certs")
        kcm, scheduler, kwok, lws = (self._spawn_component(name, argv) for name, argv in self._argvs(ports))
        self._wait(kcm, lambda: _https_ok(ports["kube-controller-manager"], "/healthz"), "kube-controller-manager")
        self._wait(scheduler, lambda: _https_ok(ports["kube-scheduler"], "/healthz"), "kube-scheduler /healthz")
        self._wait(kwok, lambda: _http_ok(f"http://127.0.0.1:{ports['kwok']}/healthz"), "kwok /healthz")
        self._wait(lws, lambda: _http_ok(f"http://127.0.0.1:{ports['lws-probe']}/readyz"), "LWS controller /readyz")
        self._wait(lws, lambda: _webhook_served(ports["lws-webhook"], lws_ca), "LWS webhooks to be served")
        for configuration in _lws.webhook_configurations(ports["lws-webhook"], lws_ca):
            self.admin_client().apply(_webhook_configuration_path(configuration), configuration, "llmaz-envtest")
        self._wait(kcm, self._default_service_account_exists, "the default ServiceAccount")

    def _argvs(self, ports: dict[str, int]) -> list[tuple[str, list[str]]]:
        assert self._pki is not None
        assets, work, kubeconfig = self.simulated_assets, self.work_dir, self.kubeconfig
        lws_config = _lws.write_configuration(
            work / "lws-config.yaml", ports["lws-webhook"], ports["lws-probe"], work / "lws-certs"
        )
        kcm_args = _components.controller_manager_args(
            kubeconfig,
            ports["kube-controller-manager"],
            work / "kcm-certs",
            self._pki.service_account_key,
            self._pki.ca_cert,
        )
        scheduler_args = _components.scheduler_args(kubeconfig, ports["kube-scheduler"], work / "scheduler-certs")
        return [
            ("kube-controller-manager", [str(assets.kube_controller_manager), *kcm_args]),
            ("kube-scheduler", [str(assets.kube_scheduler), *scheduler_args]),
            ("kwok", [str(assets.kwok), *_components.kwok_args(kubeconfig, assets.kwok_stages, ports["kwok"])]),
            ("lws-controller", [str(assets.lws_controller), *_components.lws_controller_args(kubeconfig, lws_config)]),
        ]

    def _spawn_component(self, name: str, argv: list[str]) -> ManagedProcess:
        process = self._spawn(name, argv)
        self._components.append(process)
        return process

    def _register_nodes(self) -> None:
        client = self.admin_client()
        for node in node_manifests(self.node_pools):
            client.request("POST", "/api/v1/nodes", node)
        kwok = self._components[2]
        self._wait(kwok, self._all_nodes_ready, f"{len(self.node_names())} kwok nodes to be Ready")

    def _all_nodes_ready(self) -> bool:
        nodes = self.admin_client().request("GET", "/api/v1/nodes", query={"labelSelector": "type=kwok"})["items"]
        ready = {node["metadata"]["name"] for node in nodes if _condition_true(node, "Ready")}
        return ready >= set(self.node_names())

    def _default_service_account_exists(self) -> bool:
        return self.admin_client().exists("/api/v1/namespaces/default/serviceaccounts/default")


def _condition_true(obj: dict[str, Any], condition_type: str) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == condition_type and c.get("status") == "True" for c in conditions)


def _webhook_configuration_path(configuration: dict[str, Any]) -> str:
    plural = configuration["kind"].lower() + "s"
    return f"/apis/admissionregistration.k8s.io/v1/{plural}/{configuration['metadata']['name']}"


def _http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with _opener(context).open(url, timeout=2) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.HTTPError):
        return False


def _https_ok(port: int, path: str) -> bool:
    # The components serve a self-signed certificate they generate; only liveness is checked here.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return _http_ok(f"https://127.0.0.1:{port}{path}", context)


def _webhook_served(port: int, ca_pem: bytes) -> bool:
    """The pod webhook path answers (an empty review is a 400, an unregistered path a 404)."""
    context = ssl.create_default_context(cadata=ca_pem.decode())
    request = urllib.request.Request(f"https://127.0.0.1:{port}{_lws.POD_WEBHOOK_PATH}", b"{}", method="POST")
    request.add_header("Content-Type", "application/json")
    try:
        with _opener(context).open(request, timeout=2):
            return True
    except urllib.error.HTTPError as error:
        return error.code != 404
    except OSError:
        return False


def _opener(context: ssl.SSLContext | None) -> urllib.request.OpenerDirector:
    # No ProxyHandler: an http(s)_proxy in the environment must never see loopback traffic.
    return urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
