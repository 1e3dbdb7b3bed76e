"""The node tier's configuration files and host record: pure rendering, checked setting by setting."""

from __future__ import annotations

import ipaddress
import json
import os
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from llmaz_dev.envtest._pki import write_pki
from llmaz_dev.envtest.node import _config
from llmaz_dev.envtest.node._host import HostState, _cgroup_dirs, find_leftovers
from llmaz_dev.envtest.node._layout import NodeLayout

LAYOUT = NodeLayout(root=Path("/var/lib/llmaz-node-test"))


def test_layout_addresses_are_derived_from_the_cidrs() -> None:
    assert LAYOUT.host_ip == "10.244.0.1"
    assert LAYOUT.bridge_prefix == 16
    assert LAYOUT.dns_ip == "10.96.0.10"
    assert ipaddress.ip_address(LAYOUT.dns_ip) in ipaddress.ip_network(LAYOUT.service_cidr)
    other = NodeLayout(root=Path("/x"), pod_cidr="10.250.0.0/24", service_cidr="10.128.0.0/20")
    assert (other.host_ip, other.bridge_prefix, other.dns_ip) == ("10.250.0.1", 24, "10.128.0.10")


def test_layout_root_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMAZ_NODE_ROOT", "/srv/node")
    assert NodeLayout().root == Path("/srv/node")
    monkeypatch.delenv("LLMAZ_NODE_ROOT")
    assert NodeLayout().root == Path("/var/lib/llmaz-node")


def test_containerd_keeps_every_path_under_the_node_root_and_restricts_oom_score_adj() -> None:
    config = tomllib.loads(_config.containerd_config(LAYOUT, "llmaz.local/pause:abc"))
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    runc = cri["containerd"]["runtimes"]["runc"]
    paths = [
        config["root"],
        config["state"],
        config["grpc"]["address"],
        config["ttrpc"]["address"],
        config["plugins"]["io.containerd.internal.v1.opt"]["path"],
        runc["options"]["Root"],
        cri["cni"]["conf_dir"],
    ]
    assert all(path.startswith(f"{LAYOUT.root}/") for path in paths), paths
    assert cri["sandbox_image"] == "llmaz.local/pause:abc"
    assert cri["restrict_oom_score_adj"] is True
    assert cri["netns_mounts_under_state_dir"] is True
    assert runc["options"]["SystemdCgroup"] is False
    assert config["version"] == 2


def test_cni_bridge_never_masquerades_and_keeps_its_addresses_in_the_node_root() -> None:
    network = json.loads(_config.cni_config(LAYOUT))
    (bridge,) = network["plugins"]
    assert bridge["type"] == "bridge"
    assert bridge["bridge"] == LAYOUT.bridge
    assert bridge["ipMasq"] is False
    assert bridge["isGateway"] is True
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.244.0.0/16", "gateway": "10.244.0.1"}]]
    assert bridge["ipam"]["dataDir"].startswith(str(LAYOUT.root))


def test_kubelet_settings_that_this_machine_needs(tmp_path: Path) -> None:
    config = yaml.safe_load(
        _config.kubelet_config(LAYOUT, tmp_path / "ca.crt", tmp_path / "tls.crt", tmp_path / "tls.key")
    )
    assert config["failCgroupV1"] is False
    assert config["cgroupDriver"] == "cgroupfs"
    assert config["oomScoreAdj"] == 0
    assert config["containerRuntimeEndpoint"] == f"unix://{LAYOUT.containerd_socket}"
    assert config["clusterDNS"] == ["10.96.0.10"]
    assert config["authentication"]["anonymous"]["enabled"] is False
    assert config["authorization"]["mode"] == "Webhook"
    assert config["imageGCHighThresholdPercent"] == 100
    assert config["podLogsDir"].startswith(str(LAYOUT.root))
    assert (config["address"], config["healthzBindAddress"]) == ("10.244.0.1", "127.0.0.1")
    assert (config["tlsCertFile"], config["tlsPrivateKeyFile"]) == (
        str(tmp_path / "tls.crt"),
        str(tmp_path / "tls.key"),
    )


def test_kube_proxy_uses_nftables_and_exposes_node_ports_on_the_bridge_only(tmp_path: Path) -> None:
    config = yaml.safe_load(_config.kube_proxy_config(LAYOUT, tmp_path / "kubeconfig"))
    assert config["mode"] == "nftables"
    assert config["oomScoreAdj"] == 0
    assert config["nodePortAddresses"] == ["10.244.0.1/32"]
    assert config["clusterCIDR"] == LAYOUT.pod_cidr
    assert config["conntrack"]["maxPerCore"] == 0
    assert config["healthzBindAddress"].startswith("127.0.0.1:")


