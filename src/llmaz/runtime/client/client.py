"""A REST client for any `Resource`: objects in and out are plain dicts.

Invariants: URLs are built only by `_path`; bodies are encoded with orjson and responses decoded once; list
items get `apiVersion`/`kind` filled in (the server omits them inside lists), so every object a caller sees is
self-describing.
"""

from __future__ import annotations

import builtins
import copy
import enum
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson

from llmaz.runtime.client._transport import Params, Transport
from llmaz.runtime.client.config import RestConfig
from llmaz.runtime.client.connectivity import Connectivity
from llmaz.runtime.client.errors import Expired
from llmaz.runtime.client.watch import WatchEvent, iter_events
from llmaz.runtime.clock import REAL_CLOCK, Clock
from llmaz.runtime.resource import Resource

Obj = dict[str, Any]
WriteGuard = Callable[[], None]

DEFAULT_PAGE_SIZE = 500


class PatchType(enum.Enum):
    """Patch flavours by content type. STRATEGIC works only on built-in (core/apps/...) types, not CRDs."""

    MERGE = "application/merge-patch+json"
    STRATEGIC = "application/strategic-merge-patch+json"
    JSON = "application/json-patch+json"
    # Server-side apply; the body may be JSON, which is valid YAML.
    APPLY = "application/apply-patch+yaml"


@dataclass(frozen=True, slots=True)
class ObjectList:
    items: list[Obj]
    resource_version: str


def _path(resource: Resource, namespace: str | None, name: str | None = None, subresource: str | None = None) -> str:
    base = f"/apis/{resource.group}/{resource.version}" if resource.group else f"/api/{resource.version}"
    parts = [base]
    if resource.namespaced and namespace:
        parts.append(f"namespaces/{quote(namespace, safe='')}")
    parts.append(resource.plural)
    if name is not None:
        parts.append(quote(name, safe=""))
        if subresource:
            parts.append(subresource)
    return "/".join(parts)


def _meta(obj: Obj) -> tuple[str, str | None]:
    meta = obj.get("metadata") or {}
    return str(meta["name"]), meta.get("namespace")


def _selectors(label_selector: str | None, field_selector: str | None) -> Params:
    params: Params = {}
    if label_selector:
        params["labelSelector"] = label_selector
    if field_selector:
        params["fieldSelector"] = field_selector
    return params


