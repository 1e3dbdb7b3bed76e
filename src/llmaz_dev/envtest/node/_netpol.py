"""kube-network-policies beside kube-proxy: the node's NetworkPolicy enforcer (nftables rules that send the first
packet of each connection to or from a pod some policy selects to an NFQUEUE, where it decides).

v0.8.0 (the version the Go module proxy serves) reads its API credentials only the in-cluster way: the
`KUBERNETES_SERVICE_HOST`/`_PORT` variables and a token and CA at the fixed path
`/var/run/secrets/kubernetes.io/serviceaccount`. The node gives it a ServiceAccount `kube-system/kube-network-policies`
with upstream's ClusterRole (list and watch pods, namespaces and NetworkPolicies, and write Events), a token of it
and the cluster CA in a directory under the node's root, and runs it in a mount namespace of its own where that
directory is bind-mounted on the fixed path: nothing else on the host sees it. The empty mount point
`/run/secrets/kubernetes.io/serviceaccount` is the one host path it needs (`_host.DEFAULT_PATHS` removes it at
teardown when the host had no `/run/secrets`).

- Ready means it listens on its NFQUEUE (a line for the queue in `/proc/net/netfilter/nfnetlink_queue`): its
  caches have synced and its nftables table `inet kube-network-policies` is in place.
- It exits on SIGINT only, cleaning its table; the SIGTERM a stop sends ends it at once, and teardown deletes the
  table (`_host.teardown`).
- `--fail-open`: a packet queued while it is not running passes; a stopped enforcer never cuts the node's traffic.
- Traffic the host's root processes start (kubelet's probes, port-forwards, the tests on the host) is not
  evaluated (upstream's `meta skuid 0 accept`); pod-to-pod traffic on the bridge is, through
  `bridge-nf-call-iptables` (on here).
- v0.8.0 tries NRI (containerd 1.6 has none) and logs that it uses the API server's pod IPs instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from llmaz_dev.envtest.node._layout import NodeLayout

NAME = "kube-network-policies"
NAMESPACE = "kube-system"
TABLE = f"inet {NAME}"
QUEUE_ID = 100
SERVICE_ACCOUNT_PATH = Path("/run/secrets/kubernetes.io/serviceaccount")
# The token outlives any node run (client-go re-reads the file, which never changes).
TOKEN_EXPIRATION_SECONDS = 7 * 24 * 3600
NFQUEUE_PROC = Path("/proc/net/netfilter/nfnetlink_queue")
_RBAC = "rbac.authorization.k8s.io"
# Runs inside the new mount namespace: $1 is the credentials directory, the rest the command.
_BIND_AND_EXEC = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'


def manifests() -> list[dict[str, Any]]:
    """The ServiceAccount, ClusterRole and ClusterRoleBinding of kube-network-policies (upstream's install.yaml)."""
    labels = {"k8s-app": NAME}
    account = {"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": NAME, "namespace": NAMESPACE}},
        {
            "apiVersion": f"{_RBAC}/v1",
            "kind": "ClusterRole",
            "metadata": {"name": NAME, "labels": labels},
            "rules": [
                {"apiGroups": [""], "resources": ["pods", "namespaces"], "verbs": ["list", "watch"]},
                {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["list", "watch"]},
                {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]},
            ],
        },
        {
            "apiVersion": f"{_RBAC}/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": NAME, "labels": labels},
            "roleRef": {"apiGroup": _RBAC, "kind": "ClusterRole", "name": NAME},
            "subjects": [account],
        },
    ]


def credentials_dir(layout: NodeLayout) -> Path:
    return layout.config_dir / NAME / "serviceaccount"


def write_credentials(layout: NodeLayout, token: str, ca: bytes) -> Path:
    """The token and CA files in-cluster clients read, in the node's own directory; returns it."""
    directory = credentials_dir(layout)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "token").write_text(token)
    (directory / "ca.crt").write_bytes(ca)
    (directory / "namespace").write_text(NAMESPACE)
    return directory


def argv(layout: NodeLayout, binary: Path, credentials: Path, apiserver: str) -> list[str]:
    """kube-network-policies in a mount namespace of its own, its credentials bind-mounted where it reads them, told
    where kube-apiserver (`https://<host>:<port>`, on the bridge address) is the in-cluster way.

    The last argument, the credentials directory again, is one the command ignores (it only logs its positional
    arguments): it names the node's root on the command line, by which teardown finds the process after a crash.
    """
    url = urlsplit(apiserver)
    if url.hostname is None or url.port is None:
        raise ValueError(f"kube-apiserver's URL {apiserver!r} has no host and port")
    return [
        "env",
        f"KUBERNETES_SERVICE_HOST={url.hostname}",
        f"KUBERNETES_SERVICE_PORT={url.port}",
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        _BIND_AND_EXEC,
        NAME,
        str(credentials),
        str(SERVICE_ACCOUNT_PATH),
        str(binary),
        f"--hostname-override={layout.node_name}",
        f"--metrics-bind-address=127.0.0.1:{layout.ports.netpol_metrics}",
        f"--nfqueue-id={QUEUE_ID}",
        "--fail-open",
        "--v=1",
        str(credentials),
    ]


def listening(proc: Path = NFQUEUE_PROC) -> bool:
    """Whether a process listens on the enforcer's NFQUEUE."""
    try:
        lines = proc.read_text().splitlines()
    except OSError:
        return False
    return any(line.split()[:1] == [str(QUEUE_ID)] for line in lines)
