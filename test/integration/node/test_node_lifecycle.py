"""The real node leaves nothing on the host, however its driver ends, and refuses clearly what it cannot do.

Each test drives `python -m llmaz_dev.envtest.node` (the node with only the sandbox image) as a separate process, as a
user or a crashed test run would, and then checks the host itself: processes, mounts, cgroups, nft tables,
iptables chains, kube-router's ipsets, the bridge, ip_forward and the paths kubelet, CNI and containerd write.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmaz_dev.envtest._assets import find_assets
from llmaz_dev.envtest.node._host import DEFAULT_PATHS, HostState, _kubepods_trees, _mount_points, _own_processes
from llmaz_dev.envtest.node._layout import NodeLayout
from llmaz_dev.testing.waiting import eventually_sync

START_TIMEOUT = 180.0
LAYOUT = NodeLayout()
DENY_ALL_INGRESS = """
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-all-ingress, namespace: default}
spec: {podSelector: {}, policyTypes: [Ingress]}
"""


def host_snapshot() -> dict[str, object]:
    """What the node could leave behind, as comparable values."""
    tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, check=True).stdout
    chains = subprocess.run(["iptables", "-w", "-S"], capture_output=True, text=True, check=False).stdout
    ipsets = subprocess.run(["ipset", "list", "-n"], capture_output=True, text=True, check=False).stdout
    return {
        "processes": _own_processes(LAYOUT),
        "mounts": [p for p in _mount_points() if p.startswith(str(LAYOUT.root))],
        "cgroups": [str(tree) for tree in _kubepods_trees()],
        "nft tables": sorted(tables.split("\n")),
        "KUBE chains": [line for line in chains.splitlines() if "KUBE-" in line],
        "KUBE ipsets": sorted(name for name in ipsets.split() if "KUBE-" in name),
        "bridge": Path(f"/sys/class/net/{LAYOUT.bridge}").exists(),
        "ip_forward": Path("/proc/sys/net/ipv4/ip_forward").read_text().strip(),
        "paths": [str(path) for path in (LAYOUT.root, *DEFAULT_PATHS) if path.exists()],
    }


class Driver:
    """`python -m llmaz_dev.envtest.node` in its own session, its output in a file."""

    started: list[Driver] = []

    def __init__(self, work: Path, *args: str) -> None:
        self.log = work / "driver.log"
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "llmaz_dev.envtest.node", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        Driver.started.append(self)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_started(self) -> None:
        def started() -> bool:
            if self.process.poll() is not None:  # not an AssertionError: waiting longer cannot help
                raise RuntimeError(f"the node driver exited ({self.process.returncode}):\n{self.output()}")
            return "export KUBECONFIG=" in self.output()

        eventually_sync(started, START_TIMEOUT, "the node to start", interval=0.5)

    def wait_exit(self, timeout: float = 60.0) -> int:
        return self.process.wait(timeout)


@pytest.fixture
def clean_host() -> Iterator[dict[str, object]]:
    """The host before the test; afterwards every driver the test started is stopped and leftovers cleaned.

    A node killed with its machine (no reaper survives that) leaves its state directory behind; the next node
    removes it, so it is cleaned first to make the comparison about this test's node only.
    """
    subprocess.run([sys.executable, "-m", "llmaz_dev.envtest.node", "clean"], capture_output=True, check=False)
    before = host_snapshot()
    assert not before["bridge"], f"a node is already running here: {before}"
    assert not before["processes"], f"a node is already running here: {before}"
    started = len(Driver.started)
    yield before
    for driver in Driver.started[started:]:
        if driver.process.poll() is None:
            driver.process.send_signal(signal.SIGTERM)
            driver.wait_exit()
    subprocess.run([sys.executable, "-m", "llmaz_dev.envtest.node", "clean"], capture_output=True, check=False)


def test_a_sigterm_stops_the_node_and_restores_the_host(tmp_path: Path, clean_host: dict[str, object]) -> None:
    driver = Driver(tmp_path, "--images=pause", f"--dir={tmp_path / 'cluster'}")
    driver.wait_started()
    running = host_snapshot()
    assert running["bridge"]
    assert running["processes"]
    assert running["ip_forward"] == "1"

    driver.process.send_signal(signal.SIGTERM)
    assert driver.wait_exit() == 0, driver.output()
    assert host_snapshot() == clean_host


def test_a_sigkilled_driver_is_cleaned_up_by_its_reaper(tmp_path: Path, clean_host: dict[str, object]) -> None:
    driver = Driver(tmp_path, "--images=pause", f"--dir={tmp_path / 'cluster'}")
    driver.wait_started()
    driver.process.kill()
    driver.wait_exit()
    eventually_sync(lambda: host_snapshot() == clean_host, 60.0, "the reaper to restore the host", interval=0.5)


def test_a_crash_that_killed_the_reaper_too_is_cleaned_by_the_next_start(
    tmp_path: Path, clean_host: dict[str, object]
) -> None:
    driver = Driver(tmp_path, "--images=pause", f"--dir={tmp_path / 'first'}")
    driver.wait_started()
    # A NetworkPolicy, so that kube-router holds ipsets (of the policy's pods and sources) when the crash comes.
    kubectl = find_assets().kubectl
    assert kubectl is not None
    subprocess.run(
        [str(kubectl), f"--kubeconfig={tmp_path / 'first' / 'kubeconfig'}", "apply", "-f", "-"],
        input=DENY_ALL_INGRESS, text=True, check=True, capture_output=True,
    )  # fmt: skip
    eventually_sync(lambda: host_snapshot()["KUBE ipsets"], 60.0, "kube-router's ipsets", interval=0.5)
    state = HostState.load(LAYOUT.state_file)
    assert state is not None
    assert state.owner_pid == driver.process.pid
    # The whole session at once, reaper included (it is detached, so find it by its command line).
    reapers = list(_pids_running("llmaz_dev.envtest.node._reaper"))
    for pid in [driver.process.pid, *reapers]:
        os.kill(pid, signal.SIGKILL)
    driver.wait_exit()
    left = host_snapshot()
    assert left["bridge"], "the crash should have left the node's bridge"
    assert left["paths"], "the crash should have left the node's paths"

    second = Driver(tmp_path, "--images=pause", f"--dir={tmp_path / 'second'}")
    second.wait_started()
    assert f"cleaned what pid {driver.process.pid} left behind:" in second.output()
    assert "bridge llmaz0" in second.output()
    assert " ipsets" in second.output()
    second.process.send_signal(signal.SIGTERM)
    assert second.wait_exit() == 0, second.output()
    assert host_snapshot() == clean_host


def test_a_second_node_and_a_taken_port_are_refused_in_one_line_and_leave_nothing(
    tmp_path: Path, clean_host: dict[str, object]
) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", LAYOUT.ports.kubelet_healthz))
        squatter.listen()
        refused = subprocess.run(
            [sys.executable, "-m", "llmaz_dev.envtest.node", "--images=pause"],
            capture_output=True,
            text=True,
            check=False,
        )
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        f"node: ports in use: 127.0.0.1:{LAYOUT.ports.kubelet_healthz} (kubelet healthz): stop what listens there"
    )
    assert host_snapshot() == clean_host

    first = Driver(tmp_path, "--images=pause", f"--dir={tmp_path / 'first'}")
    first.wait_started()
    try:
        second = subprocess.run(
            [sys.executable, "-m", "llmaz_dev.envtest.node", "--images=pause"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert second.returncode == 1
        assert f"a node cluster is already running (pid {first.process.pid}" in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1, second.stderr
    finally:
        first.process.send_signal(signal.SIGTERM)
        first.wait_exit()
    assert host_snapshot() == clean_host


def _pids_running(marker: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids
