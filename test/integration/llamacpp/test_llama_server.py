"""A real llama.cpp `llama-server` serving the tiny random-weight model over its OpenAI-compatible API.

The binary comes from `hack/llamacpp/build.sh` (`make llama-server`, a prerequisite of `make test-integration`);
the model is written by llmaz_dev.tinymodel from the vocabulary shipped next to it. The generated text is
meaningless by construction, so only the protocol is asserted: listing, completions with usage, SSE streaming,
request validation, the chat template read from the GGUF, metrics and a clean SIGTERM.

A second server loads the tiny random LoRA adapter with the flags the Playground builder renders for it: answers
with the adapter differ from the base model's, and the base model's answers stay what they were.

A multi-host group on loopback: `rpc-server` (built beside llama-server) as the worker and `llama-server --rpc` as
the leader, started directly and through the leader's wrapper in config/samples/multi-host-llamacpp.yaml. The
worker runs with GGML_RPC_DEBUG, which logs every command it serves: a `graph_compute` (or `graph_recompute`, for a
graph it already has) per token proves that part of the model ran there.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmaz.apis import OpenModel
from llmaz.controllers.builders.adapters import adapter_flags
from llmaz_dev import tinymodel
from llmaz_dev.envtest._process import ManagedProcess, free_loopback_ports, is_listening
from llmaz_dev.testing.waiting import eventually_sync

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


def _start(binary: Path, model: Path, log: Path, *extra: str) -> Server:
    (port,) = free_loopback_ports(1)
    argv = [str(binary), "-m", str(model), "--alias", ALIAS, "--host", "127.0.0.1", "--port", str(port)]
    argv += ["-c", "512", "--parallel", "1", "--metrics", *extra]
    return _started(Server(ManagedProcess("llama-server", argv, log), f"http://127.0.0.1:{port}"))


def _started(server: Server) -> Server:
    """`server` started and answering /health, or stopped and the failure raised."""
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
    started = _start(binary, model, tmp_path_factory.mktemp("logs") / "llama-server-lora.log", *flags)
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


# A multi-host group on loopback: rpc-server as the worker, llama-server --rpc as the leader.

_SAMPLE = _REPO / "config" / "samples" / "multi-host-llamacpp.yaml"
# The group the leader's wrapper believes it leads: LeaderWorkerSet `mh`, group 0, namespace `ns`, size 2.
_LEADER_ADDRESS = "mh-0.mh.ns"
_WORKER_NAME = "mh-0-1.mh.ns"
_GRAPH_COMPUTES = ("[graph_compute]", "[graph_recompute]")


def _start_rpc_server(rpc_server: Path, port: int, log: Path) -> ManagedProcess:
    """rpc-server on 127.0.0.1:`port`, logging every command it serves, once it accepts connections."""
    argv = ["env", "GGML_RPC_DEBUG=1", str(rpc_server), "-H", "127.0.0.1", "-p", str(port)]
    process = ManagedProcess("rpc-server", argv, log)
    process.start()
    try:
        eventually_sync(lambda: _accepting(process, port), within=_START_TIMEOUT, what=f"rpc-server on {port}")
    except BaseException:
        process.stop(_STOP_TIMEOUT)
        raise
    return process


def _accepting(process: ManagedProcess, port: int) -> bool:
    if (code := process.exit_code()) is not None:
        raise RuntimeError(f"rpc-server exited with {code}:\n{process.log_tail()}")
    return is_listening(port)


def _computed(rpc: ManagedProcess) -> int:
    """How many graphs the worker has computed for its client so far."""
    log = rpc.log_path.read_text(errors="replace")
    return sum(log.count(command) for command in _GRAPH_COMPUTES)


def _answers_through_the_worker(server: Server, rpc: ManagedProcess, model: str) -> None:
    before = _computed(rpc)
    status, body = _request(f"{server.url}/v1/chat/completions", _chat("Hello over RPC.") | {"model": model})
    assert status == 200, body
    assert 0 < body["usage"]["completion_tokens"] <= MAX_TOKENS
    # Each token generated is a graph computed on every device holding layers: the worker's log shows them.
    eventually_sync(lambda: _computed(rpc) > before, within=_REQUEST_TIMEOUT, what="graph_compute on the worker")


@pytest.fixture(scope="module")
def rpc_server(binary: Path) -> Path:
    found = binary.parent / "rpc-server"
    if not os.access(found, os.X_OK):
        pytest.fail(f"{found} is missing: `make llama-server` (hack/llamacpp/build.sh) builds it beside llama-server")
    return found


def test_a_leader_with_an_rpc_worker_answers_and_the_worker_computes_part_of_the_model(
    binary: Path, rpc_server: Path, model: Path, tmp_path: Path
) -> None:
    (rpc_port,) = free_loopback_ports(1)
    rpc = _start_rpc_server(rpc_server, rpc_port, tmp_path / "rpc-server.log")
    try:
        # -lv 4: the log says where each buffer went.
        rpc_args = ("--rpc", f"127.0.0.1:{rpc_port}", "-lv", "4")
        server = _start(binary, model, tmp_path / "llama-server.log", *rpc_args)
        try:
            _answers_through_the_worker(server, rpc, ALIAS)
            # The leader placed weights on the worker: a model buffer on the RPC device at the worker's endpoint.
            log = server.process.log_path.read_text(errors="replace")
            placed = [
                line for line in log.splitlines() if f"RPC0[127.0.0.1:{rpc_port}]" in line and "model buffer" in line
            ]
            assert placed, server.process.log_tail(60)
        finally:
            server.process.stop(_STOP_TIMEOUT)
    finally:
        rpc.stop(_STOP_TIMEOUT)


def _leader_script(replacements: dict[str, str]) -> str:
    """The sample's leader wrapper, with `replacements` (each found exactly once) to run it on loopback."""
    (service,) = [doc for doc in yaml.safe_load_all(_SAMPLE.read_text()) if doc["kind"] == "Service"]
    (container,) = service["spec"]["workloadTemplate"]["leaderTemplate"]["spec"]["containers"]
    assert container["command"][:2] == ["sh", "-c"], container["command"]
    script: str = container["command"][2]
    for old, new in replacements.items():
        assert script.count(old) == 1, f"the sample's leader script no longer has {old!r} once"
        script = script.replace(old, new)
    return script


