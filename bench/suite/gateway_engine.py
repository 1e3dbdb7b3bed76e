"""The fast fake engine of the gateway benchmark: an OpenAI-compatible chat completion endpoint on 127.0.0.1 that
answers at once, run as its own process (`python bench/suite/gateway_engine.py --port P`).

- `POST /v1/chat/completions` with `"stream": true`: a server-sent event stream of STREAM_EVENTS small events
  (content deltas, a usage chunk, `data: [DONE]`), each written on its own as an engine writes tokens;
  otherwise one small JSON chat completion. The bodies are built once; the request body is parsed, as an engine
  parses it.
- With `"hold": true` as well (a field only this benchmark sends; the gateway forwards bodies byte for byte),
  the stream sends its first event and then waits, up to HOLD_SECONDS, for the client to go away: the open
  streams of the memory phase.
- `GET /healthz`: 200 once serving.

It runs with handler cancellation (as the gateway does), so a client that closes a held stream ends its handler.
"""

from __future__ import annotations

import argparse
import asyncio
import resource

import orjson
from aiohttp import web

MODEL = "bench-model"
HOLD_SECONDS = 600.0


def _event(document: object) -> bytes:
    return b"data: " + orjson.dumps(document) + b"\n\n"


def _chunk(choices: list[object], **extra: object) -> dict[str, object]:
    return {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1700000000, "model": MODEL,
            "choices": choices, **extra}  # fmt: skip


def _delta(content: str) -> dict[str, object]:
    return {"index": 0, "delta": {"content": content}, "finish_reason": None}


_USAGE = {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}
STREAM_EVENTS: tuple[bytes, ...] = (
    *(_event(_chunk([_delta(token)])) for token in ("Hello", " there", ",", " friend")),
    _event(_chunk([], usage=_USAGE)),
    b"data: [DONE]\n\n",
)
_ANSWER = {"index": 0, "message": {"role": "assistant", "content": "Hello there, friend"}, "finish_reason": "stop"}
_COMPLETION = {"id": "chatcmpl-bench", "object": "chat.completion", "created": 1700000000, "model": MODEL,
               "choices": [_ANSWER], "usage": _USAGE}  # fmt: skip
COMPLETION = orjson.dumps(_COMPLETION)


async def chat(request: web.Request) -> web.StreamResponse:
    document = orjson.loads(await request.read())
    if document.get("stream") is not True:
        return web.Response(body=COMPLETION, content_type="application/json")
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    if document.get("hold") is True:
        await resp.write(STREAM_EVENTS[0])
        await asyncio.sleep(HOLD_SECONDS)  # ended earlier by the client going away (handler cancellation)
        await resp.write_eof()
        return resp
    for event in STREAM_EVENTS:
        await resp.write(event)
    await resp.write_eof()
    return resp


async def healthz(_: web.Request) -> web.Response:
    return web.Response(text="ok")


def raise_open_files_limit() -> None:
    """Every open stream is a socket; take the hard limit of open files."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    raise_open_files_limit()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/healthz", healthz)
    web.run_app(app, host="127.0.0.1", port=args.port, access_log=None, handler_cancellation=True,
                shutdown_timeout=1, print=None)  # fmt: skip


if __name__ == "__main__":
    main()