class Client:
    """Verbs over one aiohttp session.

    Create with `await Client.from_kubeconfig(...)` or `Client(config)`; `await client.close()` when done.
    Every verb takes `request_timeout` (seconds; default `RestConfig.timeout`), which bounds the request with
    all its retries.
    """

    def __init__(self, config: RestConfig, clock: Clock = REAL_CLOCK) -> None:
        self.config = config
        self._transport = Transport(config, clock)
        self._write_guard: WriteGuard | None = None
        self._owns_transport = True

    def guarded(self, guard: WriteGuard) -> Client:
        """This client, with `guard()` called just before every write (any verb but GET) goes on the wire, retries
        included.

        The guard raises to refuse the write; reads and watches are never refused. The guarded client shares
        this one's session and rate limiters, and closing it leaves them open: the original owns them.
        """
        view = copy.copy(self)
        view._write_guard = guard
        view._owns_transport = False
        return view

    @classmethod
    async def from_kubeconfig(cls, path: Any = None, context: str | None = None, **options: Any) -> Client:
        from llmaz.runtime.client.config import from_kubeconfig

        cfg = await from_kubeconfig(path, context)
        for key, value in options.items():
            setattr(cfg, key, value)
        return cls(cfg)

    @property
    def connectivity(self) -> Connectivity:
        """Whether the API server answers this client (shared with its guarded views)."""
        return self._transport.connectivity

    async def close(self) -> None:
        if self._owns_transport:
            await self._transport.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Params | None = None,
        body: Any = None,
        content_type: str = "application/json",
        request_timeout: float | None = None,
    ) -> Any:
        """A raw API call (discovery, non-resource paths, TokenReview, ...)."""
        data = orjson.dumps(body) if body is not None else None
        return await self._transport.request(
            method,
            path,
            params=params,
            body=data,
            content_type=content_type if data else None,
            request_timeout=request_timeout,
            guard=self._write_guard if method != "GET" else None,
        )

    async def get(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        request_timeout: float | None = None,
    ) -> Obj:
        obj: Obj = await self.request(
            "GET", _path(resource, namespace, name, subresource), request_timeout=request_timeout
        )
        return obj

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        limit: int | None = DEFAULT_PAGE_SIZE,
        request_timeout: float | None = None,
        transform: Callable[[Obj], Obj] | None = None,
    ) -> ObjectList:
        """All matching objects, fetched `limit` at a time; the list's resourceVersion is the last page's. With
        `transform`, each object is replaced by `transform(object)` as its page arrives.

        If a continue token expires mid-way (410), the whole list is fetched again in one unpaginated call.
        """
        params = _selectors(label_selector, field_selector)
        if resource_version is not None:
            params["resourceVersion"] = resource_version
        try:
            return await self._list_pages(resource, namespace, params, limit, request_timeout, transform)
        except Expired:
            if limit is None:
                raise
            return await self._list_pages(resource, namespace, params, None, request_timeout, transform)

    async def _list_pages(
        self,
        resource: Resource,
        namespace: str | None,
        params: Params,
        limit: int | None,
        request_timeout: float | None,
        transform: Callable[[Obj], Obj] | None,
    ) -> ObjectList:
        items: builtins.list[Obj] = []
        last: ObjectList | None = None
        async for last in self._pages(resource, namespace, params, limit, request_timeout):
            items.extend(last.items if transform is None else map(transform, last.items))
        assert last is not None
        return ObjectList(items, last.resource_version)

    async def list_pages(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = DEFAULT_PAGE_SIZE,
        request_timeout: float | None = None,
    ) -> AsyncIterator[ObjectList]:
        """The matching objects one page of at most `limit` at a time (client-go's pager), so a caller that only
        passes through them never holds them all. An expired continue token (410) raises `Expired`."""
        params = _selectors(label_selector, field_selector)
        async for page in self._pages(resource, namespace, params, limit, request_timeout):
            yield page

    async def _pages(
        self,
        resource: Resource,
        namespace: str | None,
        params: Params,
        limit: int | None,
        request_timeout: float | None,
    ) -> AsyncIterator[ObjectList]:
        path = _path(resource, namespace)
        page = dict(params)
        while True:
            if limit:
                page["limit"] = str(limit)
            body: Obj = await self.request("GET", path, params=page, request_timeout=request_timeout)
            items = body.get("items") or []
            for item in items:
                item.setdefault("apiVersion", resource.api_version)
                item.setdefault("kind", resource.kind)
            meta = body.get("metadata") or {}
            yield ObjectList(items, str(meta.get("resourceVersion", "")))
            token = meta.get("continue")
            if not token:
                return
            # The server refuses resourceVersion together with a continue token.
            page = {k: v for k, v in params.items() if k != "resourceVersion"}
            page["continue"] = token

    async def watch(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        allow_watch_bookmarks: bool = True,
        timeout_seconds: int = 300,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """(type, object) events from `resource_version` on; ends after about `timeout_seconds`.

        ERROR events are raised as typed errors (`Expired` for 410). The request is bounded by the server-side
        `timeout_seconds` plus `RestConfig.watch_timeout_margin`, and by `watch_inactivity_timeout` of
        silence.
        """
        params = _selectors(label_selector, field_selector)
        params["watch"] = "true"
        params["timeoutSeconds"] = str(timeout_seconds)
        if allow_watch_bookmarks:
            params["allowWatchBookmarks"] = "true"
        if resource_version is not None:
            params["resourceVersion"] = resource_version
        timeout = aiohttp.ClientTimeout(
            total=timeout_seconds + self.config.watch_timeout_margin,
            sock_read=self.config.watch_inactivity_timeout,
        )
        resp = await self._transport.open("GET", _path(resource, namespace), params=params, client_timeout=timeout)
        try:
            async for event in iter_events(resp):
                yield event
        finally:
            resp.release()

    async def create(self, resource: Resource, obj: Obj, namespace: str | None = None, **opts: Any) -> Obj:
        ns = namespace or (obj.get("metadata") or {}).get("namespace")
        created: Obj = await self.request("POST", _path(resource, ns), body=obj, **_write_opts(**opts))
        return created

    async def update(self, resource: Resource, obj: Obj, *, subresource: str | None = None, **opts: Any) -> Obj:
        """PUT the whole object; send its metadata.resourceVersion to get Conflict on a stale copy."""
        name, ns = _meta(obj)
        path = _path(resource, ns, name, subresource)
        updated: Obj = await self.request("PUT", path, body=obj, **_write_opts(**opts))
        return updated

    async def patch(
        self,
        resource: Resource,
        name: str,
        body: Obj | builtins.list[Obj],
        namespace: str | None = None,
        *,
        patch_type: PatchType = PatchType.MERGE,
        subresource: str | None = None,
        field_manager: str | None = None,
        force: bool | None = None,
        request_timeout: float | None = None,
    ) -> Obj:
        if patch_type is PatchType.APPLY and not field_manager:
            raise ValueError("server-side apply needs a field_manager")
        opts = _write_opts(field_manager=field_manager, request_timeout=request_timeout)
        if force is not None:
            opts["params"]["force"] = "true" if force else "false"
        path = _path(resource, namespace, name, subresource)
        patched: Obj = await self.request("PATCH", path, body=body, content_type=patch_type.value, **opts)
        return patched

    async def apply(
        self,
        resource: Resource,
        obj: Obj,
        *,
        field_manager: str,
        force: bool = True,
        subresource: str | None = None,
        request_timeout: float | None = None,
    ) -> Obj:
        """Server-side apply of `obj` (which carries apiVersion, kind and metadata.name[/namespace]).

        `force` defaults to True: a controller should own the fields it applies.
        """
        name, ns = _meta(obj)
        return await self.patch(
            resource,
            name,
            obj,
            ns,
            patch_type=PatchType.APPLY,
            subresource=subresource,
            field_manager=field_manager,
            force=force,
            request_timeout=request_timeout,
        )

    async def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        propagation_policy: str | None = None,
        preconditions: dict[str, str] | None = None,
        grace_period_seconds: int | None = None,
        request_timeout: float | None = None,
    ) -> Obj:
        """Delete; `propagation_policy` is "Foreground", "Background" or "Orphan".

        `preconditions` may hold "uid" and/or "resourceVersion". Returns the object (still present while it
        has finalizers) or a Status.
        """
        options: Obj = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        if preconditions:
            options["preconditions"] = preconditions
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        deleted: Obj = await self.request(
            "DELETE", _path(resource, namespace, name), body=options, request_timeout=request_timeout
        )
        return deleted

    async def delete_collection(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        request_timeout: float | None = None,
    ) -> None:
        """Delete every object of `resource` (in `namespace`, matching `label_selector`): client-go's
        DeleteCollection, one request instead of a list and a delete per object."""
        params = {"labelSelector": label_selector} if label_selector else None
        await self.request("DELETE", _path(resource, namespace), params=params, request_timeout=request_timeout)

    async def update_status(self, resource: Resource, obj: Obj, **opts: Any) -> Obj:
        return await self.update(resource, obj, subresource="status", **opts)

    async def patch_status(
        self,
        resource: Resource,
        name: str,
        body: Obj | builtins.list[Obj],
        namespace: str | None = None,
        **opts: Any,
    ) -> Obj:
        return await self.patch(resource, name, body, namespace, subresource="status", **opts)

    async def get_scale(self, resource: Resource, name: str, namespace: str | None = None) -> Obj:
        return await self.get(resource, name, namespace, subresource="scale")

    async def scale(self, resource: Resource, name: str, replicas: int, namespace: str | None = None) -> Obj:
        """Set spec.replicas through the scale subresource (merge patch of the Scale object)."""
        return await self.patch(resource, name, {"spec": {"replicas": replicas}}, namespace, subresource="scale")


def _write_opts(
    *, field_manager: str | None = None, dry_run: bool = False, request_timeout: float | None = None
) -> dict[str, Any]:
    params: Params = {}
    if field_manager:
        params["fieldManager"] = field_manager
    if dry_run:
        params["dryRun"] = "All"
    return {"params": params, "request_timeout": request_timeout}
