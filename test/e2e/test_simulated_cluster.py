"""The simulated cluster leaves nothing behind: no component process, no listening port, whatever ends its driver."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from llmaz_dev.envtest._process import is_gone
from llmaz_dev.testing.processes import recorded_state, wait_all_gone

pytestmark = pytest.mark.simulated
START_TIMEOUT = 120.0


def _start_driver(tmp_path: Path) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    state_file = tmp_path / "state.json"
    argv = [sys.executable, "-m", "llmaz_dev.envtest.simulated", "--state-file", str(state_file)]
    driver = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return driver, recorded_state(driver, state_file, within=START_TIMEOUT)


@pytest.mark.parametrize(
    ("ending", "signum"), [("is stopped with SIGTERM", signal.SIGTERM), ("is SIGKILLed", signal.SIGKILL)]
)
def test_no_component_process_or_port_survives_a_driver_that(
    tmp_path: Path, ending: str, signum: signal.Signals
) -> None:
    driver, state = _start_driver(tmp_path)
    names = sorted(process["name"] for process in state["processes"])
    assert names == ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "lws-controller"]
    assert all(not is_gone(process["pid"]) for process in state["processes"])

    driver.send_signal(signum)
    driver.communicate(timeout=60)

    wait_all_gone(state, what=f"what a driver that {ending} started to be gone")
