"""The engine table: everything the gateway knows about each engine it routes to, in one place.

Keyed by the BackendRuntime names llmaz ships (`llmaz.apis.constants`): `llamacpp`, `vllm`, `sglang`, `tgi`.
Every other gateway module asks this table; no engine's metric name, listing path, request member or connection
habit is written anywhere else. An engine is one `Engine`:

- `metrics`: the names on its Prometheus `/metrics` page the gateway reads. The load (running and waiting
  requests, and how full its cache is), and the counters that advance with work (`activity`: prompt and generated
  tokens; idle detection reads them so that a model used only by direct clients of its `-lb` Service is not idle),
  and the cached-prompt counters (`cached_tokens`, `prompt_tokens`: how much of the prompts the cache served).
  Which engine an endpoint runs is recognised from its page: the first engine, in table order, whose running
  metric the page has (`recognise`).
- `prompt_reuse`: how a cached prompt prefix serves requests. llama.cpp keeps a prompt in the slot that computed
  it (or restores it from its `--cache-ram` into one slot), so concurrent requests of one prefix are served from
  the cache one at a time (`SERIAL`); vLLM and SGLang share cached KV blocks across every running request
  (`SHARED`).
- `adapters`: how it lists the LoRA adapters it holds (a path and its answer's parser) and how a request names
  one: llama.cpp applies per-request scales in a body member (`lora: [{id, scale}]`, the adapter's id from the
  listing), vLLM serves each adapter under its own `model` name and the body goes unchanged.
- `close_after_stream`: llama.cpp closes a connection after a streamed answer while its headers still say
  keep-alive, so a streamed request to it asks for `Connection: close` and goes on a connection of its own; the
  others (uvicorn's servers, TGI) keep connections alive, and a stream reuses pooled connections.
- `metrics_flag`: the engine flag that turns its metrics page on, when it is off by default (the gateway knows
  the engine's load only with it).
- `api`: the OpenAI (and tokenizer) endpoints it serves, each a `Capability`, at the path it serves it under and with
  the engine flags it needs, if any (llama.cpp serves embeddings only with `--embeddings`, reranking only with
  `--reranking`, audio only with a multimodal projector). A capability the entry does not list is not served: the
  gateway refuses it at once (501 `unsupported_endpoint`). An engine not known (`UNKNOWN`) is taken to serve every
  endpoint at the gateway's own path, so a custom engine is never refused what it may serve.

`engine(name)` looks one up (None for an engine the table does not know, Ollama included: it has no metrics page
and no listing, so its load is never known and its requests get the defaults of `UNKNOWN`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from llmaz.apis import constants as c
from llmaz.gateway.routing.adapters import EngineAdapters, LoraSlots, ServedAdapters


class PromptReuse(enum.StrEnum):
    SERIAL = "serial"
    """A cached prompt serves one request at a time: it lives in (or is restored into) one slot (llama.cpp)."""
    SHARED = "shared"
    """Cached prompt blocks are shared by every running request that starts with them (vLLM, SGLang)."""
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class MetricNames:
    """The metric names one engine exports, as the gateway reads them."""

    running: str
    """Gauge: requests the engine is processing now."""
    waiting: str
    """Gauge: requests it has accepted and queued."""
    utilisation: tuple[str, ...] = ()
    """0-1 gauges of how full the engine is; the first one the page exports is read."""
    slots_utilisation: bool = False
    """Utilisation is running requests over the `total_slots` of `GET /props` (llama.cpp has no KV gauge)."""
    activity: tuple[str, ...] = ()
    """Counters that advance whenever the engine works (prompt and generated tokens): their sum moving means it
    served someone since the last read."""
    prompt_tokens: str | None = None
    """Counter: the engine's count of prompt tokens (llama.cpp counts those it computed, not those its cache
    served; check what a given engine release counts before dividing one by the other)."""
    cached_tokens: str | None = None
    """Counter: prompt tokens served from the engine's prefix cache."""

    @property
    def read(self) -> tuple[str, ...]:
        """Every name the gateway scans a page for."""
        return (self.running, self.waiting, *self.utilisation, *self.activity)