def _fake_getent(directory: Path, addresses: dict[str, str]) -> Path:
    """A `getent` for `getent hosts <name>` that knows only `addresses`, as the cluster's DNS would answer."""
    directory.mkdir()
    lines = "".join(f'  {name}) echo "{ip}       {name}" ;;\n' for name, ip in addresses.items())
    getent = directory / "getent"
    getent.write_text(f'#!/bin/sh\n[ "$1" = hosts ] || exit 1\ncase "$2" in\n{lines}  *) exit 2 ;;\nesac\n')
    getent.chmod(getent.stat().st_mode | stat.S_IXUSR)
    return directory


def _leader(script: str, fake_bin: Path, log: Path) -> ManagedProcess:
    group = [f"LWS_LEADER_ADDRESS={_LEADER_ADDRESS}", "LWS_GROUP_SIZE=2"]
    argv = ["env", *group, f"PATH={fake_bin}:{os.environ['PATH']}", "sh", "-c", script]
    return ManagedProcess("leader", argv, log)


def _logged(process: ManagedProcess, text: str) -> bool:
    if text in process.log_path.read_text(errors="replace"):
        return True
    if (code := process.exit_code()) is not None:
        raise RuntimeError(f"{process.name} exited with {code}:\n{process.log_tail()}")
    return False


def test_the_samples_leader_waits_for_its_worker_by_dns_name_then_serves_through_it(
    binary: Path, rpc_server: Path, model: Path, tmp_path: Path
) -> None:
    rpc_port, http_port = free_loopback_ports(2)
    script = _leader_script(
        {
            "port=50052": f"port={rpc_port}",
            "/app/llama-server": str(binary),
            "/workspace/models/tiny-llama.gguf": str(model),
            "--host 0.0.0.0 --port 8080": f"--host 127.0.0.1 --port {http_port}",
        }
    )
    fake_bin = _fake_getent(tmp_path / "bin", {_WORKER_NAME: "127.0.0.1"})
    leader = Server(_leader(script, fake_bin, tmp_path / "leader.log"), f"http://127.0.0.1:{http_port}")
    with contextlib.ExitStack() as stopping:
        leader.process.start()
        stopping.callback(leader.process.stop, _STOP_TIMEOUT)
        # No worker yet: the leader says what it waits for, and does not start llama-server.
        waiting = f"waiting for worker {_WORKER_NAME} (127.0.0.1) to accept on port {rpc_port}"
        eventually_sync(lambda: _logged(leader.process, waiting), within=_START_TIMEOUT, what="the leader waiting")
        rpc = _start_rpc_server(rpc_server, rpc_port, tmp_path / "rpc-server.log")
        stopping.callback(rpc.stop, _STOP_TIMEOUT)
        found = f"worker {_WORKER_NAME} is 127.0.0.1, accepting on port {rpc_port}"
        eventually_sync(lambda: _logged(leader.process, found), within=_START_TIMEOUT, what="the worker found")
        eventually_sync(lambda: _healthy(leader), within=_START_TIMEOUT, what="the leader's /health = 200")
        _answers_through_the_worker(leader, rpc, "tiny-llama-multihost")


@pytest.mark.parametrize(
    ("addresses", "seen_as"),
    [({}, "not resolved"), ({_WORKER_NAME: "127.0.0.1"}, "127.0.0.1")],
    ids=["no-dns", "no-port"],
)
def test_the_samples_leader_gives_up_on_a_worker_that_never_comes_up_naming_it(
    addresses: dict[str, str], seen_as: str, tmp_path: Path
) -> None:
    (rpc_port,) = free_loopback_ports(1)  # nothing listens there
    termination_log = tmp_path / "termination-log"
    script = _leader_script(
        {"port=50052": f"port={rpc_port}", "-ge 300 ]": "-ge 2 ]", "/dev/termination-log": str(termination_log)}
    )
    leader = _leader(script, _fake_getent(tmp_path / "bin", addresses), tmp_path / "leader.log")
    leader.start()
    try:
        code = eventually_sync(
            lambda: (c := leader.exit_code()) is not None and (c,), within=_START_TIMEOUT, what="the leader exiting"
        )
    finally:
        leader.stop(_STOP_TIMEOUT)
    message = f"worker {_WORKER_NAME} ({seen_as}) is not accepting on port {rpc_port} after 2 s"
    assert code == (1,), leader.log_tail()
    # The termination message is what kubelet reports, and the Service's condition quotes.
    assert termination_log.read_text().strip() == message
    assert message in leader.log_tail()
