"""A real llama.cpp `llama-server` serving the tiny random-weight model over its OpenAI-compatible API.

The binary comes from `hack/llamacpp/build.sh` (`make llama-server`, a prerequisite of `make test-integration`);
the model is written by llmaz.testing.tinymodel from the vocabulary shipped next to it. The generated text is
meaningless by construction, so only the protocol is asserted: listing, completions with usage, SSE streaming,
request validation, the chat template read from the GGUF, metrics and a clean SIGTERM.

A second server loads the tiny random LoRA adapter with the flags the Playground builder renders for it: answers
with the adapter differ from the base model's, and the base model's answers stay what they were.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from llmaz.apis import OpenModel
from llmaz.controllers.builders.adapters import adapter_flags
from llmaz.envtest._process import ManagedProcess, free_loopback_ports
from llmaz.testing import tinymodel
from llmaz.testing.waiting import eventually_sync

_REPO = Path(__file__).resolve().parents[3]
_BUILD = _REPO / "hack" / "llamacpp" / "build.sh"
ALIAS = "tiny-random"
# Random weights almost never produce an end token: every generation request is bounded by max_tokens.
MAX_TOKENS = 8
_REQUEST_TIMEOUT = 30.0
_START_TIMEOUT = 30.0
_STOP_TIMEOUT = 10.0
# No ProxyHandler entries: an http(s)_proxy in the environment must never see loopback traffic.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass
class Server:
    process: ManagedProcess
    url: str


def _binary() -> Path:
    printed = subprocess.run([str(_BUILD), "--print"], check=True, capture_output=True, text=True, timeout=30)
    binary = Path(printed.stdout.strip().splitlines()[-1])
    if not os.access(binary, os.X_OK):
        pytest.fail(f"{binary} is missing: run `make llama-server` (hack/llamacpp/build.sh) first")
    return binary


def _post(url: str, body: Any = None, *, raw: bytes | None = None) -> urllib.request.Request:
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    return urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})


def _request(url: str, body: Any = None, *, raw: bytes | None = None) -> tuple[int, Any]:
    """GET without a body, POST with one; the status and the decoded JSON answer, errors included."""
    try:
        with _OPENER.open(_post(url, body, raw=raw), timeout=_REQUEST_TIMEOUT) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def _healthy(server: Server) -> bool:
    if (code := server.process.exit_code()) is not None:
        raise RuntimeError(f"llama-server exited with {code}:\n{server.process.log_tail()}")
    try:
        with _OPENER.open(f"{server.url}/health", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.HTTPError, OSError):
        return False


def _start(binary: Path, model: Path, log: Path, extra: Sequence[str] = ()) -> Server:
    (port,) = free_loopback_ports(1)
    argv = [str(binary), "-m", str(model), "--alias", ALIAS, "--host", "127.0.0.1", "--port", str(port)]
    argv += ["-c", "512", "--parallel", "1", "--metrics", *extra]
    server = Server(ManagedProcess("llama-server", argv, log), f"http://127.0.0.1:{port}")
    server.process.start()
    try:
        eventually_sync(lambda: _healthy(server), within=_START_TIMEOUT, what="llama-server /health = 200")
    except BaseException:
        server.process.stop(_STOP_TIMEOUT)
        raise
    return server


@pytest.fixture(scope="module")
def binary() -> Path:
    return _binary()


@pytest.fixture(scope="module")
def model(binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    vocab = binary.parent / "vocab-llama-spm.gguf"
    return tinymodel.write_tiny_model(vocab, tmp_path_factory.mktemp("model") / "tiny.gguf")


@pytest.fixture(scope="module")
def server(binary: Path, model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    started = _start(binary, model, tmp_path_factory.mktemp("logs") / "llama-server.log")
    yield started
    started.process.stop(_STOP_TIMEOUT)


def _chat(content: str, **extra: Any) -> dict[str, Any]:
    return {"model": ALIAS, "messages": [{"role": "user", "content": content}], "max_tokens": MAX_TOKENS, **extra}


def test_the_model_from_the_real_vocabulary_is_small(model: Path) -> None:
    assert model.stat().st_size <= tinymodel.MAX_BYTES


def test_models_lists_the_alias(server: Server) -> None:
    status, body = _request(f"{server.url}/v1/models")

    assert status == 200
    assert ALIAS in [entry["id"] for entry in body["data"]]


def test_chat_completion_returns_a_choice_and_usage(server: Server) -> None:
    status, body = _request(f"{server.url}/v1/chat/completions", _chat("Say hello."))

    assert status == 200, body
    assert body["object"] == "chat.completion"
    (choice,) = body["choices"]
    assert choice["message"]["role"] == "assistant"
    assert isinstance(choice["message"]["content"], str)
    assert choice["finish_reason"] in ("length", "stop")
    usage = body["usage"]
    assert usage["prompt_tokens"] > 0
    assert 0 < usage["completion_tokens"] <= MAX_TOKENS
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_streaming_sends_sse_chunks_then_done(server: Server) -> None:
    body = _chat("Count to three.", stream=True, stream_options={"include_usage": True})
    with _OPENER.open(_post(f"{server.url}/v1/chat/completions", body), timeout=_REQUEST_TIMEOUT) as response:
        assert response.status == 200
        assert response.headers.get_content_type() == "text/event-stream"
        events = [line.decode().rstrip("\r\n") for line in response]

    data = [event for event in events if event]
    assert data, "no SSE events"
    assert all(event.startswith("data: ") for event in data), data
    assert data[-1] == "data: [DONE]"
    chunks = [json.loads(event.removeprefix("data: ")) for event in data[:-1]]
    assert chunks
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    assert any(choice.get("delta", {}).get("content") for chunk in chunks for choice in chunk["choices"])
    usage = [chunk["usage"] for chunk in chunks if chunk.get("usage")]
    assert usage
    assert usage[-1]["completion_tokens"] > 0


@pytest.mark.parametrize(
    "body",
    [
        {"model": ALIAS, "max_tokens": MAX_TOKENS},
        {"model": ALIAS, "messages": "hello", "max_tokens": MAX_TOKENS},
        _chat("hi") | {"max_tokens": -5},
        _chat("hi") | {"n": 3},
    ],
    ids=["no-messages", "messages-not-a-list", "negative-max-tokens", "several-choices"],
)
def test_an_invalid_body_is_a_client_error(server: Server, body: dict[str, Any]) -> None:
    status, answer = _request(f"{server.url}/v1/chat/completions", body)

    assert status == 400, answer
    assert answer["error"]["type"] == "invalid_request_error"
    assert _healthy(server)


def test_unparsable_json_is_refused_and_the_server_keeps_serving(server: Server) -> None:
    status, answer = _request(f"{server.url}/v1/chat/completions", raw=b"{not json")

    # llama.cpp 0.5.0-dev answers 500 "server_error" (not 400) to a body that is not JSON at all.
    assert status >= 400, answer
    assert "parse error" in answer["error"]["message"]
    assert _healthy(server)


def test_the_chat_template_comes_from_the_gguf(server: Server) -> None:
    _, props = _request(f"{server.url}/props")
    status, applied = _request(
        f"{server.url}/apply-template",
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]},
    )

    assert props["chat_template"] == tinymodel.CHAT_TEMPLATE
    assert status == 200
    assert applied["prompt"] == "System: Be brief.\nUser: Hi\nAssistant:"


def test_metrics_are_served(server: Server) -> None:
    with _OPENER.open(f"{server.url}/metrics", timeout=_REQUEST_TIMEOUT) as response:
        text = response.read().decode()

    assert "llamacpp:prompt_tokens_total" in text


def test_sigterm_stops_the_server(binary: Path, model: Path, tmp_path: Path) -> None:
    server = _start(binary, model, tmp_path / "llama-server.log")
    try:
        os.kill(server.process.pid, signal.SIGTERM)

        code = eventually_sync(
            lambda: (c := server.process.exit_code()) is not None and (c,), within=_STOP_TIMEOUT, what="exit"
        )
        assert code == (0,), server.process.log_tail()
    finally:
        server.process.stop(_STOP_TIMEOUT)


ADAPTER = "tiny-lora"
SEED = 7


@pytest.fixture(scope="module")
def adapter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tinymodel.write_tiny_lora(tinymodel.TINY, tmp_path_factory.mktemp("adapter") / "tiny-lora.gguf")


def _model_with_adapter(adapter: Path) -> OpenModel:
    adapters = [{"name": ADAPTER, "source": {"uri": f"host://{adapter}"}}]
    spec = {"familyName": "llama", "source": {"uri": "host:///models/tiny.gguf"}, "adapters": adapters}
    return OpenModel.from_dict({"metadata": {"name": ALIAS}, "spec": spec})


@pytest.fixture(scope="module")
def adapter_server(
    binary: Path, model: Path, adapter: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    flags = adapter_flags("llamacpp", _model_with_adapter(adapter), skip_model_loader=False)
    started = _start(binary, model, tmp_path_factory.mktemp("logs") / "llama-server-lora.log", flags)
    yield started
    started.process.stop(_STOP_TIMEOUT)


def _greedy(server: Server, lora: list[dict[str, Any]] | None) -> str:
    """The answer at temperature 0 with a fixed seed; `lora` is the request's per-adapter scales (None: no field)."""
    body = _chat("Say hello.", temperature=0, seed=SEED, max_tokens=12)
    if lora is not None:
        body["lora"] = lora
    status, answer = _request(f"{server.url}/v1/chat/completions", body)
    assert status == 200, answer
    content: str = answer["choices"][0]["message"]["content"]
    return content


