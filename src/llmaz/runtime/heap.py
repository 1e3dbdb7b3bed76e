"""Garbage-collector pauses: measured, and kept short in a long-running manager.

CPython's full (generation 2) collections walk every tracked container in the process and run no other code
meanwhile: with thousands of cached objects and parsed specs they take tens of milliseconds, longer on a
busy node, and reconciles, watch streams and admission requests all wait for them.

- `track_full_collections()` times every full collection into `python_gc_full_collection_duration_seconds`
  (the counterpart of `go_gc_duration_seconds`). Generations 0 and 1 run hundreds of times a second and
  last microseconds; timing them would cost more than it tells, so the callback returns at once for them.
- `freeze()` moves every object alive now into the permanent generation, which collections skip. Done once
  the caches have synced, it takes the imported modules, schemas and the initial cache contents out of every
  later full collection. Frozen objects are still freed by reference counting; only a reference cycle among
  them that becomes garbage later is never reclaimed, so what can be kept is bounded by what was alive at
  the freeze.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from prometheus_client import Histogram

from llmaz.runtime.metrics import REGISTRY

FULL_COLLECTION_SECONDS = Histogram(
    "python_gc_full_collection_duration_seconds",
    "Duration of full (generation 2) garbage collections, during which the process runs nothing else.",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
    registry=REGISTRY,
)

_FULL = 2


class _FullCollectionTimer:
    def __init__(self) -> None:
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != _FULL:
            return
        if phase == "start":
            self._started = time.perf_counter()
        else:
            FULL_COLLECTION_SECONDS.observe(time.perf_counter() - self._started)


_TIMER = _FullCollectionTimer()


def track_full_collections() -> None:
    """Time full collections from now on (idempotent)."""
    if _TIMER not in gc.callbacks:
        gc.callbacks.append(_TIMER)


def freeze() -> int:
    """Move everything alive now out of the collector's reach; return how many objects are frozen."""
    # A collection first, so garbage that exists now is reclaimed rather than frozen with the live objects.
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
