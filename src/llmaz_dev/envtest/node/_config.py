"""The configuration files of the node's components, rendered from a `NodeLayout`; pure functions.

Each setting below that is not a default was a failure on these machines until set:
- containerd `restrict_oom_score_adj` and kubelet/kube-proxy `oomScoreAdj: 0`: the machine withholds
  CAP_SYS_RESOURCE, so no negative oom_score_adj can be set and every sandbox would fail to start;
- kubelet `failCgroupV1: false`: the host's hierarchy is cgroup v1;
- `cgroupfs` everywhere: there is no systemd to delegate cgroups to;
- the sandbox image is a local one: nothing can be pulled.
The CNI bridge never masquerades (`ipMasq: false`): pods talk to each other and to the host, never out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from llmaz_dev.envtest.node._layout import NodeLayout

CNI_NETWORK = "llmaz-node"
CNI_BIN_DIR = Path("/usr/lib/cni")
RUNC = Path("/usr/sbin/runc")
# Forwarded traffic that entered from the bridge may only leave through it: nothing from a pod leaves the machine.
GUARD_TABLE = "llmaz-node"


def containerd_config(layout: NodeLayout, sandbox_image: str) -> str:
    """containerd 1.6's config (version 2): its own root, state, socket and runc root; CRI with cgroupfs."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{layout.containerd_root}"
state = "{layout.containerd_state}"
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
]

[grpc]
  address = "{layout.containerd_socket}"

[ttrpc]
  address = "{layout.containerd_socket}.ttrpc"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{layout.containerd_dir / "opt"}"

[{cri}]
  sandbox_image = "{sandbox_image}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  BinaryName = "{RUNC}"
  Root = "{layout.runc_root}"

[{cri}.cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{layout.cni_conf_dir}"
  max_conf_num = 1
"""


def cni_config(layout: NodeLayout) -> str:
    """One bridge network over the pod CIDR, the host as its gateway, addresses from host-local in our root."""
    network = {
        "cniVersion": "0.4.0",
        "name": CNI_NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": layout.bridge,
                "isGateway": True,
                "ipMasq": False,
                # A pod reaches itself through its own Service.
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": layout.pod_cidr, "gateway": layout.host_ip}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(layout.cni_ipam_dir),
                },
            }
        ],
    }
    return json.dumps(network, indent=2) + "\n"


def kubelet_config(layout: NodeLayout, ca_file: Path, tls_cert: Path, tls_key: Path) -> str:
    """`ca_file` authenticates kubelet's clients; `tls_cert` and `tls_key` are what it serves with."""
    config: dict[str, Any] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "address": layout.host_ip,
        "port": layout.ports.kubelet,
        "readOnlyPort": 0,
        # A certificate of the cluster CA (not a self-signed one): metrics-server verifies kubelet.
        "tlsCertFile": str(tls_cert),
        "tlsPrivateKeyFile": str(tls_key),
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": layout.ports.kubelet_healthz,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca_file)},
        },
        "authorization": {"mode": "Webhook"},
        "clusterDNS": [layout.dns_ip],
        "clusterDomain": layout.cluster_domain,
        "oomScoreAdj": 0,
        "failSwapOn": False,
        "podLogsDir": str(layout.pod_logs_dir),
        # Images are imported, never pulled: garbage-collecting one would lose it for good.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "serializeImagePulls": False,
        "registerNode": True,
        # ConfigMap and Secret volume changes show within seconds (tests wait on them).
        "syncFrequency": "10s",
    }
    return yaml.safe_dump(config, sort_keys=False)


def kube_proxy_config(layout: NodeLayout, kubeconfig: Path) -> str:
    config: dict[str, Any] = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "nftables",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": layout.node_name,
        "bindAddress": layout.host_ip,
        "healthzBindAddress": f"127.0.0.1:{layout.ports.proxy_healthz}",
        "metricsBindAddress": f"127.0.0.1:{layout.ports.proxy_metrics}",
        "clusterCIDR": layout.pod_cidr,
        # NodePorts answer on the bridge address only, never on the machine's own interfaces.
        "nodePortAddresses": [f"{layout.host_ip}/32"],
        "oomScoreAdj": 0,
        # Leave the host's conntrack sysctls alone (they are not ours to change).
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
    }
    return yaml.safe_dump(config, sort_keys=False)


def kube_router_args(layout: NodeLayout, kubeconfig: Path) -> list[str]:
    """kube-router as the node's NetworkPolicy firewall and nothing else: pod routes are the bridge's and Services
    are kube-proxy's. It has no flag for the health server's address: it listens on every interface."""
    return [
        f"--kubeconfig={kubeconfig}",
        "--run-firewall=true",
        "--run-router=false",
        "--run-service-proxy=false",
        f"--hostname-override={layout.node_name}",
        f"--service-cluster-ip-range={layout.service_cidr}",
        f"--health-port={layout.ports.router_healthz}",
        "--v=1",
    ]


def corefile(layout: NodeLayout, kubeconfig: Path) -> str:
    """Cluster DNS on the bridge address; names outside the cluster domain get no answer (no route out)."""
    ports = layout.ports
    return f""".:{ports.dns} {{
    bind {layout.host_ip}
    errors
    health 127.0.0.1:{ports.dns_health}
    ready 127.0.0.1:{ports.dns_ready}
    kubernetes {layout.cluster_domain} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
    cache 5
    loadbalance
}}
"""


def guard_ruleset(layout: NodeLayout) -> str:
    """An nft table that drops forwarded pod traffic headed anywhere but the bridge."""
    return f"""table inet {GUARD_TABLE} {{
    chain forward {{
        type filter hook forward priority filter; policy accept;
        iifname "{layout.bridge}" oifname != "{layout.bridge}" drop
    }}
}}
"""


def dns_manifests(layout: NodeLayout) -> list[dict[str, Any]]:
    """The `kube-dns` Service and, since CoreDNS runs on the host, an EndpointSlice naming the host's address."""
    ports = [{"name": "dns", "port": 53, "protocol": "UDP"}, {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]
    labels = {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": labels},
        "spec": {
            "clusterIP": layout.dns_ip,
            "ports": [{**port, "targetPort": layout.ports.dns} for port in ports],
        },
    }
    slice_ = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "kube-dns-host",
            "namespace": "kube-system",
            "labels": {
                "kubernetes.io/service-name": "kube-dns",
                "endpointslice.kubernetes.io/managed-by": "llmaz-envtest",
            },
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [layout.host_ip], "conditions": {"ready": True}}],
        "ports": [{**port, "port": layout.ports.dns} for port in ports],
    }
    return [service, slice_]
