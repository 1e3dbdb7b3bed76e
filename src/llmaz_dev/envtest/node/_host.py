"""What the node does to the host, and undoing it: prerequisites, the bridge, and teardown.

Invariants:
- `prepare_host` records, before changing anything, what the host already had (ip_forward, the default paths
  kubelet, CNI and containerd write even when told otherwise), in `state.json` under the node's root, with the
  owner's pid. `teardown` undoes exactly what that record says was ours, and nothing else.
- `teardown` is idempotent and works from the record alone, so the process that started the node, its reaper
  (after a SIGKILL) and the next start (after a crash) all clean up the same way. It kills every process whose
  command line names the node's root (kubelet, kube-proxy, kube-router, CoreDNS, metrics-server, containerd and its
  shims) and every process in kubelet's `kubepods` cgroups, unmounts everything under the root, removes the
  cgroups, kube-proxy's nft tables, kubelet's and kube-router's iptables chains, kube-router's ipsets, the guard
  table and the bridge, restores ip_forward, and deletes the root.
- Every failed prerequisite is one `PrerequisiteError` line naming the missing thing and the fix.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from llmaz_dev.envtest.node._config import CNI_BIN_DIR, CNI_NETWORK, GUARD_TABLE, RUNC, guard_ruleset
from llmaz_dev.envtest.node._layout import NodeLayout

CGROUP_ROOT = Path("/sys/fs/cgroup")
KUBEPODS = "kubepods"
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")
# kube-router names its sets of a policy's sources and destinations so (IPv6 ones with "inet6:" before).
ROUTER_IPSET_PREFIXES = ("KUBE-SRC-", "KUBE-DST-")
# Paths kubelet, libcni and containerd write whatever they are told; removed only when they were not there before.
DEFAULT_PATHS = (
    Path("/var/lib/kubelet"),
    Path("/var/log/containers"),
    Path("/var/log/pods"),
    Path("/var/lib/cni"),
    Path("/run/containerd"),
    Path("/opt/containerd"),
)
_INSTALL_HINT = "run `make node-packages` (hack/node/install-packages.sh)"
_KILL_TIMEOUT = 15.0
_MNT_DETACH = 2
_libc = ctypes.CDLL(None, use_errno=True)


class PrerequisiteError(RuntimeError):
    """The host cannot run the node; the message names what is missing and how to fix it."""


@dataclass
class HostState:
    """What `prepare_host` found and did; saved as `state.json` under the node's root."""

    owner_pid: int
    ip_forward: str
    preexisting: list[str] = field(default_factory=list)
    # "<family> <name>" of the nft tables the host had; None when unknown (then only the node's own go).
    nft_tables: list[str] | None = None

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        scratch = path.with_suffix(".tmp")
        scratch.write_text(json.dumps(asdict(self)))
        scratch.replace(path)

    @classmethod
    def load(cls, path: Path) -> HostState | None:
        try:
            data = json.loads(path.read_text())
            tables = data.get("nft_tables")
            return cls(
                int(data["owner_pid"]),
                str(data["ip_forward"]),
                list(data.get("preexisting", [])),
                None if tables is None else [str(table) for table in tables],
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None


def check_prerequisites(layout: NodeLayout) -> None:
    """Raise PrerequisiteError for the first thing the host lacks; changes nothing."""
    if os.geteuid() != 0:
        raise PrerequisiteError("the node tier must run as root (kubelet, containerd and the bridge need it)")
    tools = {
        "containerd": shutil.which("containerd"),
        "ctr": shutil.which("ctr"),
        "runc": str(RUNC) if RUNC.is_file() else None,
        "nft": shutil.which("nft"),
        "iptables": shutil.which("iptables"),
        "ipset": shutil.which("ipset"),
        "ip": shutil.which("ip"),
        "CNI bridge plugin": str(CNI_BIN_DIR / "bridge") if (CNI_BIN_DIR / "bridge").is_file() else None,
        "CNI host-local plugin": str(CNI_BIN_DIR / "host-local") if (CNI_BIN_DIR / "host-local").is_file() else None,
    }
    missing = [name for name, path in tools.items() if path is None]
    if missing:
        raise PrerequisiteError(f"not installed: {', '.join(missing)}: {_INSTALL_HINT}")
    if not (CGROUP_ROOT / "memory").is_dir() and not (CGROUP_ROOT / "cgroup.controllers").is_file():
        raise PrerequisiteError(f"no cgroup hierarchy with the memory controller under {CGROUP_ROOT}: mount cgroups")
    if "overlay" not in Path("/proc/filesystems").read_text():
        raise PrerequisiteError("the kernel has no overlay filesystem: `modprobe overlay`")
    nft = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, check=False)
    if nft.returncode != 0:
        raise PrerequisiteError(f"nftables unavailable ({nft.stderr.strip()}): the kernel needs nf_tables")
    find_leftovers(layout)  # refuses while another node runs here
    if _connectable(layout.containerd_socket):
        raise PrerequisiteError(
            f"{layout.containerd_socket} is served by another containerd: stop it, or set LLMAZ_NODE_ROOT elsewhere"
        )


