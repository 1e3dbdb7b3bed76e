"""Waiting on child processes that record a cluster's state (the envtest pytest plugin, the simulated driver), and
on everything that state names being gone again."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from llmaz_dev.envtest._process import left_running
from llmaz_dev.testing.waiting import eventually_sync


def recorded_state(process: subprocess.Popen[bytes], state_file: Path, within: float) -> dict[str, Any]:
    """The state `process` writes to `state_file` once it has started its cluster; raises with the process's output
    if it ends before writing it, or AssertionError after `within` seconds."""

    def written() -> str | None:
        if process.poll() is not None and not state_file.is_file():
            output = process.stdout.read().decode(errors="replace") if process.stdout else ""
            raise RuntimeError(f"{process.args!r} ended before recording its state:\n{output}")
        return state_file.read_text() if state_file.is_file() else None

    state: dict[str, Any] = json.loads(eventually_sync(written, within, f"{state_file} to be written"))
    return state


def wait_all_gone(state: dict[str, Any], within: float = 15.0, what: str = "") -> None:
    """Wait until no process of `state` runs and none of its ports listens; the AssertionError names what does."""

    def nothing_left() -> bool:
        left = left_running(state)
        assert left == [], f"still running: {left}"
        return True

    eventually_sync(nothing_left, within, what or "the processes and ports of a stopped cluster to be gone")
