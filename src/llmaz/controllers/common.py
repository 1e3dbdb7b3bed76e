"""What every llmaz reconciler does the same way: read models from the cache, apply only real changes, write
status only when it differs, report a new pod finding once, tell who controls an object, and end quietly when
the object was deleted under it. The Playground and Service reconcilers also open alike (`ParentReconciler`):
the parent from the cache, checked against the admission rules, and aborted with a status and an Event.

Writes go through server-side apply with field manager `llmaz` and `force=true` (llmaz's contract), skipped when
`apply_is_noop` shows the live object already matches, so a steady cluster costs no API traffic. Status is written
with an update carrying the cached resourceVersion: a stale cache gets a Conflict and the key is retried.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import ValidationError

from llmaz.apis import BackendRuntime, OpenModel, Playground, Service
from llmaz.apis import constants as c
from llmaz.apis.base import ApiModel
from llmaz.apis.conditions import find_condition, finding_reason, progressing_finding
from llmaz.apis.core_v1alpha1 import ModelRef
from llmaz.apis.resources import OPEN_MODELS
from llmaz.apis.validation import FieldError
from llmaz.controllers.builders import BuildError, InvalidSpecError, abort_status, main_first
from llmaz.controllers.settings import SettingsHolder
from llmaz.runtime.cache import Obj, SharedInformerFactory, Store
from llmaz.runtime.client import Client, NotFound
from llmaz.runtime.client.applycheck import apply_is_noop
from llmaz.runtime.clock import Clock
from llmaz.runtime.controller import Request, Result, TerminalError
from llmaz.runtime.events import NORMAL, WARNING, EventRecorder
from llmaz.runtime.log import get_logger
from llmaz.runtime.resource import Resource

ModelT = TypeVar("ModelT", bound=ApiModel)

_log = get_logger("llmaz.controllers")


class ModelNotFoundError(BuildError):
    """A claimed OpenModel does not exist (yet); the OpenModel watch wakes the claimant when it appears."""

    def __init__(self, model: str) -> None:
        super().__init__(c.MESSAGE_WAITING_FOR_MODEL)
        self.model = model


class ParsedByVersion(Generic[ModelT]):
    """One pydantic parse per object version, for objects that many reconciles read (OpenModels, BackendRuntimes).

    Keyed by uid and resourceVersion, so a changed object is parsed again. Builders never mutate their inputs,
    which is what makes sharing a parse safe. Holds at most `max_entries` objects (the oldest go first), so
    deleted objects cannot pile up.
    """

    def __init__(self, model: type[ModelT], max_entries: int = 2048) -> None:
        self._model = model
        self._max_entries = max_entries
        self._entries: dict[str, tuple[str, ModelT]] = {}

    def __call__(self, obj: Obj) -> ModelT:
        meta = obj.get("metadata") or {}
        uid, version = meta.get("uid"), meta.get("resourceVersion")
        if not uid or not version:
            return self._model.from_dict(obj)
        hit = self._entries.get(uid)
        if hit is not None and hit[0] == version:
            return hit[1]
        parsed = self._model.from_dict(obj)
        self._entries.pop(uid, None)
        self._entries[uid] = (version, parsed)
        if len(self._entries) > self._max_entries:
            del self._entries[next(iter(self._entries))]
        return parsed


parse_open_model = ParsedByVersion(OpenModel)
parse_backend_runtime = ParsedByVersion(BackendRuntime)


def fetch_models(models: Store, refs: Sequence[ModelRef]) -> list[OpenModel]:
    """The claimed OpenModels from the cache, main model first; raises ModelNotFoundError for a missing one."""
    claimed = []
    for ref in refs:
        obj = models.get(ref.name)
        if obj is None:
            raise ModelNotFoundError(ref.name)
        claimed.append((ref, parse_open_model(obj)))
    return main_first(claimed)


def parse_cached(model: type[ModelT], obj: Obj, key: str) -> ModelT:
    """A cached object as its API model; one that does not match the schema cannot be fixed by retrying."""
    try:
        return model.from_dict(obj)
    except ValidationError as err:
        raise TerminalError(f"{obj.get('kind', model.__name__)} {key} does not match its schema: {err}") from err


def controller_uid(obj: Obj) -> str | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


def is_controlled_by(obj: Obj, owner_uid: str | None) -> bool:
    return owner_uid is not None and controller_uid(obj) == owner_uid


async def live_child(client: Client, cache: Store, resource: Resource, namespace: str, name: str) -> Obj | None:
    """A child as it is: from the cache, else from the API server.

    The caches of LeaderWorkerSets, core Services and HPAs hold only objects with llmaz's managed-by label, so an
    object of the child's name without it (a user's, or one made before the label) is not there. It must still be
    seen before anything is applied over it (ownership) and is read directly: one GET for each reconcile that finds
    no child cached, which in steady state is none.
    """
    cached = cache.get(f"{namespace}/{name}")
    if cached is not None:
        return cached
    try:
        return await client.get(resource, name, namespace)
    except NotFound:
        return None


async def apply_if_changed(client: Client, resource: Resource, desired: Obj, live: Obj | None) -> tuple[Obj, bool]:
    """Server-side apply `desired` unless `live` already matches; returns (object, written)."""
    if apply_is_noop(desired, live, c.FIELD_MANAGER):
        assert live is not None
        return live, False
    applied = await client.apply(resource, desired, field_manager=c.FIELD_MANAGER, force=True)
    return applied, True


async def write_status_if_changed(client: Client, resource: Resource, live: Obj, status: dict[str, Any]) -> bool:
    """Replace `live`'s status with `status` when they differ; True when written."""
    if live.get("status") == status:
        return False
    # Without managedFields the server keeps its own record; the cache holds only part of it (controllers.caches),
    # and a partial list sent back would replace the whole.
    metadata = {key: value for key, value in (live.get("metadata") or {}).items() if key != "managedFields"}
    await client.update_status(resource, {**live, "metadata": metadata, "status": status})
    return True


