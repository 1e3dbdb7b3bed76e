"""Shared informers: list-watch reflectors feeding indexed stores and event handlers."""

from llmaz.runtime.cache.factory import CacheSyncTimeoutError, ResourceOptions, SharedInformerFactory
from llmaz.runtime.cache.indexers import (
    CONTROLLER_OWNER_UID_INDEX,
    NAMESPACE_INDEX,
    index_by_controller_owner_uid,
    index_by_label,
    index_by_namespace,
)
from llmaz.runtime.cache.informer import ClientListWatch, SharedInformer
from llmaz.runtime.cache.interfaces import (
    DeletedFinalStateUnknown,
    IndexFunc,
    Informer,
    Obj,
    ResourceEventHandler,
    Store,
)
from llmaz.runtime.cache.problems import FORBIDDEN, NOT_SERVED, SourceProblem
from llmaz.runtime.cache.reflector import Reflector
from llmaz.runtime.cache.store import IndexedStore, ReplaceDiff

__all__ = [
    "CONTROLLER_OWNER_UID_INDEX",
    "FORBIDDEN",
    "NAMESPACE_INDEX",
    "NOT_SERVED",
    "CacheSyncTimeoutError",
    "ClientListWatch",
    "DeletedFinalStateUnknown",
    "IndexFunc",
    "IndexedStore",
    "Informer",
    "Obj",
    "Reflector",
    "ReplaceDiff",
    "ResourceEventHandler",
    "ResourceOptions",
    "SharedInformer",
    "SharedInformerFactory",
    "SourceProblem",
    "Store",
    "index_by_controller_owner_uid",
    "index_by_label",
    "index_by_namespace",
]