@dataclass(frozen=True, slots=True)
class AdapterApi:
    """How an engine lists the LoRA adapters it holds, and how a request applies one."""

    listing_path: str | None
    """`GET` this path for the listing; None: the engine does not say."""
    parse: Callable[[bytes], EngineAdapters] | None
    """Reads the listing (ValueError when it cannot)."""
    scales_member: str | None
    """The body member that carries per-request adapter scales (`[{"id": <id>, "scale": <scale>}]`); None: the
    request names an adapter by its `model` and the body is sent unchanged."""


class Capability(enum.StrEnum):
    """One endpoint of OpenAI's API (or the engines' tokenizer API) a model may be asked for; listed per model in
    `/v1/models` as `capabilities`, in this order."""

    CHAT = "chat"
    COMPLETION = "completion"
    EMBEDDING = "embedding"
    RESPONSES = "responses"
    RERANK = "rerank"
    SCORE = "score"
    TRANSCRIPTION = "transcription"
    TRANSLATION = "translation"
    SPEECH = "speech"
    TOKENIZE = "tokenize"
    DETOKENIZE = "detokenize"


API_PATHS: Final[Mapping[str, Capability]] = {
    "/v1/chat/completions": Capability.CHAT,
    "/v1/completions": Capability.COMPLETION,
    "/v1/embeddings": Capability.EMBEDDING,
    "/v1/responses": Capability.RESPONSES,
    "/v1/rerank": Capability.RERANK,
    "/rerank": Capability.RERANK,
    "/v1/score": Capability.SCORE,
    "/v1/audio/transcriptions": Capability.TRANSCRIPTION,
    "/v1/audio/translations": Capability.TRANSLATION,
    "/v1/audio/speech": Capability.SPEECH,
    "/tokenize": Capability.TOKENIZE,
    "/detokenize": Capability.DETOKENIZE,
}
"""The paths the gateway serves by model (POST), and the capability each asks for."""

MULTIPART: Final = frozenset({Capability.TRANSCRIPTION, Capability.TRANSLATION})
"""Capabilities whose requests are `multipart/form-data` uploads (the model is a form field), not JSON."""

ALL_CAPABILITIES: Final = frozenset(Capability)


def has_flag(args: Sequence[str], *names: str) -> bool:
    """Whether `args` has one of the flags `names` (alone, or as `--name=value`)."""
    return any(arg in names or arg.split("=", 1)[0] in names for arg in args)


def flag_value(args: Sequence[str], *names: str) -> str | None:
    """The value of the last of the flags `names` in `args` (`--name value` or `--name=value`), or None."""
    found: str | None = None
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in names:
            found = value if eq else (args[i + 1] if i + 1 < len(args) else None)
    return found


@dataclass(frozen=True, slots=True)
class Served:
    """How an engine serves one capability."""

    path: str
    """The path it serves it at."""
    needs: Callable[[Sequence[str]], bool] | None = None
    """Whether the engine's arguments turn it on; None: always served."""


@dataclass(frozen=True, slots=True)
class Engine:
    name: str
    """Its BackendRuntime name."""
    metrics: MetricNames | None
    prompt_reuse: PromptReuse
    adapters: AdapterApi
    close_after_stream: bool
    """True: it closes a connection after a streamed answer, so a streamed request goes with `Connection: close`."""
    metrics_flag: str | None = None
    """The engine flag its metrics page needs, when it is off by default."""
    api: Mapping[Capability, Served] | None = field(default=None)
    """The endpoints it serves; None: not known, every one is taken to be served at the gateway's own path."""

    def capabilities(self, args: Sequence[str] = ()) -> frozenset[Capability]:
        """What it serves when started with `args` (a Playground's `backendRuntimeConfig.args`)."""
        if self.api is None:
            return ALL_CAPABILITIES
        return frozenset(cap for cap, served in self.api.items() if served.needs is None or served.needs(args))

    def path_of(self, capability: Capability, requested: str) -> str:
        """The path to send a request for `capability` to (`requested`, the gateway's path, when not known)."""
        served = None if self.api is None else self.api.get(capability)
        return requested if served is None else served.path


def _json(body: bytes, what: str) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        raise ValueError(f"{what} is not JSON") from None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


LLAMACPP_ADAPTERS_PATH: Final = "/lora-adapters"
SERVED_MODELS_PATH: Final = "/v1/models"


