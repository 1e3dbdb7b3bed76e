"""LoRA adapters: the names they are served under, which endpoints hold one, and what an engine is sent for one.

Inputs are cached objects and engine answers (plain dicts and bytes); nothing here does I/O, keeps state or reads
a clock.

Rules:
- A served model's OpenModel lists its adapters in `spec.adapters`; each is served under its own `name`, routed to
  the base model's endpoints. Its position in that list is its llama.cpp id: the replicas start with one `--lora`
  per adapter in spec order. Its `scale` is what a request that names it applies (default 1).
- Names are resolved once: a served model's own name wins over an adapter of that name, and of two models listing
  an adapter of one name, the first model by name serves it (admission checks uniqueness within a model only).
- Which endpoints hold an adapter is what the engine says, read by the engine signals where the engine table
  (`routing.engines`) says the engine lists its adapters, parsed there into one of two shapes:
  - `LoraSlots`, llama.cpp's `GET /lora-adapters`: `[{"id": 0, "path": "<file>", "scale": 0.0}, ...]`. An entry
    whose path has a segment `adapters--<name>` (the model loader's directory for an adapter) holds that adapter
    under its id; any other entry holds the adapter at its id's position in spec.adapters. So an old replica
    during a rollout that reordered the adapters is still sent its own ids, and one started without an adapter
    does not hold it.
  - `ServedAdapters`, vLLM's `GET /v1/models`: the entries with a `parent` are the adapters it serves, by name.
  An endpoint whose engine says nothing (signals off, an engine without a listing, a failed or stale read) is
  taken to hold every adapter of its model: every replica starts with them, and only a rollout adding one has a
  window where an old replica lacks it.
- The request: to an engine that takes per-request scales in a body member (the engine table's
  `scales_member`: llama.cpp's `lora`), every request for a model with adapters, the base model's included,
  carries every adapter the endpoint holds, `"lora": [{"id": <id>, "scale": <scale>}, ...]`: the named adapter at its
  scale, the others at 0. A request without the member would keep the scales of the slot's previous request, and a slot
  whose last request named an adapter would answer the base model with that adapter's cached prompt; a request
  whose scales differ from the slot's makes llama.cpp drop that cache. llama.cpp ignores the request's `model`, so
  it stays as sent. A body that already has that member is sent as it is. Any other engine gets the body
  unchanged: vLLM and SGLang serve an adapter under its own `model` name, and the base model under its own.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

from llmaz.apis.modelpath import ADAPTER_DIRECTORY_PREFIX

DEFAULT_SCALE: Final = 1.0
# A listing is a handful of entries (at most 16 adapters a model); far more is not a listing.
MAX_LISTING_BYTES: Final = 1024 * 1024

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Adapter:
    """One adapter as the gateway routes it."""

    name: str
    model: str
    """The base model's served name."""
    index: int
    """Its position in spec.adapters: its llama.cpp id on a replica started with this spec."""
    scale: float = DEFAULT_SCALE


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _scale(value: Any) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
        return float(value)
    return DEFAULT_SCALE


def model_adapters(model: str, open_model: Obj | None) -> list[Adapter]:
    """The adapters an OpenModel lists, in spec order (entries without a usable name are skipped, keeping the
    positions of the others)."""
    listed = _mapping(_mapping(open_model).get("spec")).get("adapters")
    found: list[Adapter] = []
    for index, entry in enumerate(listed if isinstance(listed, list) else []):
        name = _mapping(entry).get("name")
        if isinstance(name, str) and name and name.isprintable():
            found.append(Adapter(name, model, index, _scale(_mapping(entry).get("scale"))))
    return found


def adapter_table(models: Iterable[str], open_model: Callable[[str], Obj | None]) -> dict[str, list[Adapter]]:
    """Served model -> the adapters served under its name, each adapter name once (see the module rules)."""
    served = set(models)
    taken: set[str] = set()
    table: dict[str, list[Adapter]] = {}
    for model in sorted(served):
        kept = [a for a in model_adapters(model, open_model(model)) if a.name not in served and a.name not in taken]
        taken.update(a.name for a in kept)
        if kept:
            table[model] = kept
    return table


