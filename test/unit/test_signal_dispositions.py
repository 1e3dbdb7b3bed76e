"""The tests pass however their run was started: the ones marked `signals` run again in a pytest of their own, started
in the foreground, as a background job of a script (SIGINT and SIGQUIT ignored), under `nohup` (SIGHUP ignored) and
in a new session (`setsid`).

A test that needs a disposition sets it itself; it never counts on the one its run inherited.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Each test of the selection takes a few seconds at most; a hang fails here instead of at pytest-timeout's 600 s.
PER_TEST_TIMEOUT = 60
RUN_TIMEOUT = 300
MARKER = "pytest.mark.signals"
INHERITABLE = (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGTERM)


def dispositions(ignored: tuple[signal.Signals, ...]) -> Callable[[], None]:
    """A `preexec_fn`: `ignored` ignored, the other signals a run may inherit at their defaults."""

    def setup() -> None:
        for signum in INHERITABLE:
            signal.signal(signum, signal.SIG_IGN if signum in ignored else signal.SIG_DFL)

    return setup


START_MODES = {
    "in the foreground": (dispositions(()), False),
    "as a background job of a script": (dispositions((signal.SIGINT, signal.SIGQUIT)), False),
    "under nohup": (dispositions((signal.SIGHUP,)), False),
    "in a new session": (dispositions(()), True),
}


def pytest_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--timeout={PER_TEST_TIMEOUT}", *args]


def signal_test_files() -> list[str]:
    """The unit test files with tests marked `signals` (read, not imported: collecting the whole tier takes long)."""
    here = Path(__file__).resolve()
    marked = [path for path in sorted(REPO.glob("test/unit/**/test_*.py")) if MARKER in path.read_text()]
    return [str(path.relative_to(REPO)) for path in marked if path != here]


@pytest.mark.parametrize("started", list(START_MODES))
def test_the_signal_sensitive_tests_pass_when_the_run_is_started(started: str, tmp_path: Path) -> None:
    files = signal_test_files()
    assert files, f"no unit test file has a test marked with {MARKER}"
    preexec_fn, new_session = START_MODES[started]
    run = subprocess.Popen(
        pytest_argv("-q", "-m", "signals", f"--basetemp={tmp_path / 'run'}", *files),
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=preexec_fn,
        start_new_session=new_session,
    )
    try:
        output = run.communicate(timeout=RUN_TIMEOUT)[0]
    except subprocess.TimeoutExpired:
        run.kill()
        output = run.communicate()[0]
        pytest.fail(f"the run started {started} was still running after {RUN_TIMEOUT} s:\n{output}")

    # 0: every selected test passed (5 would be none selected).
    assert run.returncode == 0, f"started {started}:\n{output}"
