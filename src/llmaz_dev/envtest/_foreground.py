"""A development cluster in the foreground: started, its `export KUBECONFIG=...` line printed, then held until the
user stops it (Ctrl-C, SIGTERM or SIGHUP), and stopped.

A stop signal interrupts nothing: one that arrives while the cluster starts lets the start finish (or fail) and the
cluster then stops at once, and one during the stop cannot cut it short. The hold waits on the signal wakeup fd
(`signal.set_wakeup_fd`), so a signal that came early is not missed and no lock is taken in a handler.
"""

from __future__ import annotations

import signal
import socket
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol, TypeVar

STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})


class _Cluster(Protocol):
    @property
    def kubeconfig(self) -> Path: ...


ClusterT = TypeVar("ClusterT", bound=_Cluster)


def run_until_signalled(
    cluster: AbstractContextManager[ClusterT], started: Callable[[ClusterT], None] = lambda _: None
) -> int:
    """Enter `cluster` (which starts it), call `started`, print the kubeconfig line, and hold until a stop signal;
    leaving the `with` stops the cluster. Returns the exit status, 0."""
    wakeup, woken = socket.socketpair()
    woken.setblocking(False)
    previous_fd = signal.set_wakeup_fd(woken.fileno())
    previous = {signum: signal.signal(signum, lambda _signum, _frame: None) for signum in STOP_SIGNALS}
    try:
        with cluster as running:
            started(running)
            print(f"export KUBECONFIG={running.kubeconfig}", flush=True)
            while wakeup.recv(1)[0] not in STOP_SIGNALS:
                pass  # another signal with a Python handler woke us
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(previous_fd)
        wakeup.close()
        woken.close()
    return 0
