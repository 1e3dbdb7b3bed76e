"""Where the node tier's node lives: its addresses, fixed ports and host paths, in one place.

Invariants:
- One real node per machine: its host-level paths sit under one fixed root (`LLMAZ_NODE_ROOT`, default
  `/var/lib/llmaz-node`), never the system's default containerd, kubelet or CNI locations, so a second start or a
  crashed run is detected from `state.json` there.
- The node's addresses are private to this machine: pods on the bridge `llmaz0` in 10.244.0.0/16 with the host
  at 10.244.0.1 (where kube-apiserver, CoreDNS, metrics-server and anything else pods or kube-apiserver's
  aggregator must reach listen), Services in
  10.96.0.0/16, cluster DNS at 10.96.0.10.
- Fixed ports sit below the ephemeral range, so the free ports other clusters pick never collide with them.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_ROOT = Path("/var/lib/llmaz-node")


@dataclass(frozen=True)
class NodePorts:
    kubelet: int = 10250
    kubelet_healthz: int = 10248
    proxy_metrics: int = 10249
    proxy_healthz: int = 10256
    dns: int = 53
    dns_health: int = 10280
    dns_ready: int = 10281
    metrics_server: int = 10282
    router_healthz: int = 10283
    # Not the node's own: where the node tier's S3-compatible object store listens, on the bridge address.
    object_store: int = 10290


@dataclass(frozen=True)
class NodeLayout:
    """The node's names, addresses, ports and paths; pure data, derived from `root`."""

    root: Path = field(default_factory=lambda: Path(os.environ.get("LLMAZ_NODE_ROOT") or DEFAULT_ROOT))
    node_name: str = "llmaz-node"
    bridge: str = "llmaz0"
    pod_cidr: str = "10.244.0.0/16"
    service_cidr: str = "10.96.0.0/16"
    cluster_domain: str = "cluster.local"
    ports: NodePorts = field(default_factory=NodePorts)

    @property
    def host_ip(self) -> str:
        """The bridge's address: the host as the pods see it."""
        return str(next(ipaddress.ip_network(self.pod_cidr).hosts()))

    @property
    def bridge_prefix(self) -> int:
        return ipaddress.ip_network(self.pod_cidr).prefixlen

    @property
    def dns_ip(self) -> str:
        return str(ipaddress.ip_network(self.service_cidr).network_address + 10)

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    @property
    def containerd_dir(self) -> Path:
        return self.root / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.containerd_dir / "containerd.sock"

    @property
    def containerd_root(self) -> Path:
        return self.containerd_dir / "root"

    @property
    def containerd_state(self) -> Path:
        return self.containerd_dir / "state"

    @property
    def runc_root(self) -> Path:
        return self.containerd_dir / "runc"

    @property
    def kubelet_dir(self) -> Path:
        return self.root / "kubelet"

    @property
    def pod_logs_dir(self) -> Path:
        return self.root / "pod-logs"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def cni_ipam_dir(self) -> Path:
        return self.root / "cni" / "ipam"

    @property
    def config_dir(self) -> Path:
        return self.root / "config"
