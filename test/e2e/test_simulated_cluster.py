"""The simulated cluster leaves nothing behind: no component process, no listening port, whatever ends its driver."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from llmaz.envtest._process import is_listening

pytestmark = pytest.mark.simulated
START_TIMEOUT = 120.0


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _start_driver(tmp_path: Path) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    state_file = tmp_path / "state.json"
    argv = [sys.executable, "-m", "llmaz.envtest.simulated", "--state-file", str(state_file)]
    driver = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + START_TIMEOUT
    while not (state_file.is_file() and state_file.read_text()):
        assert driver.poll() is None, driver.communicate()[0].decode()
        assert time.monotonic() < deadline, "the simulated cluster did not start"
        time.sleep(0.2)
    return driver, json.loads(state_file.read_text())


@pytest.mark.parametrize(
    ("ending", "signum"), [("is stopped with SIGTERM", signal.SIGTERM), ("is SIGKILLed", signal.SIGKILL)]
)
def test_no_component_process_or_port_survives_a_driver_that(
    tmp_path: Path, ending: str, signum: signal.Signals
) -> None:
    driver, state = _start_driver(tmp_path)
    names = sorted(process["name"] for process in state["processes"])
    assert names == ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "lws-controller"]
    assert all(not _gone(process["pid"]) for process in state["processes"])

    driver.send_signal(signum)
    driver.communicate(timeout=60)

    deadline = time.monotonic() + 15
    while True:
        alive = [p["name"] for p in state["processes"] if not _gone(p["pid"])]
        listening = [name for name, port in state["ports"].items() if is_listening(port)]
        if not (alive or listening) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert (alive, listening) == ([], []), f"a driver that {ending} left these behind"
