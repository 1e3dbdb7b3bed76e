"""Download progress: counters shared by the download workers, and a thread that logs them at an interval.

Invariants:
- `done` counts bytes that are on disk (resumed from an earlier run or fetched now); `fetched` only those fetched by
  this process. Both only grow, except `unfetch`, which takes back bytes discarded when a partial file restarts.
- Rates and ETAs use the monotonic clock and the bytes fetched during the last interval, so resumed bytes never
  inflate the rate.
- The reporter logs at most one `download.progress` line per interval and stops when its context exits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from llmaz.loader.log import get_logger


@dataclass(frozen=True)
class Snapshot:
    done: int
    fetched: int
    total: int
    files_done: int
    files_total: int


class Progress:
    """Thread-safe byte and file counters for one load."""

    def __init__(self, total_bytes: int, total_files: int) -> None:
        self._lock = threading.Lock()
        self._done = 0
        self._fetched = 0
        self._files_done = 0
        self._total = total_bytes
        self._files_total = total_files

    def resumed(self, size: int) -> None:
        with self._lock:
            self._done += size

    def fetched(self, size: int) -> None:
        with self._lock:
            self._done += size
            self._fetched += size

    def discarded(self, size: int) -> None:
        """Bytes counted as done that were thrown away (a partial file that had to restart)."""
        with self._lock:
            self._done -= size

    def file_done(self) -> None:
        with self._lock:
            self._files_done += 1

    def snapshot(self) -> Snapshot:
        with self._lock:
            return Snapshot(self._done, self._fetched, self._total, self._files_done, self._files_total)


def progress_fields(previous: Snapshot, current: Snapshot, elapsed: float) -> dict[str, object]:
    """The fields of one progress line; the rate is over `elapsed` seconds since `previous`."""
    rate = (current.fetched - previous.fetched) / elapsed if elapsed > 0 else 0.0
    remaining = max(current.total - current.done, 0)
    return {
        "bytes_done": current.done,
        "bytes_total": current.total,
        "percent": round(100.0 * current.done / current.total, 1) if current.total else 100.0,
        "rate_bytes_per_second": int(rate),
        "rate": human_bytes(rate) + "/s",
        "eta_seconds": int(remaining / rate) if rate > 0 else None,
        "files_done": current.files_done,
        "files_total": current.files_total,
    }


def human_bytes(size: float) -> str:
    """`1536` -> `1.5 KiB`; binary units, one decimal."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    raise AssertionError("unreachable")


@contextmanager
def reporting(progress: Progress, interval: float, clock: Callable[[], float] = time.monotonic) -> Iterator[Progress]:
    """Log `download.progress` every `interval` seconds while the body runs."""
    stop = threading.Event()
    log = get_logger()

    def run() -> None:
        previous, last = progress.snapshot(), clock()
        while not stop.wait(interval):
            current, now = progress.snapshot(), clock()
            log.info("download.progress", **progress_fields(previous, current, now - last))
            previous, last = current, now

    thread = threading.Thread(target=run, name="progress", daemon=True)
    thread.start()
    try:
        yield progress
    finally:
        stop.set()
        thread.join()