def check_ports(layout: NodeLayout) -> None:
    """Raise PrerequisiteError naming every fixed port already taken (call once the bridge address exists)."""
    ports = layout.ports
    wanted = [
        (layout.host_ip, ports.kubelet, socket.SOCK_STREAM, "kubelet"),
        ("127.0.0.1", ports.kubelet_healthz, socket.SOCK_STREAM, "kubelet healthz"),
        ("127.0.0.1", ports.proxy_metrics, socket.SOCK_STREAM, "kube-proxy metrics"),
        ("127.0.0.1", ports.proxy_healthz, socket.SOCK_STREAM, "kube-proxy healthz"),
        ("0.0.0.0", ports.router_healthz, socket.SOCK_STREAM, "kube-router healthz"),
        (layout.host_ip, ports.dns, socket.SOCK_DGRAM, "CoreDNS"),
        (layout.host_ip, ports.dns, socket.SOCK_STREAM, "CoreDNS"),
        ("127.0.0.1", ports.dns_health, socket.SOCK_STREAM, "CoreDNS health"),
        ("127.0.0.1", ports.dns_ready, socket.SOCK_STREAM, "CoreDNS ready"),
        (layout.host_ip, ports.metrics_server, socket.SOCK_STREAM, "metrics-server"),
    ]
    taken = [f"{host}:{port} ({what})" for host, port, kind, what in wanted if not _bindable(host, port, kind)]
    if taken:
        raise PrerequisiteError(f"ports in use: {', '.join(taken)}: stop what listens there")


def prepare_host(layout: NodeLayout) -> HostState:
    """Record the host's state, then create the bridge with the host's address, a route to the Service range
    through it, and the guard table. The record is written first, so a crash in between is still undone."""
    state = HostState(
        owner_pid=os.getpid(),
        ip_forward=IP_FORWARD.read_text().strip(),
        preexisting=[str(path) for path in DEFAULT_PATHS if path.exists()],
        nft_tables=_nft_tables(),
    )
    state.save(layout.state_file)
    _run("ip", "link", "add", "name", layout.bridge, "type", "bridge")
    _run("ip", "addr", "add", f"{layout.host_ip}/{layout.bridge_prefix}", "dev", layout.bridge)
    _run("ip", "link", "set", layout.bridge, "up")
    # The host reaches ClusterIPs from its bridge address, so kube-proxy's DNAT sends replies back the same way.
    _run("ip", "route", "add", layout.service_cidr, "dev", layout.bridge, "src", layout.host_ip)
    _run("nft", "-f", "-", input=guard_ruleset(layout))
    # Pod-to-Service traffic is routed through the host (the bridge plugin would turn this on at the first pod).
    IP_FORWARD.write_text("1")
    return state


