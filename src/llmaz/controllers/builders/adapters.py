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
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from llmaz.apis import OpenModel
from llmaz.apis.modelpath import adapter_path
from llmaz.controllers.builders.errors import AdaptersUnsupportedError, InvalidModelSourceError

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


def adapter_flags(backend: str, main: OpenModel, skip_model_loader: bool) -> list[str]:
    """The flags loading `main`'s adapters into engine `backend` (none when it has no adapters).

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
        try:
            path = adapter_path(adapter, skip_model_loader)
        except ValueError as error:
            raise InvalidModelSourceError(main.metadata.name or "", f"adapter {adapter.name}: {error}") from error
        if backend == "llamacpp" and any(separator in path for separator in LLAMACPP_SEPARATORS):
            detail = f"adapter {adapter.name}: llama.cpp cannot load {path}: its adapter paths cannot hold ',' or ':'"
            raise InvalidModelSourceError(main.metadata.name or "", detail)
        loaded.append((adapter.name, path))
    return flags(loaded)
