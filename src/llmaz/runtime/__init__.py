"""A small controller runtime on asyncio, in the shape of client-go and controller-runtime.

It knows nothing about llmaz: llmaz's controllers and webhooks sit on top of it. An event travels:

    kube-apiserver --list/watch--> reflector --> store            cache/: one shared informer per resource
      --> informer event (add / update / delete; a tombstone for a delete it missed)
      --> Predicate          controller/predicate.py: drop events that cannot matter (resyncs, status writes)
      --> EnqueueHandler     controller/handler.py: event -> keys (the object, its controller owner, a map fn)
      --> RateLimitingQueue  workqueue/: collapses duplicate keys, never hands a key to two workers at once,
                             delays requeues and backs off retries
      --> Controller         controller/controller.py: N workers; one place turns each outcome into
                             forget / requeue_after / rate-limited retry, with metrics and one error log
      --> Reconciler.reconcile(Request) -> Result: read the cache by key, converge, report status

Reconcilers get a key, not an event: events for one object collapse while it waits, and the reconciler always
works from the latest cached state, so a missed or repeated event cannot leave it wrong (level-triggered).
`ControllerBuilder` wires the chain; the manager runs controllers, informers and servers as Runnables.

The names below are imported lazily, so `import llmaz.runtime` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llmaz.runtime.clock import Clock, RealClock
    from llmaz.runtime.controller import (
        Controller,
        ControllerBuilder,
        ControllerOptions,
        Predicate,
        Reconciler,
        Request,
        Result,
        TerminalError,
        enqueue_for_object,
        enqueue_for_owner,
        enqueue_mapped,
    )
    from llmaz.runtime.resource import Resource, object_key, split_key
    from llmaz.runtime.runnable import Runnable

_EXPORTS = {
    "Clock": "llmaz.runtime.clock",
    "RealClock": "llmaz.runtime.clock",
    "Controller": "llmaz.runtime.controller",
    "ControllerBuilder": "llmaz.runtime.controller",
    "ControllerOptions": "llmaz.runtime.controller",
    "Predicate": "llmaz.runtime.controller",
    "Reconciler": "llmaz.runtime.controller",
    "Request": "llmaz.runtime.controller",
    "Result": "llmaz.runtime.controller",
    "TerminalError": "llmaz.runtime.controller",
    "enqueue_for_object": "llmaz.runtime.controller",
    "enqueue_for_owner": "llmaz.runtime.controller",
    "enqueue_mapped": "llmaz.runtime.controller",
    "Resource": "llmaz.runtime.resource",
    "object_key": "llmaz.runtime.resource",
    "split_key": "llmaz.runtime.resource",
    "Runnable": "llmaz.runtime.runnable",
}

__all__ = [
    "Clock",
    "Controller",
    "ControllerBuilder",
    "ControllerOptions",
    "Predicate",
    "RealClock",
    "Reconciler",
    "Request",
    "Resource",
    "Result",
    "Runnable",
    "TerminalError",
    "enqueue_for_object",
    "enqueue_for_owner",
    "enqueue_mapped",
    "object_key",
    "split_key",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