def find_leftovers(layout: NodeLayout) -> HostState | None:
    """The record of a node whose owner is gone, or a blank record if only its traces remain; None if clean.

    Raises PrerequisiteError when the owner still runs: that node is in use.
    """
    state = HostState.load(layout.state_file)
    if state is not None:
        if _alive(state.owner_pid) and state.owner_pid != os.getpid():
            raise PrerequisiteError(
                f"a node cluster is already running (pid {state.owner_pid}, {layout.root}): one real node per "
                "machine; stop it first"
            )
        return state
    if layout.root.exists() or _link_exists(layout.bridge) or _own_processes(layout, kubepods=False):
        # Without a record nothing of the host's defaults is known to be ours: keep them all.
        return HostState(owner_pid=0, ip_forward="", preexisting=[str(path) for path in DEFAULT_PATHS])
    return None


def teardown(layout: NodeLayout, state: HostState) -> list[str]:
    """Undo everything the node did to the host (see the module docstring); return what was cleaned."""
    cleaned: list[str] = []
    killed = _kill_node_processes(layout)
    if killed:
        cleaned.append(f"{killed} processes")
    unmounted = _unmount_under(layout.root)
    if unmounted:
        cleaned.append(f"{unmounted} mounts")
    removed_cgroups = _remove_cgroups()
    if removed_cgroups:
        cleaned.append(f"{removed_cgroups} cgroups")
    for family, table in (("ip", "kube-proxy"), ("ip6", "kube-proxy"), ("inet", GUARD_TABLE)):
        if _run_ok("nft", "delete", "table", family, table):
            cleaned.append(f"nft table {family} {table}")
    chains = _remove_kube_chains()
    if chains:
        cleaned.append(f"{chains} iptables chains")
    sets = _remove_router_ipsets()
    if sets:
        cleaned.append(f"{sets} ipsets")
    if state.nft_tables is not None:
        # kubelet's iptables calls create the iptables-nft tables themselves on a host that had none.
        for table in _nft_tables():
            if table not in state.nft_tables and _run_ok("nft", "delete", "table", *table.split()):
                cleaned.append(f"nft table {table}")
    if _run_ok("ip", "link", "delete", layout.bridge):
        cleaned.append(f"bridge {layout.bridge}")
    if state.ip_forward and IP_FORWARD.read_text().strip() != state.ip_forward:
        IP_FORWARD.write_text(state.ip_forward)
        cleaned.append(f"ip_forward={state.ip_forward}")
    for path in DEFAULT_PATHS:
        if str(path) not in state.preexisting and path.exists():
            shutil.rmtree(path, ignore_errors=True)
            cleaned.append(str(path))
    _remove_cni_cache(state)
    if layout.root.exists():
        shutil.rmtree(layout.root, ignore_errors=True)
        cleaned.append(str(layout.root))
    return cleaned


def _remove_cni_cache(state: HostState) -> None:
    # libcni caches each attachment's result under /var/lib/cni/results, whatever the network's dataDir says.
    results = Path("/var/lib/cni/results")
    if "/var/lib/cni" in state.preexisting and results.is_dir():
        for entry in results.glob(f"{CNI_NETWORK}-*"):
            entry.unlink(missing_ok=True)


def _own_processes(layout: NodeLayout, *, kubepods: bool = True) -> list[int]:
    """Pids whose command line names the node's root, and (with `kubepods`) every pid in kubelet's cgroups."""
    marker = str(layout.root).encode()
    pids = set(_kubepods_pids() if kubepods else ())
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if marker in (entry / "cmdline").read_bytes():
                pids.add(int(entry.name))
    return sorted(pids)


def _kill_node_processes(layout: NodeLayout) -> int:
    killed: set[int] = set()
    deadline = time.monotonic() + _KILL_TIMEOUT
    while (pids := [pid for pid in _own_processes(layout) if _alive(pid)]) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed.update(pids)
        time.sleep(0.05)
    return len(killed)


def _kubepods_pids() -> list[int]:
    pids: list[int] = []
    for tree in _kubepods_trees():
        for cgroup in _cgroup_dirs(tree):
            with contextlib.suppress(OSError, ValueError):
                pids.extend(int(line) for line in (cgroup / "cgroup.procs").read_text().split())
    return pids