def record_new_finding(events: EventRecorder, live: Obj, status: dict[str, Any]) -> None:
    """A Warning Event when `status` surfaces a pod finding that `live`'s status did not carry.

    Call it after `status` was written: the status itself remembers what was reported, so each distinct
    finding makes one Event, across reconciles and manager restarts, however long the failure lasts.
    """
    before = progressing_finding(live.get("status"))
    after = progressing_finding(status)
    if after is not None and after != before:
        events.event(live, WARNING, finding_reason(after), after)


def record_left_out_adapters(events: EventRecorder, live: Obj, status: dict[str, Any]) -> None:
    """A Warning Event `AdapterUnavailable` when `status` leaves out an adapter that `live`'s status did not.

    Call it after `status` was written, as `record_new_finding`."""
    before = find_condition((live.get("status") or {}).get("conditions"), c.CONDITION_ADAPTERS_READY) or {}
    after = find_condition(status.get("conditions"), c.CONDITION_ADAPTERS_READY) or {}
    if after.get("status") == "False" and after.get("message") != before.get("message"):
        events.event(live, WARNING, c.REASON_ADAPTER_UNAVAILABLE, str(after.get("message") or ""))


def record_model_routing(events: EventRecorder, live: Obj, status: dict[str, Any]) -> None:
    """A Warning Event `ModelNameTaken` when `status` says another namespace owns the model name and `live`'s status
    did not (or said it of another model); a Normal Event `ModelNameOwned` when that ends.

    Call it after `status` was written, as `record_new_finding`."""
    before = find_condition((live.get("status") or {}).get("conditions"), c.CONDITION_MODEL_ROUTED) or {}
    after = find_condition(status.get("conditions"), c.CONDITION_MODEL_ROUTED) or {}
    message = str(after.get("message") or "")
    if after.get("status") == "False" and (before.get("status") != "False" or before.get("message") != message):
        events.event(live, WARNING, c.REASON_MODEL_NAME_TAKEN, message)
    elif after.get("status") == "True" and before.get("status") == "False":
        events.event(live, NORMAL, c.REASON_MODEL_NAME_OWNED, message)


def record_inference_pool(events: EventRecorder, live: Obj, status: dict[str, Any]) -> None:
    """A Warning Event (the reason of the `InferencePool` condition: `InferencePoolCRDMissing`,
    `InferencePoolConflict`) when `status` says the Playground's pool cannot be made and `live`'s status did not say
    so, or said it for another reason or of another pool.

    Call it after `status` was written, as `record_new_finding`: one Event per distinct finding, however many
    reconciles see it."""
    before = find_condition((live.get("status") or {}).get("conditions"), c.CONDITION_INFERENCE_POOL) or {}
    after = find_condition(status.get("conditions"), c.CONDITION_INFERENCE_POOL) or {}
    changed = (before.get("status"), before.get("reason"), before.get("message")) != (
        after.get("status"),
        after.get("reason"),
        after.get("message"),
    )
    if after.get("status") == "False" and changed:
        events.event(live, WARNING, str(after.get("reason")), str(after.get("message") or ""))