@dataclass(frozen=True, slots=True)
class LoraSlots:
    """llama.cpp's adapters, by id: each id's path."""

    paths: tuple[tuple[int, str], ...]

    def lora_id(self, adapter: Adapter) -> int | None:
        """The id the engine holds `adapter` under, or None when it does not hold it."""
        by_position: int | None = None
        for lora_id, path in self.paths:
            named = path_adapter_name(path)
            if named == adapter.name:
                return lora_id
            if named is None and lora_id == adapter.index:
                by_position = lora_id
        return by_position

    def holds(self, adapter: Adapter) -> bool:
        return self.lora_id(adapter) is not None


@dataclass(frozen=True, slots=True)
class ServedAdapters:
    """The adapters an engine serves by name (vLLM)."""

    names: frozenset[str]

    def lora_id(self, adapter: Adapter) -> int | None:
        return None

    def holds(self, adapter: Adapter) -> bool:
        return adapter.name in self.names


EngineAdapters = LoraSlots | ServedAdapters


def path_adapter_name(path: str) -> str | None:
    """The adapter a file path names by an `adapters--<name>` segment, or None."""
    for segment in reversed(path.replace("\\", "/").split("/")):
        if segment.startswith(ADAPTER_DIRECTORY_PREFIX) and len(segment) > len(ADAPTER_DIRECTORY_PREFIX):
            return segment.removeprefix(ADAPTER_DIRECTORY_PREFIX)
    return None


def with_scales(body: bytes, document: Mapping[str, Any], member: str, scales: list[dict[str, Any]]) -> bytes:
    """The body with `member: scales` added as its last member, byte for byte otherwise; unchanged when it has that
    member already, or there are no scales (an endpoint holding none of the adapters)."""
    if member in document or not scales:
        return body
    end = body.rstrip().rfind(b"}")
    added = orjson.dumps(member) + b":" + orjson.dumps(scales)
    separator = b"," if document else b""
    return body[:end] + separator + added + body[end:]


def lora_scales(
    listing: EngineAdapters | None, adapters: Iterable[Adapter], named: Adapter | None
) -> list[dict[str, Any]]:
    """llama.cpp's per-request scales on an endpoint that lists `listing` (None: not known, every adapter held at
    its position): each adapter it holds, `named` at its scale and the others at 0, by id."""
    scales: dict[int, float] = {}
    for adapter in adapters:
        lora_id = adapter.index if listing is None else listing.lora_id(adapter)
        if lora_id is not None:
            scales[lora_id] = adapter.scale if named is not None and adapter.name == named.name else 0.0
    return [{"id": lora_id, "scale": scale} for lora_id, scale in sorted(scales.items())]


def loaded(adapters: Iterable[Adapter], left_out: Collection[str]) -> list[Adapter]:
    """The adapters a replica started without those named in `left_out` (its Service's `status.unavailableAdapters`)
    loads, each at its llama.cpp id: its position among them, in spec order. What an endpoint whose listing is not
    known yet holds: by spec position alone, an adapter after one left out would be sent another's id."""
    kept = [adapter for adapter in adapters if adapter.name not in left_out]
    return [adapter if adapter.index == i else dataclasses.replace(adapter, index=i) for i, adapter in enumerate(kept)]


def engine_body(
    scales_member: str | None,
    listing: EngineAdapters | None,
    adapters: Iterable[Adapter],
    named: Adapter | None,
    body: bytes,
    document: Mapping[str, Any],
) -> bytes:
    """What an endpoint is sent for a request for a model with `adapters`, naming the adapter `named` or the base
    model (None; see the module rules): with the scales in `scales_member` when its engine takes them there
    (`engines.AdapterApi.scales_member`), else the body as it is; `listing` is what the endpoint lists."""
    if scales_member is None:
        return body
    return with_scales(body, document, scales_member, lora_scales(listing, adapters, named))
