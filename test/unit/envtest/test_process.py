"""The signal state around llmaz_dev.envtest's child processes: what a child starts with, what this process keeps."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmaz_dev.envtest._process import ManagedProcess

SLEEP = shutil.which("sleep") or "/bin/sleep"


def ignored_signals(pid: int) -> set[signal.Signals]:
    line = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("SigIgn:"))
    mask = int(line.split()[1], 16)
    return {signum for signum in signal.Signals if mask & (1 << (signum - 1))}


@pytest.fixture
def sigint_ignored() -> Iterator[None]:
    """This process as a background job of a non-interactive shell starts."""
    inherited = signal.signal(signal.SIGINT, signal.SIG_IGN)
    yield
    signal.signal(signal.SIGINT, inherited)


@pytest.mark.parametrize("detached", [False, True])
def test_a_child_starts_with_sigint_at_its_default_when_this_process_ignores_it(
    tmp_path: Path, sigint_ignored: None, detached: bool
) -> None:
    child = ManagedProcess("sleep", [SLEEP, "60"], tmp_path / "sleep.log", detached=detached)
    child.start()
    try:
        assert signal.SIGINT in ignored_signals(os.getpid())
        assert signal.SIGINT not in ignored_signals(child.pid)
    finally:
        child.stop()


def test_sigterm_and_sighup_stop_the_children_only_while_there_are_any(tmp_path: Path) -> None:
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGHUP)}
    assert set(before.values()) == {signal.SIG_DFL}, "this test needs SIGTERM and SIGHUP at their defaults"
    first = ManagedProcess("first", [SLEEP, "60"], tmp_path / "first.log")
    second = ManagedProcess("second", [SLEEP, "60"], tmp_path / "second.log")
    first.start()
    second.start()
    try:
        handlers = {signum: signal.getsignal(signum) for signum in before}
        assert signal.SIG_DFL not in handlers.values()
        first.stop()
        assert {signum: signal.getsignal(signum) for signum in before} == handlers
    finally:
        first.stop()
        second.stop()

    assert {signum: signal.getsignal(signum) for signum in before} == before
