"""Bounded retries with exponential backoff for transient failures; everything else fails on the first attempt.

Invariants:
- An operation is attempted at most `max_attempts` times in a row without progress; an attempt that made progress
  (the `progress` counter grew, e.g. the partial file got longer) resets the count, so a long download
  over a flaky link is not abandoned while it still advances.
- Delays double from `base` up to `cap`, with jitter in [50%, 100%] so restarted pods do not retry in lockstep.
- `SourceChangedError` is not retried here: the same request would fail the same way; the caller lists again.
- The error that escapes is always a `LoaderError` (classified by the caller's `classify`), chained to its cause.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from llmaz.loader.errors import LoaderError, SourceChangedError, TransientError
from llmaz.loader.log import get_logger

T = TypeVar("T")


class DownloadCancelledError(Exception):
    """Another worker failed for good; this one stops at its next retry point."""


@dataclass(frozen=True)
class Backoff:
    max_attempts: int
    base: float
    cap: float

    def delay(self, attempt: int, jitter: float) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based); `jitter` in [0, 1]."""
        return min(self.cap, self.base * 2.0 ** (attempt - 1)) * (0.5 + jitter / 2)


def as_loader_error(error: BaseException, classify: Callable[[BaseException], LoaderError | None]) -> LoaderError:
    if isinstance(error, LoaderError):
        return error
    classified = classify(error)
    if classified is None:
        raise error
    return classified


def retrying(
    operation: Callable[[], T],
    *,
    what: str,
    backoff: Backoff,
    classify: Callable[[BaseException], LoaderError | None],
    progress: Callable[[], int] = lambda: 0,
    stop: threading.Event | None = None,
) -> T:
    """Run `operation` until it succeeds, fails permanently or runs out of attempts; `what` names it in logs."""
    stop = stop or threading.Event()
    attempt = 1
    while True:
        before = progress()
        try:
            return operation()
        except (DownloadCancelledError, KeyboardInterrupt):
            raise
        except Exception as exc:
            error = as_loader_error(exc, classify)
            if not isinstance(error, TransientError) or isinstance(error, SourceChangedError):
                raise error from exc
            attempt = 1 if progress() > before else attempt
            if attempt >= backoff.max_attempts:
                raise TransientError(f"{error.message} (gave up after {attempt} attempts)") from exc
            delay = backoff.delay(attempt, random.random())
            get_logger().warning(
                "download.retry", what=what, attempt=attempt, delay_seconds=round(delay, 2), error=error.message
            )
            if stop.wait(delay):
                raise DownloadCancelledError(what) from exc
            attempt += 1