def test_kube_router_runs_only_its_firewall_for_this_node_and_the_service_range(tmp_path: Path) -> None:
    args = _config.kube_router_args(LAYOUT, tmp_path / "kubeconfig")
    flags = dict(arg.removeprefix("--").split("=", 1) for arg in args)
    assert (flags["run-firewall"], flags["run-router"], flags["run-service-proxy"]) == ("true", "false", "false")
    assert flags["hostname-override"] == LAYOUT.node_name
    assert flags["service-cluster-ip-range"] == LAYOUT.service_cidr
    assert flags["health-port"] == str(LAYOUT.ports.router_healthz)
    assert flags["kubeconfig"] == str(tmp_path / "kubeconfig")


def test_corefile_serves_the_cluster_domain_on_the_bridge_address_and_forwards_nothing(tmp_path: Path) -> None:
    corefile = _config.corefile(LAYOUT, tmp_path / "kubeconfig")
    assert "bind 10.244.0.1" in corefile
    assert "kubernetes cluster.local in-addr.arpa ip6.arpa" in corefile
    assert f"kubeconfig {tmp_path / 'kubeconfig'}" in corefile
    assert "forward" not in corefile


def test_guard_drops_forwarded_pod_traffic_that_would_leave_the_bridge() -> None:
    ruleset = _config.guard_ruleset(LAYOUT)
    assert f"table inet {_config.GUARD_TABLE}" in ruleset
    assert 'iifname "llmaz0" oifname != "llmaz0" drop' in ruleset


def test_dns_service_and_its_endpoints_point_at_coredns_on_the_host() -> None:
    service, endpoints = _config.dns_manifests(LAYOUT)
    assert service["spec"]["clusterIP"] == LAYOUT.dns_ip
    assert "selector" not in service["spec"]
    assert endpoints["metadata"]["labels"]["kubernetes.io/service-name"] == "kube-dns"
    assert endpoints["endpoints"][0]["addresses"] == [LAYOUT.host_ip]
    assert {p["protocol"] for p in endpoints["ports"]} == {"UDP", "TCP"}


def test_serving_certificate_covers_a_non_loopback_address(tmp_path: Path) -> None:
    pki = write_pki(tmp_path, ["10.244.0.1", "10.96.0.1"])
    serving = x509.load_pem_x509_certificate(pki.serving_cert.read_bytes())
    ips = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(ip) for ip in ips.get_values_for_type(x509.IPAddress)} >= {"127.0.0.1", "10.244.0.1", "10.96.0.1"}
    assert pki.ca_key.stat().st_mode & 0o777 == 0o600


def test_host_record_round_trips_and_a_dead_owner_is_reported_as_leftovers(tmp_path: Path) -> None:
    layout = NodeLayout(root=tmp_path / "node", bridge="llmaz-unit0")
    assert find_leftovers(layout) is None
    dead_pid = 2**22 + 1  # above pid_max's default: never a live process
    HostState(owner_pid=dead_pid, ip_forward="0", preexisting=["/var/lib/cni"]).save(layout.state_file)
    stale = find_leftovers(layout)
    assert stale == HostState(owner_pid=dead_pid, ip_forward="0", preexisting=["/var/lib/cni"])


def test_a_live_owner_means_the_node_is_in_use(tmp_path: Path) -> None:
    layout = NodeLayout(root=tmp_path / "node", bridge="llmaz-unit0")
    HostState(owner_pid=1, ip_forward="0").save(layout.state_file)
    with pytest.raises(RuntimeError, match="already running \\(pid 1"):
        find_leftovers(layout)


def test_traces_without_a_record_keep_every_default_path(tmp_path: Path) -> None:
    layout = NodeLayout(root=tmp_path / "node", bridge="llmaz-unit0")
    layout.root.mkdir()
    stale = find_leftovers(layout)
    assert stale is not None
    assert stale.owner_pid == 0
    assert "/var/lib/kubelet" in stale.preexisting


def test_a_cgroup_walk_lists_parents_first_and_skips_what_vanishes_under_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = tmp_path / "kubepods"
    (tree / "besteffort" / "pod-a").mkdir(parents=True)
    (tree / "burstable").mkdir()
    walked = _cgroup_dirs(tree)
    assert walked[0] == tree
    assert sorted(walked) == sorted([tree, tree / "besteffort", tree / "besteffort" / "pod-a", tree / "burstable"])
    assert walked.index(tree / "besteffort") < walked.index(tree / "besteffort" / "pod-a")
    assert _cgroup_dirs(tmp_path / "gone") == []

    # kubelet or the reaper removes a cgroup between its parent's listing and its own: skipped, no error.
    real_scandir = os.scandir

    def vanishing(path: Any) -> Any:
        if Path(path) == tree / "besteffort":
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", vanishing)
    assert sorted(_cgroup_dirs(tree)) == sorted([tree, tree / "burstable"])
