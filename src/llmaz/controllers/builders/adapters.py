"""The engine flags that load the served model's adapters: one table, keyed by the BackendRuntime's name.

| BackendRuntime | Flags, adapters in spec order |
|---|---|
| llamacpp | `--lora-scaled <file>:0,<file>:0,...`, then `--lora-init-without-apply` |
| vllm | `--enable-lora --lora-modules <name>=<path> ... --max-loras <count>` |
| sglang | `--lora-paths <name>=<path> ...` |

Invariants:
- Adapter order is spec order everywhere: llama.cpp numbers its adapters by their `--lora` position, and the
  gateway's per-request `lora` field names an adapter by that number (spec.adapters[i] is adapter i).
- llama.cpp loads its adapters with scale 0, so a request that names no adapter gets the base model's answers, and a
  request for an adapter sets that adapter's scale (its `lora` field). The scale 0 must be the adapters' own
  (`--lora-scaled <file>:0`): `--lora <file> --lora-init-without-apply` leaves the server's default scale at 1, and
  llama-server (0.3.36's llama.cpp) applies every adapter to a request without a `lora` field. The adapters are one
  comma-separated list: llama.cpp keeps only the last of a repeated flag. So a llama.cpp adapter path cannot hold
  `,` or `:` (an `InvalidModelSourceError` naming the adapter).
- SGLang gets no `--enable-lora`: its releases before the flag existed (such as v0.4.5, llmaz's default) refuse it,
  and the releases that have it (v0.5.19 of config/backends among them) turn it on whenever `--lora-paths` is given.
- A model with adapters served by any other BackendRuntime is an `AdaptersUnsupportedError`, a condition naming the
  backend and the ones that can, rather than a replica that silently serves the base model under the adapter's name.
- The flags follow the recommended config's arguments and precede the Playground's own `args`.
- An adapter that failed for good is left out (`left_out_adapters`): it is recorded in the inference Service's
  `status.unavailableAdapters` with its source, the Playground's engine gets no flag for it, and once the engine no
  longer names its path the Service's pods get no loader for it either (builders/inject.py), so the base model and
  the other adapters serve. The record stays while the OpenModel lists the adapter with that same source: a
  changed source is tried again, a removed adapter is forgotten.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from llmaz.apis import OpenModel, Service
from llmaz.apis.modelpath import adapter_path
from llmaz.controllers.builders.diagnosis import PodFinding
from llmaz.controllers.builders.errors import AdaptersUnsupportedError, BuildError, InvalidModelSourceError
from llmaz.controllers.builders.sources import adapters, loader_env

# (adapter name, path the engine reads it from), in spec order.
Loaded = Sequence[tuple[str, str]]


LLAMACPP_SEPARATORS = (",", ":")


def _llamacpp(adapters: Loaded) -> list[str]:
    return ["--lora-scaled", ",".join(f"{path}:0" for _, path in adapters), "--lora-init-without-apply"]


def _vllm(adapters: Loaded) -> list[str]:
    modules = [f"{name}={path}" for name, path in adapters]
    return ["--enable-lora", "--lora-modules", *modules, "--max-loras", str(len(adapters))]


def _sglang(adapters: Loaded) -> list[str]:
    return ["--lora-paths", *(f"{name}={path}" for name, path in adapters)]


ADAPTER_FLAGS: dict[str, Callable[[Loaded], list[str]]] = {
    "llamacpp": _llamacpp,
    "vllm": _vllm,
    "sglang": _sglang,
}


def adapter_flags(
    backend: str, main: OpenModel, skip_model_loader: bool, left_out: Collection[str] = frozenset()
) -> list[str]:
    """The flags loading `main`'s adapters, but those named in `left_out`, into engine `backend` (none when it has
    no adapters, or every one is left out).

    Raises `AdaptersUnsupportedError` for a backend that cannot load adapters and `InvalidModelSourceError` for an
    adapter whose source has no path.
    """
    adapters = main.spec.adapters or []
    if not adapters:
        return []
    flags = ADAPTER_FLAGS.get(backend)
    if flags is None:
        raise AdaptersUnsupportedError(main.metadata.name or "", backend, sorted(ADAPTER_FLAGS))
    loaded = []
    for adapter in adapters:
        if adapter.name in left_out:
            continue
        try:
            path = adapter_path(adapter, skip_model_loader)
        except ValueError as error:
            raise InvalidModelSourceError(main.metadata.name or "", f"adapter {adapter.name}: {error}") from error
        if backend == "llamacpp" and any(separator in path for separator in LLAMACPP_SEPARATORS):
            detail = f"adapter {adapter.name}: llama.cpp cannot load {path}: its adapter paths cannot hold ',' or ':'"
            raise InvalidModelSourceError(main.metadata.name or "", detail)
        loaded.append((adapter.name, path))
    return flags(loaded) if loaded else []


def adapter_paths(main: OpenModel, skip_model_loader: bool) -> dict[str, str]:
    """Adapter name -> the path the engine reads it from, in spec order (adapters without one are not there)."""
    paths = {}
    for adapter in main.spec.adapters or ():
        try:
            paths[adapter.name] = adapter_path(adapter, skip_model_loader)
        except ValueError:
            continue
    return paths


def adapter_loader_envs(main: OpenModel) -> dict[str, list[dict[str, Any]]]:
    """Adapter name -> the env of its loader (where it is fetched from), for the adapters that have a loader."""
    envs = {}
    for weights in adapters(main):
        try:
            env = loader_env(weights)
        except BuildError:
            continue
        if env and weights.adapter is not None:
            envs[weights.adapter.name] = env
    return envs


def _current_sources(main: OpenModel) -> dict[str, dict[str, Any]]:
    return {adapter.name: adapter.source.to_dict() for adapter in main.spec.adapters or ()}


def unavailable_adapters(
    service: Service | None, main: OpenModel, found: Mapping[str, PodFinding] | None = None
) -> list[dict[str, Any]]:
    """`status.unavailableAdapters` for `service`: what it recorded, while `main` lists each adapter with the same
    source, then what `found` (`diagnosis.unusable_adapters`) adds, in spec order."""
    current = _current_sources(main)
    recorded = service.status.unavailable_adapters if service is not None and service.status is not None else None
    kept = {
        entry.name: entry.to_dict() for entry in recorded or () if current.get(entry.name) == entry.source.to_dict()
    }
    for name, finding in (found or {}).items():
        if name in current and name not in kept:
            kept[name] = {"name": name, "source": current[name], "reason": finding.reason, "message": finding.message}
    return [kept[name] for name in current if name in kept]


def left_out_adapters(service: Service | None, main: OpenModel) -> frozenset[str]:
    """The adapters of `main` that `service` recorded as unavailable with their current source."""
    return frozenset(entry["name"] for entry in unavailable_adapters(service, main))
