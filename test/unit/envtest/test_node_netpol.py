"""The node tier's kube-network-policies: its RBAC, its credentials, and its command line (a mount namespace of its
own, in-cluster variables naming kube-apiserver on the bridge, the node's root named so teardown finds it), and
when it counts as listening, rendered without a node."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from llmaz_dev.envtest.node import _host, _netpol
from llmaz_dev.envtest.node._layout import NodeLayout
from llmaz_dev.envtest.node.cluster import _manifest_path

LAYOUT = NodeLayout(root=Path("/var/lib/llmaz-node-test"))
BINARY = Path("/cache/bin/kube-network-policies-v0.8.0/kube-network-policies")


def _argv() -> list[str]:
    return _netpol.argv(LAYOUT, BINARY, _netpol.credentials_dir(LAYOUT), "https://10.244.0.1:36443")


def test_the_command_names_the_apiserver_the_in_cluster_way() -> None:
    argv = _argv()
    assert argv[:3] == ["env", "KUBERNETES_SERVICE_HOST=10.244.0.1", "KUBERNETES_SERVICE_PORT=36443"]


def test_the_credentials_are_bind_mounted_in_a_mount_namespace_of_its_own() -> None:
    argv = _argv()
    unshare = argv.index("unshare")
    assert argv[unshare : unshare + 5] == ["unshare", "--mount", "--propagation", "private", "--"]
    script = argv[argv.index("-c") + 1]
    # The script's $1 and $2 are the credentials directory and the fixed path; the rest is exec'd.
    first, second, binary = argv[argv.index("-c") + 3 : argv.index("-c") + 6]
    assert 'mount --bind "$1" "$2"' in script
    assert first == str(_netpol.credentials_dir(LAYOUT))
    assert second == "/run/secrets/kubernetes.io/serviceaccount"
    assert binary == str(BINARY)


def test_the_script_binds_then_execs_the_command(tmp_path: Path) -> None:
    # The script alone, with `true` for mount: it shifts the two paths away and execs what follows.
    script = _argv()[_argv().index("-c") + 1].replace("mount --bind", "true")
    done = subprocess.run(["sh", "-c", script, "x", "a", "b", "echo", "ran"], capture_output=True, text=True)
    assert done.stdout == "ran\n"


def test_the_flags_name_the_node_a_loopback_metrics_port_and_fail_open() -> None:
    flags = _argv()[_argv().index(str(BINARY)) + 1 :]
    assert "--hostname-override=llmaz-node" in flags
    assert f"--metrics-bind-address=127.0.0.1:{LAYOUT.ports.netpol_metrics}" in flags
    assert f"--nfqueue-id={_netpol.QUEUE_ID}" in flags
    assert "--fail-open" in flags


def test_the_node_root_is_on_its_command_line_after_the_exec() -> None:
    # What teardown matches after a crash (`_host._own_processes`): the exec'd command's own arguments.
    flags = _argv()[_argv().index(str(BINARY)) :]
    assert any(str(LAYOUT.root) in argument for argument in flags)
    # Positional, after every flag: v0.8.0's flag parsing stops there and ignores it.
    assert not flags[-1].startswith("-")


def test_an_apiserver_url_without_a_port_is_refused() -> None:
    with pytest.raises(ValueError, match="host and port"):
        _netpol.argv(LAYOUT, BINARY, _netpol.credentials_dir(LAYOUT), "https://10.244.0.1")


def test_credentials_are_written_where_the_command_reads_them(tmp_path: Path) -> None:
    layout = NodeLayout(root=tmp_path)
    directory = _netpol.write_credentials(layout, "the-token", b"the-ca")
    assert (directory / "token").read_text() == "the-token"
    assert (directory / "ca.crt").read_bytes() == b"the-ca"
    assert directory == _netpol.credentials_dir(layout)


def test_the_rbac_lists_and_watches_pods_namespaces_and_network_policies() -> None:
    account, role, binding = _netpol.manifests()
    assert _manifest_path(account) == "/api/v1/namespaces/kube-system/serviceaccounts/kube-network-policies"
    assert _manifest_path(role) == "/apis/rbac.authorization.k8s.io/v1/clusterroles/kube-network-policies"
    reads = {(tuple(rule["apiGroups"]), resource) for rule in role["rules"] for resource in rule["resources"]}
    assert {(("",), "pods"), (("",), "namespaces"), (("networking.k8s.io",), "networkpolicies")} <= reads
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "kube-network-policies", "namespace": "kube-system"}
    ]


@pytest.mark.parametrize(
    ("text", "listening"),
    [
        ("", False),
        ("  101  12345     0 2 65531     0     0        0  1\n", False),
        ("  100  12345     0 2   128     0     0        7  1\n", True),
    ],
)
def test_listening_means_a_line_for_its_queue(tmp_path: Path, text: str, listening: bool) -> None:
    proc = tmp_path / "nfnetlink_queue"
    proc.write_text(text)
    assert _netpol.listening(proc) is listening


def test_no_queue_file_is_not_listening(tmp_path: Path) -> None:
    assert _netpol.listening(tmp_path / "absent") is False


def test_teardown_knows_the_mount_point_and_the_table() -> None:
    assert Path("/run/secrets") in _host.DEFAULT_PATHS
    assert _netpol.SERVICE_ACCOUNT_PATH.is_relative_to(Path("/run/secrets"))
