"""Full-collection timing and the heap freeze (runtime.heap) on the real collector."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from llmaz.runtime import heap
from llmaz.runtime.metrics import REGISTRY


def _full_collections_timed() -> float:
    value = REGISTRY.get_sample_value("python_gc_full_collection_duration_seconds_count")
    return value or 0.0


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


@pytest.fixture
def no_automatic_collections() -> Iterator[None]:
    """Only the test's own collections run: an automatic full one in between would be counted too."""
    was_enabled = gc.isenabled()
    gc.disable()
    yield
    if was_enabled:
        gc.enable()


def test_each_full_collection_is_timed_once_and_younger_ones_are_not(no_automatic_collections: None) -> None:
    heap.track_full_collections()
    heap.track_full_collections()
    before = _full_collections_timed()
    gc.collect(0)
    gc.collect(1)
    assert _full_collections_timed() == before
    gc.collect()
    assert _full_collections_timed() == before + 1
    assert gc.callbacks.count(heap._TIMER) == 1


def test_freeze_takes_live_objects_out_of_later_full_collections(unfrozen: None) -> None:
    survivors = [{"n": [i]} for i in range(10_000)]
    frozen = heap.freeze()
    assert frozen >= len(survivors)
    assert gc.get_freeze_count() == frozen
    tracked_after = len(gc.get_objects())
    assert tracked_after < len(survivors), "a full collection would still walk the frozen objects"


def test_freeze_reclaims_existing_cyclic_garbage_rather_than_keeping_it(unfrozen: None) -> None:
    class Node:
        def __init__(self) -> None:
            self.me = self

    gc.disable()  # so the cycles are still there when freeze runs
    try:
        for _ in range(100):
            Node()
        heap.freeze()
        gc.unfreeze()  # anything frozen is visible to get_objects again
        assert not [o for o in gc.get_objects() if isinstance(o, Node)]
    finally:
        gc.enable()
