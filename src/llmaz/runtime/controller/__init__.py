"""Controllers: reconcile contract, event handlers, predicates, the worker loop and its builder."""

from llmaz.runtime.cache.factory import CacheSyncTimeoutError
from llmaz.runtime.controller.builder import ControllerBuilder, InformerSource, Scope
from llmaz.runtime.controller.controller import Controller, ControllerOptions, Watch
from llmaz.runtime.controller.handler import (
    EnqueueHandler,
    ObjectMapper,
    enqueue_for_object,
    enqueue_for_owner,
    enqueue_mapped,
)
from llmaz.runtime.controller.predicate import Predicate
from llmaz.runtime.controller.reconcile import (
    Reconciler,
    ReconcileTimeoutError,
    Request,
    Result,
    TerminalError,
)

__all__ = [
    "CacheSyncTimeoutError",
    "Controller",
    "ControllerBuilder",
    "ControllerOptions",
    "EnqueueHandler",
    "InformerSource",
    "ObjectMapper",
    "Predicate",
    "ReconcileTimeoutError",
    "Reconciler",
    "Request",
    "Result",
    "Scope",
    "TerminalError",
    "Watch",
    "enqueue_for_object",
    "enqueue_for_owner",
    "enqueue_mapped",
]
