"""The real llmaz-gateway over in-memory objects, in front of a scripted engine: an OpenAI endpoint without a cluster.

`python -m llmaz_dev.testing.standin_gateway [--port 8000] [--model tiny-llama]` serves, on 127.0.0.1, what
`make run` serves at http://127.0.0.1:8000/v1 on a real node: `llmaz.gateway.server.Gateway` itself, listing one
model and routing it to an engine. Only the cluster is missing: the gateway reads an OpenModel, a Playground and
an EndpointSlice from `FakeInformer`s instead of an API server, and the engine behind the slice is `ScriptedEngine`,
an aiohttp server on 127.0.0.1 that answers every chat completion with the same sentence (streamed as SSE chunks
when asked to, as Open WebUI does). It prints one line, the API's base URL, and serves until SIGINT or SIGTERM.

It is how `make test-webui` (Open WebUI in Chromium, docs/gateway.md "Open WebUI") is checked on a machine that
cannot run the node: `make test-webui WEBUI_STANDIN=true` starts it on a free port. `--engine ADDRESS:PORT` routes
the model to a real engine instead (e.g. `llama-server --alias tiny-llama` with the tiny model on 127.0.0.1).

Limits of the scripted engine: no model runs (the reply is fixed, token counts are words, `max_tokens` is
ignored); `/v1/completions` answers like chat, and `/v1/embeddings` with one zero vector per input.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from aiohttp import web

from llmaz.gateway.proxy.metrics import GatewayMetrics
from llmaz.gateway.proxy.server import Gateway, GatewayOptions
from llmaz.gateway.routing.catalog import Catalog
from llmaz.runtime import log
from llmaz_dev.testing.gateway_objects import endpoint_slice, open_model, playground
from llmaz_dev.testing.informer import FakeInformer

MODEL = "tiny-llama"
NAMESPACE = "default"
REPLY = "Hello from llmaz-gateway! This answer comes from the stand-in engine, not from a model."
# Bounds starting and stopping; reached only when something is broken.
WAIT = 10.0


def reply_to(messages: list[dict[str, Any]]) -> str:
    """The fixed sentence, then the last user message quoted back, so a client can tell its answer apart."""
    said = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), None)
    if isinstance(said, list):  # content parts
        said = " ".join(str(p.get("text", "")) for p in said if isinstance(p, dict) and p.get("type") == "text")
    return f"{REPLY} You said: {said}" if isinstance(said, str) and said.strip() else REPLY


class ScriptedEngine:
    """An OpenAI-compatible engine on 127.0.0.1 that answers every request with `reply_to(messages)`."""

    def __init__(self, token_delay: float = 0.0) -> None:
        self.token_delay = token_delay
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def start(self) -> ScriptedEngine:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/completions", self._chat)
        app.router.add_post("/v1/embeddings", self._embeddings)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=1)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = self._runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        model = str(body.get("model", MODEL))
        messages = body.get("messages") or [{"role": "user", "content": body.get("prompt", "")}]
        text = reply_to(messages)
        words = text.split(" ")
        usage = {
            "prompt_tokens": sum(len(str(m.get("content", "")).split()) for m in messages),
            "completion_tokens": len(words),
        }
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        created = int(time.time())
        if not body.get("stream"):
            message = {"role": "assistant", "content": text}
            return web.json_response(
                {
                    "id": "chatcmpl-standin",
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                    "usage": usage,
                }
            )
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)

        async def send(choices: list[dict[str, Any]], **extra: Any) -> None:
            chunk = {
                "id": "chatcmpl-standin",
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": choices,
                **extra,
            }
            await resp.write(b"data: " + orjson.dumps(chunk) + b"\n\n")

        for i, word in enumerate(words):
            if i and self.token_delay:
                await asyncio.sleep(self.token_delay)  # a model's pace, so clients see a stream arrive
            delta = {"content": word if i == 0 else " " + word}
            if i == 0:
                delta["role"] = "assistant"
            await send([{"index": 0, "delta": delta, "finish_reason": None}])
        await send([{"index": 0, "delta": {}, "finish_reason": "stop"}])
        if (body.get("stream_options") or {}).get("include_usage"):
            await send([], usage=usage)
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _embeddings(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        inputs = body.get("input")
        count = len(inputs) if isinstance(inputs, list) else 1
        data = [{"object": "embedding", "index": i, "embedding": [0.0] * 8} for i in range(count)]
        usage = {"prompt_tokens": count, "total_tokens": count}
        return web.json_response({"object": "list", "data": data, "model": body.get("model", MODEL), "usage": usage})


def _cluster(model: str, engine_address: str, engine_port: int) -> Catalog:
    """The objects `make run` has once its Playground serves: an OpenModel, a Playground, a ready endpoint."""
    name = model
    informers = [FakeInformer() for _ in range(4)]
    playgrounds, services, open_models, slices = informers
    model_source = {"modelHub": {"modelID": f"stand-in/{model}"}}
    open_models.add(open_model(model, familyName="llama", source=model_source))
    playgrounds.add(playground(name, model, NAMESPACE))
    slice_ = endpoint_slice(
        f"{name}-lb-standin", f"{name}-lb", engine_port, (engine_address, True, None), namespace=NAMESPACE
    )
    slices.add(slice_)
    for informer in informers:
        informer.mark_synced()
    return Catalog(playgrounds, services, open_models, [slices])


@contextlib.asynccontextmanager
async def standin_gateway(
    port: int = 0, model: str = MODEL, token_delay: float = 0.0, engine: tuple[str, int] | None = None
) -> AsyncIterator[str]:
    """The gateway on 127.0.0.1:`port` (0: a free one) serving `model`; yields its base URL, ".../v1".

    `token_delay`: seconds between the streamed words of a reply. `engine`: (IPv4 address, port) of a real
    OpenAI-compatible engine to route `model` to instead of the scripted one."""
    scripted = None if engine else await ScriptedEngine(token_delay).start()
    try:
        address, engine_port = engine or ("127.0.0.1", scripted.port if scripted else 0)
        gateway = Gateway(
            _cluster(model, address, engine_port),
            GatewayOptions(bind_address=f"127.0.0.1:{port}", drain_timeout=1.0),
            metrics=GatewayMetrics(process_collectors=False),
        )
        stopping = asyncio.Event()
        task = asyncio.create_task(gateway.run(stopping))
        try:
            serving = asyncio.ensure_future(gateway.wait_serving())
            await asyncio.wait({serving, task}, timeout=WAIT, return_when=asyncio.FIRST_COMPLETED)
            if not serving.done():
                serving.cancel()
                if task.done():
                    task.result()  # the bind error
                raise TimeoutError(f"the gateway did not start serving in {WAIT} s")
            yield f"http://127.0.0.1:{gateway.port}/v1"
        finally:
            stopping.set()
            await asyncio.wait_for(task, WAIT)
    finally:
        if scripted is not None:
            await scripted.stop()


async def _serve(port: int, model: str, token_delay: float, engine: tuple[str, int] | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with standin_gateway(port, model, token_delay, engine) as url:
        sys.stdout.write(url + "\n")
        sys.stdout.flush()
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m llmaz_dev.testing.standin_gateway", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--port", type=int, default=8000, help="port on 127.0.0.1 (0: a free one); default 8000")
    parser.add_argument("--model", default=MODEL, help=f"the one model listed and served; default {MODEL}")
    parser.add_argument(
        "--token-delay", type=float, default=0.0, help="seconds between the streamed words of a reply; default 0"
    )
    parser.add_argument(
        "--engine",
        metavar="ADDRESS:PORT",
        help="route the model to this engine (e.g. a llama-server on loopback) instead of the scripted one",
    )
    args = parser.parse_args(argv)
    engine = None
    if args.engine:
        address, _, engine_port = args.engine.rpartition(":")
        if not address or not engine_port.isdigit():
            parser.error(f"--engine {args.engine}: expected ADDRESS:PORT with an IPv4 address")
        engine = (address, int(engine_port))
    log.configure("warning", "auto")
    try:
        asyncio.run(_serve(args.port, args.model, args.token_delay, engine))
    except OSError as e:
        sys.stderr.write(f"llmaz_dev.testing.standin_gateway: cannot serve on 127.0.0.1:{args.port}: {e}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