def deleted_meanwhile(err: NotFound, resource: Resource, request: Request) -> bool:
    """Whether `err` is the NotFound of the reconciled object itself (a `resource` named like `request`), or of
    its namespace, as the API server names them in the Status details.

    A NotFound about anything else (a missing CRD, an object the reconciler only reads) is a real failure.
    """
    details = err.details
    name, kind = details.get("name"), details.get("kind")
    if kind == "namespaces" and resource.namespaced:
        return bool(name == request.namespace)
    return kind == resource.plural and (details.get("group") or "") == resource.group and name == request.name


async def reconcile_cached(
    resource: Resource, store: Store, request: Request, reconcile: Callable[[Request, Obj], Awaitable[Result]]
) -> Result:
    """`reconcile(request, obj)` with the object as cached. Gone from the cache: nothing to do (whatever it owned is
    garbage-collected). The NotFound of the object itself (deleted during the reconcile) is success too: the
    normal end of its life, so neither logged as an error nor counted as one, and not retried."""
    obj = store.get(request.key)
    if obj is None:
        return Result()
    try:
        return await reconcile(request, obj)
    except NotFound as err:
        if not deleted_meanwhile(err, resource, request):
            raise
        _log.debug("object deleted during its reconcile", kind=resource.kind, key=request.key, error=str(err))
        return Result()


ParentT = TypeVar("ParentT", Playground, Service)


class ParentReconciler(ABC, Generic[ParentT]):
    """The opening the Playground and Service reconcilers share, and how they report what stops them.

    `reconcile` reads the parent from the cache (`reconcile_cached`), parses it, and runs the admission rules on
    it (`validate`, as on create): a parent stored without admission that the webhook would deny is aborted with
    the webhook's text, and not retried until it changes. A valid one goes to `converge`. `abort` reports any
    `BuildError`: `Progressing=False`/`AbortProcessing` with its message, and a Warning Event when that is news.
    A subclass names its `resource` and `model`, and takes the other stores it reads in `watch`.
    """

    resource: ClassVar[Resource]
    model: type[ParentT]

    def __init__(
        self,
        client: Client,
        informers: SharedInformerFactory,
        events: EventRecorder,
        clock: Clock,
        settings: SettingsHolder | None = None,
    ) -> None:
        self._client = client
        self._events = events
        self._clock = clock
        self._settings = settings if settings is not None else SettingsHolder()
        self._parents = informers.informer_for(self.resource).store
        self._models = informers.informer_for(OPEN_MODELS).store
        self.watch(informers)

    @abstractmethod
    def watch(self, informers: SharedInformerFactory) -> None:
        """Take the stores of the other objects this reconciler reads."""

    @abstractmethod
    def validate(self, parent: ParentT) -> Sequence[FieldError]:
        """The admission rules for a create, on `parent`."""

    async def reconcile(self, request: Request) -> Result:
        return await reconcile_cached(self.resource, self._parents, request, self._open)

    async def _open(self, request: Request, obj: Obj) -> Result:
        parent = parse_cached(self.model, obj, request.key)
        invalid = self.validate(parent)
        if invalid:
            # Not retried: only an edit can fix it, and the edit's own event reconciles it again.
            await self.abort(obj, parent, InvalidSpecError(invalid))
            return Result()
        return await self.converge(request, obj, parent)

    @abstractmethod
    async def converge(self, request: Request, obj: Obj, parent: ParentT) -> Result:
        """The rest of the reconcile, for a parent that exists and passes admission."""

    async def abort(self, obj: Obj, parent: ParentT, err: BuildError) -> None:
        status = abort_status(parent, err.message, self._clock.wall())
        if await write_status_if_changed(self._client, self.resource, obj, status):
            # The event reason names the cause: ModelNotFound, BackendRuntimeNotFound, InvalidSpec, ChildConflict, ...
            self._events.event(obj, WARNING, type(err).__name__.removesuffix("Error"), err.message)