def parse_lora_adapters(body: bytes) -> LoraSlots:
    """llama.cpp's `GET /lora-adapters` answer; raises ValueError when it is not a list of `{id, path}`."""
    listed = _json(body, LLAMACPP_ADAPTERS_PATH)
    if not isinstance(listed, list):
        raise ValueError(f"{LLAMACPP_ADAPTERS_PATH} is not a JSON list")
    paths: list[tuple[int, str]] = []
    for entry in listed:
        lora_id, path = _mapping(entry).get("id"), _mapping(entry).get("path")
        if not isinstance(lora_id, int) or isinstance(lora_id, bool) or lora_id < 0 or not isinstance(path, str):
            raise ValueError(f"{LLAMACPP_ADAPTERS_PATH} has an entry without an id and a path: {str(entry)[:200]}")
        paths.append((lora_id, path))
    return LoraSlots(tuple(sorted(paths)))


def parse_served_adapters(body: bytes) -> ServedAdapters:
    """vLLM's `GET /v1/models` answer: the ids of the entries with a parent; raises ValueError when it is not a
    model list."""
    data = _mapping(_json(body, SERVED_MODELS_PATH)).get("data")
    if not isinstance(data, list):
        raise ValueError(f"{SERVED_MODELS_PATH} has no data list")
    names = {
        entry["id"]
        for entry in map(_mapping, data)
        if isinstance(entry.get("id"), str) and isinstance(entry.get("parent"), str) and entry["parent"]
    }
    return ServedAdapters(frozenset(names))


NO_ADAPTER_API: Final = AdapterApi(None, None, None)


def _llamacpp_reranking(args: Sequence[str]) -> bool:
    """llama.cpp reranks with `--reranking` (`--rerank`), or with embeddings on and rank pooling."""
    embeddings = has_flag(args, "--embeddings", "--embedding")
    return has_flag(args, "--reranking", "--rerank") or (embeddings and flag_value(args, "--pooling") == "rank")


def _llamacpp_embeddings(args: Sequence[str]) -> bool:
    """llama.cpp embeds with `--embeddings` (`--embedding`); `--reranking` turns embeddings on too."""
    return has_flag(args, "--embeddings", "--embedding", "--reranking", "--rerank")


def _llamacpp_audio(args: Sequence[str]) -> bool:
    """llama.cpp takes audio with a multimodal projector that has an audio encoder: one must be given."""
    return has_flag(args, "--mmproj", "-mm", "--mmproj-url", "-mmu")


_CHAT = Served("/v1/chat/completions")
_COMPLETION = Served("/v1/completions")
_EMBEDDING = Served("/v1/embeddings")
_RESPONSES = Served("/v1/responses")
_RERANK = Served("/v1/rerank")
_SCORE = Served("/v1/score")
_TOKENIZE = Served("/tokenize")
_DETOKENIZE = Served("/detokenize")

LLAMACPP_API: Final[Mapping[Capability, Served]] = {
    Capability.CHAT: _CHAT,
    Capability.COMPLETION: _COMPLETION,
    Capability.EMBEDDING: Served("/v1/embeddings", _llamacpp_embeddings),
    Capability.RESPONSES: _RESPONSES,
    Capability.RERANK: Served("/v1/rerank", _llamacpp_reranking),
    Capability.TRANSCRIPTION: Served("/v1/audio/transcriptions", _llamacpp_audio),
    Capability.TOKENIZE: _TOKENIZE,
    Capability.DETOKENIZE: _DETOKENIZE,
}
VLLM_API: Final[Mapping[Capability, Served]] = {
    Capability.CHAT: _CHAT,
    Capability.COMPLETION: _COMPLETION,
    Capability.EMBEDDING: _EMBEDDING,
    Capability.RESPONSES: _RESPONSES,
    Capability.RERANK: _RERANK,
    Capability.SCORE: _SCORE,
    Capability.TRANSCRIPTION: Served("/v1/audio/transcriptions"),
    Capability.TRANSLATION: Served("/v1/audio/translations"),
    Capability.TOKENIZE: _TOKENIZE,
    Capability.DETOKENIZE: _DETOKENIZE,
}
SGLANG_API: Final[Mapping[Capability, Served]] = {
    Capability.CHAT: _CHAT,
    Capability.COMPLETION: _COMPLETION,
    Capability.EMBEDDING: _EMBEDDING,
    Capability.RESPONSES: _RESPONSES,
    Capability.RERANK: _RERANK,
    Capability.SCORE: _SCORE,
    Capability.TOKENIZE: _TOKENIZE,
    Capability.DETOKENIZE: _DETOKENIZE,
}
TGI_API: Final[Mapping[Capability, Served]] = {
    Capability.CHAT: _CHAT,
    Capability.COMPLETION: _COMPLETION,
    Capability.TOKENIZE: _TOKENIZE,
}

