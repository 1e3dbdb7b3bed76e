"""The engine table: one entry per BackendRuntime llmaz ships, and the lookups every other gateway module makes."""

from __future__ import annotations

import pytest

from llmaz.apis import constants as c
from llmaz.gateway.routing import engines
from llmaz.gateway.routing.engines import ENGINES, UNKNOWN, PromptReuse, closes_after_stream, engine, recognise

from . import engine_pages as pages


def test_the_table_is_keyed_by_the_backend_runtime_names_of_the_apis() -> None:
    assert list(ENGINES) == [c.LLAMACPP_BACKEND, c.VLLM_BACKEND, c.SGLANG_BACKEND, c.TGI_BACKEND]
    assert all(entry.name == name for name, entry in ENGINES.items())
    assert c.DEFAULT_BACKEND_NAME in ENGINES


@pytest.mark.parametrize(
    ("name", "running", "waiting", "utilisation", "slots"),
    [
        ("llamacpp", "llamacpp:requests_processing", "llamacpp:requests_deferred", (), True),
        (
            "vllm",
            "vllm:num_requests_running",
            "vllm:num_requests_waiting",
            ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
            False,
        ),
        ("sglang", "sglang:num_running_reqs", "sglang:num_queue_reqs", ("sglang:token_usage",), False),
        ("tgi", "tgi_batch_current_size", "tgi_queue_size", (), False),
    ],
)
def test_each_engine_names_the_load_metrics_it_exports(
    name: str, running: str, waiting: str, utilisation: tuple[str, ...], slots: bool
) -> None:
    metrics = engine(name).metrics
    assert metrics is not None
    assert (metrics.running, metrics.waiting, metrics.utilisation, metrics.slots_utilisation) == (
        running,
        waiting,
        utilisation,
        slots,
    )
    assert set(metrics.read) <= engines.SCANNED


@pytest.mark.parametrize(
    ("name", "prompt_tokens", "cached_tokens", "activity"),
    [
        (
            "llamacpp",
            "llamacpp:prompt_tokens_total",
            "llamacpp:prompt_tokens_cached_total",
            ("llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total"),
        ),
        (
            "vllm",
            "vllm:prompt_tokens_total",
            "vllm:prefix_cache_hits_total",
            ("vllm:prompt_tokens_total", "vllm:generation_tokens_total"),
        ),
        (
            "sglang",
            "sglang:prompt_tokens_total",
            "sglang:cached_tokens_total",
            ("sglang:prompt_tokens_total", "sglang:generation_tokens_total"),
        ),
        ("tgi", None, None, ()),
    ],
)
def test_each_engine_names_its_token_counters(
    name: str, prompt_tokens: str | None, cached_tokens: str | None, activity: tuple[str, ...]
) -> None:
    metrics = engine(name).metrics
    assert metrics is not None
    assert (metrics.prompt_tokens, metrics.cached_tokens, metrics.activity) == (prompt_tokens, cached_tokens, activity)


@pytest.mark.parametrize(
    ("name", "reuse", "listing", "member", "closes"),
    [
        ("llamacpp", PromptReuse.SERIAL, "/lora-adapters", "lora", True),
        ("vllm", PromptReuse.SHARED, "/v1/models", None, False),
        ("sglang", PromptReuse.SHARED, None, None, False),
        ("tgi", PromptReuse.SHARED, None, None, False),
        ("ollama", PromptReuse.UNKNOWN, None, None, True),
        (None, PromptReuse.UNKNOWN, None, None, True),
    ],
    ids=["llamacpp", "vllm", "sglang", "tgi", "not-in-the-table", "not-known"],
)
def test_each_engines_prompt_reuse_adapter_api_and_connection_rule(
    name: str | None, reuse: PromptReuse, listing: str | None, member: str | None, closes: bool
) -> None:
    found = engine(name)
    assert found.prompt_reuse is reuse
    assert (found.adapters.listing_path, found.adapters.scales_member) == (listing, member)
    assert (found.adapters.parse is None) == (listing is None)
    assert closes_after_stream(name) is closes


def test_an_engine_the_table_does_not_know_is_the_unknown_entry() -> None:
    assert engine("ollama") is UNKNOWN
    assert engine(None) is UNKNOWN
    assert UNKNOWN.metrics is None


@pytest.mark.parametrize(
    ("page", "name"),
    [
        (pages.llamacpp(1, 0), "llamacpp"),
        (pages.vllm((1,), (0,), (0.1,)), "vllm"),
        (pages.sglang(1, 0, 0.1), "sglang"),
        (pages.tgi(1, 0), "tgi"),
    ],
)
def test_an_engine_is_recognised_by_its_running_metric(page: str, name: str) -> None:
    names = {line.split("{")[0].split(" ")[0]: None for line in page.splitlines() if not line.startswith("#")}
    found = recognise(names)
    assert found is not None
    assert found.name == name


def test_a_page_of_no_known_engine_is_recognised_as_none() -> None:
    assert recognise({"process_cpu_seconds_total": None}) is None


def test_the_flags_that_turn_metrics_on() -> None:
    assert {name: entry.metrics_flag for name, entry in ENGINES.items()} == {
        "llamacpp": "--metrics",
        "vllm": None,
        "sglang": "--enable-metrics",
        "tgi": None,
    }


Cap = engines.Capability


@pytest.mark.parametrize(
    ("args", "embedding", "rerank"),
    [
        ((), False, False),
        (("--embeddings",), True, False),
        (("--embedding", "--pooling", "mean"), True, False),
        (("--embeddings", "--pooling", "rank"), True, True),
        (("--embeddings", "--pooling=rank"), True, True),
        (("--pooling", "rank"), False, False),  # rank pooling without embeddings: no endpoint
        (("--reranking",), True, True),
        (("--rerank", "-c", "512"), True, True),
    ],
)
def test_llamacpp_serves_embeddings_and_reranking_only_with_their_flags(
    args: tuple[str, ...], embedding: bool, rerank: bool
) -> None:
    served = ENGINES[c.LLAMACPP_BACKEND].capabilities(args)
    assert (Cap.EMBEDDING in served, Cap.RERANK in served) == (embedding, rerank)
    assert {Cap.CHAT, Cap.COMPLETION, Cap.TOKENIZE, Cap.DETOKENIZE} <= served


@pytest.mark.parametrize("args", [("--mmproj", "/m/mmproj.gguf"), ("-mm", "/m/p.gguf"), ("--mmproj-url=https://x",)])
def test_llamacpp_takes_audio_only_with_a_multimodal_projector(args: tuple[str, ...]) -> None:
    assert Cap.TRANSCRIPTION not in ENGINES[c.LLAMACPP_BACKEND].capabilities(())
    assert Cap.TRANSCRIPTION in ENGINES[c.LLAMACPP_BACKEND].capabilities(args)


def test_every_capability_has_a_gateway_path_and_every_served_one_a_path_of_its_engine() -> None:
    assert set(engines.API_PATHS.values()) == set(Cap)
    for entry in ENGINES.values():
        assert entry.api is not None
        for capability, served in entry.api.items():
            assert served.path in engines.API_PATHS
            assert engines.API_PATHS[served.path] is capability


def test_an_engine_not_known_serves_everything_at_the_path_it_was_asked_on() -> None:
    assert UNKNOWN.capabilities(()) == frozenset(Cap)
    assert UNKNOWN.path_of(Cap.RERANK, "/rerank") == "/rerank"
    assert ENGINES[c.SGLANG_BACKEND].path_of(Cap.RERANK, "/rerank") == "/v1/rerank"