BASE = [{"id": 0, "scale": 0.0}]
APPLIED = [{"id": 0, "scale": 1.0}]


def test_the_adapter_is_a_valid_lora_gguf_of_its_own_size(adapter: Path) -> None:
    again = tinymodel.write_tiny_lora(tinymodel.TINY, adapter.with_name("again.gguf"))

    assert again.read_bytes() == adapter.read_bytes()
    assert adapter.stat().st_size < 100_000


def test_the_server_lists_the_adapter_loaded_without_applying_it(adapter_server: Server, adapter: Path) -> None:
    status, adapters = _request(f"{adapter_server.url}/lora-adapters")

    assert status == 200
    assert [(entry["id"], entry["path"], entry["scale"]) for entry in adapters] == [(0, str(adapter), 0.0)]


def test_answers_with_the_adapter_differ_and_the_base_answers_do_not_change(adapter_server: Server) -> None:
    base = _greedy(adapter_server, BASE)

    assert _greedy(adapter_server, None) == base
    assert _greedy(adapter_server, None) == base
    with_adapter = _greedy(adapter_server, APPLIED)
    assert with_adapter != base
    assert _greedy(adapter_server, APPLIED) == with_adapter
    # After an adapter's request, a base request names every adapter with scale 0 (what the gateway sends): the
    # change of scales makes llama-server drop the slot's cached prompt, which the adapter computed.
    assert _greedy(adapter_server, BASE) == base


def test_a_base_request_without_the_lora_field_reuses_the_adapters_cached_prompt(adapter_server: Server) -> None:
    # Why the gateway names every adapter with scale 0 on base requests: without the field, llama-server (0.3.36's
    # llama.cpp) keeps the slot's prompt cache that an adapter's request computed, and the base answer changes.
    base = _greedy(adapter_server, BASE)
    _greedy(adapter_server, APPLIED)

    assert _greedy(adapter_server, None) != base
