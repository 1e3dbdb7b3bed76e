"""Child processes that never outlive the control plane that started them.

Invariants:
- Every process runs in its own session (so its own process group); stopping signals the whole group with
  SIGTERM, waits, then SIGKILLs the group and reaps the child. After `stop()` returns nothing of it is left.
- An attached process (the default) is stopped by `stop()`, by interpreter exit (atexit), and by
  SIGTERM/SIGHUP to this interpreter: while anything attached runs (or a cleanup is pending) a handler is in
  place where none was set, and once nothing is left the dispositions it replaced are back. When started from
  the main thread it also carries PR_SET_PDEATHSIG=SIGKILL, so even a SIGKILLed test run leaves no orphan behind.
- Cleanups registered with `on_exit` (temporary directories) run on the same exit paths, after the processes.
- A detached process (`make dev-up`) is none of the above: it outlives this interpreter and is stopped later
  by pid with `stop_detached`, which first checks that the pid still runs the expected executable.
- Every child starts with SIGINT at its default disposition (`child_setup`), whatever this process inherited.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

_PR_SET_PDEATHSIG = 1
# Resolved before any fork: the child must not take the dynamic loader's lock between fork and exec.
_prctl = ctypes.CDLL(None, use_errno=True).prctl
_STOP_TIMEOUT = 10.0
_POLL_INTERVAL = 0.05
_live: set[ManagedProcess] = set()
_after_stop_all: dict[int, Callable[[], None]] = {}
# Reentrant: the SIGTERM/SIGHUP handler runs stop_all in the main thread, which may hold the lock at that moment.
_live_lock = threading.RLock()
_EXIT_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
_exit_handled: set[signal.Signals] = set()  # where _stop_all_then_die replaced SIG_DFL


class ManagedProcess:
    """One child process with its output appended to `log_path`."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path, *, detached: bool = False) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.detached = detached
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        if self._popen is None:
            raise RuntimeError(f"{self.name} was never started")
        return self._popen.pid

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        die_with_parent = not self.detached and threading.current_thread() is threading.main_thread()
        with self.log_path.open("ab") as log:
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=child_setup(die_with_parent=die_with_parent),
            )
        if not self.detached:
            with _live_lock:
                _live.add(self)
                _sync_exit_handlers()

    def exit_code(self) -> int | None:
        """None while running; the exit status once it has exited."""
        return None if self._popen is None else self._popen.poll()

    def stop(self, timeout: float = _STOP_TIMEOUT) -> None:
        """SIGTERM the process group, SIGKILL it after `timeout`, and reap the child. Idempotent."""
        with _live_lock:
            _live.discard(self)
        if self._popen is None:
            return
        if self._popen.poll() is None:
            _signal_group(self._popen.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._popen.wait(timeout)
        # Whatever else the group spawned goes too, even when the leader already exited.
        _signal_group(self._popen.pid, signal.SIGKILL)
        self._popen.wait()
        with _live_lock:
            _sync_exit_handlers()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def stop_detached(pid: int, executable: Path, timeout: float = _STOP_TIMEOUT) -> bool:
    """Stop a detached process group by pid if it still runs `executable`; True if it was running."""
    if not _runs(pid, executable):
        return False
    _signal_group(pid, signal.SIGTERM)
    if not _wait_gone(pid, timeout):
        _signal_group(pid, signal.SIGKILL)
        _wait_gone(pid, timeout)
    return True


def is_running(pid: int, executable: Path) -> bool:
    return _runs(pid, executable)


def free_loopback_ports(count: int) -> list[int]:
    """`count` distinct ports that were free on 127.0.0.1 a moment ago."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def is_gone(pid: int) -> bool:
    """The process has exited, or is a zombie its parent has yet to reap."""
    return _state(pid) in (None, "Z")


def left_running(state: Mapping[str, Any]) -> list[str]:
    """What of a recorded cluster (`ControlPlane.state()`) still runs: live processes and listening ports."""
    alive = [f"process {p['name']} ({p['pid']})" for p in state["processes"] if not is_gone(p["pid"])]
    return alive + [f"port {name} ({port})" for name, port in state["ports"].items() if is_listening(port)]


def is_listening(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((host, port)) == 0


def stop_in_reverse(processes: list[ManagedProcess]) -> None:
    """Stop `processes`, the last started first, and empty the list."""
    for process in reversed(processes):
        process.stop()
    processes.clear()


def stop_all() -> None:
    """Stop every attached process still running, then run the registered cleanups (atexit and signal path)."""
    with _live_lock:
        processes, cleanups = list(_live), list(_after_stop_all.values())
        _after_stop_all.clear()
    for process in processes:
        with contextlib.suppress(Exception):
            process.stop()
    for cleanup in cleanups:
        with contextlib.suppress(Exception):
            cleanup()
    with _live_lock:
        _sync_exit_handlers()


atexit.register(stop_all)


def on_exit(key: int, cleanup: Callable[[], None] | None) -> None:
    """Register (or, with None, drop) a cleanup that `stop_all` runs after stopping the processes."""
    with _live_lock:
        if cleanup is None:
            _after_stop_all.pop(key, None)
        else:
            _after_stop_all[key] = cleanup
        _sync_exit_handlers()


def _signal_group(pid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


def _runs(pid: int, executable: Path) -> bool:
    # argv[0] rather than /proc/<pid>/exe: a rebuilt binary shows up there as "<path> (deleted)".
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0].decode()
    except OSError:
        return False
    return _state(pid) not in (None, "Z") and argv0 == str(executable)


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if is_gone(pid):
            return True
        time.sleep(_POLL_INTERVAL)
    return False


def child_setup(*, die_with_parent: bool) -> Callable[[], None]:
    """The `preexec_fn` for a child of ours: SIGINT at its default, and with `die_with_parent` PR_SET_PDEATHSIG.

    An ignored signal stays ignored across exec, and subprocess's `restore_signals` resets only SIGPIPE, SIGXFZ and
    SIGXFSZ. A background job of a non-interactive shell and some CI runners start with SIGINT ignored;
    without the reset every child would inherit that, and a Python child would never raise KeyboardInterrupt.
    """
    return _sigint_default_and_die_with_parent if die_with_parent else _sigint_default


def _sigint_default() -> None:
    # Runs in the child between fork and exec, where it is the only thread.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _sigint_default_and_die_with_parent() -> None:
    _sigint_default()
    # The death signal survives exec of a non-setuid binary.
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _sync_exit_handlers() -> None:
    """With `_live_lock` held: SIGTERM/SIGHUP stop everything while something is attached or a cleanup is pending,
    where they were at their default; once nothing is, they are back at their default (unless replaced since)."""
    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set handlers; the next call from it catches up
    if _live or _after_stop_all:
        for signum in _EXIT_SIGNALS:
            if signum not in _exit_handled and signal.getsignal(signum) is signal.SIG_DFL:
                signal.signal(signum, _stop_all_then_die)
                _exit_handled.add(signum)
        return
    for signum in _exit_handled:
        if signal.getsignal(signum) is _stop_all_then_die:
            signal.signal(signum, signal.SIG_DFL)
    _exit_handled.clear()


def _stop_all_then_die(signum: int, _frame: FrameType | None) -> None:
    stop_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