ENGINES: Final[Mapping[str, Engine]] = {
    c.LLAMACPP_BACKEND: Engine(
        c.LLAMACPP_BACKEND,
        MetricNames(
            "llamacpp:requests_processing",
            "llamacpp:requests_deferred",
            slots_utilisation=True,
            activity=("llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total"),
            prompt_tokens="llamacpp:prompt_tokens_total",
            cached_tokens="llamacpp:prompt_tokens_cached_total",
        ),
        PromptReuse.SERIAL,
        AdapterApi(LLAMACPP_ADAPTERS_PATH, parse_lora_adapters, "lora"),
        close_after_stream=True,
        metrics_flag="--metrics",
        api=LLAMACPP_API,
    ),
    c.VLLM_BACKEND: Engine(
        c.VLLM_BACKEND,
        MetricNames(
            "vllm:num_requests_running",
            "vllm:num_requests_waiting",
            ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),  # the second: older releases
            activity=("vllm:prompt_tokens_total", "vllm:generation_tokens_total"),
            prompt_tokens="vllm:prompt_tokens_total",
            cached_tokens="vllm:prefix_cache_hits_total",
        ),
        PromptReuse.SHARED,
        AdapterApi(SERVED_MODELS_PATH, parse_served_adapters, None),
        close_after_stream=False,
        api=VLLM_API,
    ),
    c.SGLANG_BACKEND: Engine(
        c.SGLANG_BACKEND,
        MetricNames(
            "sglang:num_running_reqs",
            "sglang:num_queue_reqs",
            ("sglang:token_usage",),
            activity=("sglang:prompt_tokens_total", "sglang:generation_tokens_total"),
            prompt_tokens="sglang:prompt_tokens_total",
            cached_tokens="sglang:cached_tokens_total",
        ),
        PromptReuse.SHARED,
        NO_ADAPTER_API,
        close_after_stream=False,
        metrics_flag="--enable-metrics",
        api=SGLANG_API,
    ),
    c.TGI_BACKEND: Engine(
        c.TGI_BACKEND,
        MetricNames("tgi_batch_current_size", "tgi_queue_size"),
        PromptReuse.SHARED,
        NO_ADAPTER_API,
        close_after_stream=False,
        api=TGI_API,
    ),
}
"""BackendRuntime name -> its engine. Order matters to `recognise`: the first whose running metric a page has."""

UNKNOWN: Final = Engine("", None, PromptReuse.UNKNOWN, NO_ADAPTER_API, close_after_stream=True)
"""What an engine the table does not know (or not known at all) is taken to be: no metrics, no listing, adapters
unchanged in the body, every endpoint served at the gateway's own path, and a streamed request on a connection of its
own (closing costs a connection, reusing one such an engine closed would cost the request)."""

SCANNED: Final = frozenset(name for e in ENGINES.values() if e.metrics is not None for name in e.metrics.read)
"""Every metric name a page is scanned for."""


def engine(name: str | None) -> Engine:
    """The engine of a BackendRuntime name (or one recognised from its page); `UNKNOWN` for None or a name the
    table does not know."""
    return UNKNOWN if name is None else ENGINES.get(name, UNKNOWN)


def recognise(names: Mapping[str, object]) -> Engine | None:
    """The engine a page comes from, given the metric names found on it: the first, in table order, whose running
    metric is there; None when none is."""
    for candidate in ENGINES.values():
        if candidate.metrics is not None and candidate.metrics.running in names:
            return candidate
    return None


def closes_after_stream(name: str | None) -> bool:
    """Whether a streamed request to an endpoint running `name` must ask for `Connection: close`."""
    return engine(name).close_after_stream
