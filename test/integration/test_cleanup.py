"""Nothing outlives a test run or `make dev-down`: no etcd or kube-apiserver process, no listening port.

The same holds for a test run started with SIGINT ignored, as a background job of a non-interactive shell and some
CI runners start theirs: the last test runs this module's other tests in such a session.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from llmaz_dev.envtest._devcluster import dev_down, dev_up
from llmaz_dev.envtest._process import child_setup, is_gone
from llmaz_dev.envtest.control_plane import _new_temporary_work_dir
from llmaz_dev.testing.processes import recorded_state, wait_all_gone

INNER_TEST = textwrap.dedent(
    """
    import json, os, time
    from pathlib import Path

    def test_records_the_control_plane(control_plane):
        Path(os.environ["STATE_OUT"]).write_text(json.dumps(control_plane.state()))
        if os.environ["HOLD"] == "1":
            time.sleep(300)
    """
)


def all_running(state: dict[str, Any]) -> bool:
    return all(not is_gone(process["pid"]) for process in state["processes"])


def run_inner_session(tmp_path: Path, hold: bool) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    (tmp_path / "test_inner.py").write_text(INNER_TEST)
    state_out = tmp_path / "state.json"
    env = {**os.environ, "STATE_OUT": str(state_out), "HOLD": "1" if hold else "0"}
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "llmaz_dev.envtest.pytest_plugin",
        "-p",
        "no:cacheprovider",
    ]
    # A Ctrl-C reaches it whatever SIGINT disposition this session inherited.
    inner = subprocess.Popen(
        [*argv, "test_inner.py"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        preexec_fn=child_setup(die_with_parent=True),
    )
    return inner, recorded_state(inner, state_out, within=90)


@pytest.mark.parametrize(
    ("ending", "hold", "signum"),
    [
        ("completes", False, None),
        ("is interrupted with Ctrl-C", True, signal.SIGINT),
        ("is SIGKILLed", True, signal.SIGKILL),
    ],
)
def test_no_process_or_port_survives_a_session_that(
    tmp_path: Path, ending: str, hold: bool, signum: signal.Signals | None
) -> None:
    inner, state = run_inner_session(tmp_path, hold)
    assert len(state["processes"]) == 2
    assert all_running(state)

    if signum is not None:
        inner.send_signal(signum)
    output = inner.communicate(timeout=60)[0].decode()

    if signum is None:
        assert inner.returncode == 0, output
    wait_all_gone(state, what=f"what a session that {ending} started to be gone (its output:\n{output})")
    if signum == signal.SIGKILL:
        shutil.rmtree(_new_temporary_work_dir())  # the next start sweeps what a killed owner could not
    assert not Path(state["work_dir"]).exists()


def test_dev_up_is_idempotent_and_dev_down_stops_everything_it_started(tmp_path: Path) -> None:
    state_dir = tmp_path / "dev"
    try:
        kubeconfig = dev_up(state_dir, crd_paths=[], manifests=None, kustomize=None)
        first = json.loads((state_dir / "state.json").read_text())

        assert dev_up(state_dir, crd_paths=[], manifests=None, kustomize=None) == kubeconfig
        second = json.loads((state_dir / "state.json").read_text())
        assert second["processes"] == first["processes"]
        assert all_running(first)
    finally:
        stopped = dev_down(state_dir)

    assert sorted(stopped) == ["etcd", "kube-apiserver"]
    wait_all_gone(first, what="what dev up started to be gone")
    assert not (state_dir / "state.json").exists()
    assert not kubeconfig.exists()


def ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_nothing_survives_either_in_a_test_run_started_with_sigint_ignored(tmp_path: Path) -> None:
    """`setsid bash -c 'make test' &`: the pytest of a background job starts with SIGINT ignored."""
    here = Path(__file__).resolve()
    tests = [
        f"{here}::{test.__name__}"
        for test in (
            test_no_process_or_port_survives_a_session_that,
            test_dev_up_is_idempotent_and_dev_down_stops_everything_it_started,
        )
    ]
    session = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={tmp_path / 'session'}", *tests],
        cwd=here.parents[2],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=ignore_sigint,
    )
    try:
        output = session.communicate(timeout=480)[0].decode()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(session.pid, signal.SIGKILL)  # its inner sessions too, when it overran
        session.wait()

    assert session.returncode == 0, output
    assert "4 passed" in output, output