def _cgroup_dirs(tree: Path) -> list[Path]:
    """`tree` and every cgroup under it, parents first. kubelet and the reaper remove cgroups while this walks
    them: a directory that vanishes mid-walk is skipped, never an error (os.walk ignores what it cannot list)."""
    return [Path(root) for root, _dirs, _files in os.walk(tree)]


def _kubepods_trees() -> list[Path]:
    if not CGROUP_ROOT.is_dir():
        return []
    trees = [CGROUP_ROOT / KUBEPODS] + [hierarchy / KUBEPODS for hierarchy in CGROUP_ROOT.iterdir()]
    return [tree for tree in trees if tree.is_dir()]


def _remove_cgroups() -> int:
    removed = 0
    for tree in _kubepods_trees():
        # Deepest first: a cgroup can only be removed once it has no children (the tree itself comes last).
        for directory in sorted(_cgroup_dirs(tree), key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                directory.rmdir()
                removed += 1
    return removed


def _unmount_under(root: Path) -> int:
    prefix = str(root).rstrip("/") + "/"
    count = 0
    for _ in range(5):  # unmounting one can reveal another stacked on the same point
        points = [point for point in _mount_points() if point.startswith(prefix) or point == str(root)]
        if not points:
            break
        for point in sorted(points, key=lambda p: -p.count("/")):
            if _libc.umount2(point.encode(), _MNT_DETACH) == 0:
                count += 1
    return count


def _mount_points() -> list[str]:
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if len(fields) > 4:
            points.append(fields[4].encode().decode("unicode_escape"))
    return points


def _remove_kube_chains() -> int:
    """kubelet's iptables chains (KUBE-FIREWALL, KUBE-KUBELET-CANARY, ...) and the rules that jump to them."""
    removed = 0
    for tool in ("iptables", "ip6tables"):
        if shutil.which(tool) is None:
            continue
        for table in ("filter", "nat", "mangle"):
            listing = subprocess.run([tool, "-w", "-t", table, "-S"], capture_output=True, text=True, check=False)
            if listing.returncode != 0:
                continue
            rules = listing.stdout.splitlines()
            for rule in rules:
                parts = rule.split()
                if parts[:1] == ["-A"] and not parts[1].startswith("KUBE-") and "-j" in parts:
                    target = parts[parts.index("-j") + 1]
                    if target.startswith("KUBE-"):
                        _run_ok(tool, "-w", "-t", table, "-D", *parts[1:])
            chains = [rule.split()[1] for rule in rules if rule.startswith("-N KUBE-")]
            for chain in chains:
                _run_ok(tool, "-w", "-t", table, "-F", chain)
            for chain in chains:
                if _run_ok(tool, "-w", "-t", table, "-X", chain):
                    removed += 1
    return removed


def _remove_router_ipsets() -> int:
    """kube-router's ipsets of pods and policies (once no iptables rule refers to them)."""
    if shutil.which("ipset") is None:
        return 0
    listing = subprocess.run(["ipset", "list", "-n"], capture_output=True, text=True, check=False)
    if listing.returncode != 0:
        return 0
    names = [name for name in listing.stdout.split() if name.removeprefix("inet6:").startswith(ROUTER_IPSET_PREFIXES)]
    return sum(_run_ok("ipset", "destroy", name) for name in names)


def _nft_tables() -> list[str]:
    listing = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, check=False)
    return [line.removeprefix("table ").strip() for line in listing.stdout.splitlines() if line.startswith("table ")]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _link_exists(name: str) -> bool:
    return Path(f"/sys/class/net/{name}").exists()


def _connectable(path: Path) -> bool:
    if not path.exists():
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(str(path)) == 0


def _bindable(host: str, port: int, kind: int) -> bool:
    with socket.socket(socket.AF_INET, kind) as sock:
        # As the servers themselves bind: a port whose last connections linger in TIME_WAIT is free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _run(*argv: str, input: str | None = None) -> None:
    result = subprocess.run(argv, input=input, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise PrerequisiteError(f"`{' '.join(argv)}` failed: {result.stderr.strip()}")


def _run_ok(*argv: str) -> bool:
    return subprocess.run(argv, capture_output=True, check=False).returncode == 0
