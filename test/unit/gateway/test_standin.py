"""llmaz_dev.testing.standin_gateway: the real gateway over in-memory objects answers as OpenAI clients expect.

`make test-webui WEBUI_STANDIN=true` points Open WebUI at it; these keep it answering what Open WebUI asks: the model
list, a chat completion and a streamed one (with usage when asked).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import aiohttp
import orjson
import pytest

import llmaz
from llmaz_dev.testing.standin_gateway import MODEL, REPLY, reply_to, standin_gateway

from .support import WAIT


async def test_lists_its_model_and_answers_a_chat_completion() -> None:
    async with (
        standin_gateway() as url,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT)) as session,
    ):
        async with session.get(f"{url}/models") as resp:
            assert resp.status == 200
            assert [m["id"] for m in (await resp.json())["data"]] == [MODEL]
        body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi there"}]}
        async with session.post(f"{url}/chat/completions", json=body) as resp:
            assert resp.status == 200
            answer = await resp.json()
    assert answer["object"] == "chat.completion"
    assert answer["choices"][0]["message"] == {"role": "assistant", "content": f"{REPLY} You said: Hi there"}
    usage = answer["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0


@pytest.mark.parametrize("include_usage", [False, True])
async def test_streams_the_reply_as_openai_chunks_through_the_gateway(include_usage: bool) -> None:
    body = {
        "model": MODEL,
        "stream": True,
        "stream_options": {"include_usage": include_usage},
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}],
    }
    async with (
        standin_gateway(token_delay=0.001) as url,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT)) as session,
        session.post(f"{url}/chat/completions", json=body) as resp,
    ):
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        raw = (await resp.read()).decode()
    events = [e.removeprefix("data: ") for e in raw.split("\n\n") if e]
    assert events[-1] == "[DONE]"
    chunks = [orjson.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == MODEL for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == f"{REPLY} You said: Hello"
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    finished = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finished[-1] == "stop"
    assert set(finished[:-1]) == {None}
    usage = [c["usage"] for c in chunks if not c["choices"]]
    assert len(usage) == int(include_usage)


def test_quotes_the_last_user_message_back() -> None:
    assert reply_to([]) == REPLY
    assert reply_to([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]) == (
        f"{REPLY} You said: a"
    )
    parts = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "x"}}]
    assert reply_to([{"role": "user", "content": parts}]) == f"{REPLY} You said: look"


def test_cli_fails_in_one_line_when_the_port_is_taken() -> None:
    # A process of its own: the CLI configures logging for the whole process.
    env = {**os.environ, "PYTHONPATH": str(Path(llmaz.__file__).parents[1])}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "llmaz_dev.testing.standin_gateway", "--port", str(port)],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=WAIT * 3,
            check=False,
        )
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.startswith(f"llmaz_dev.testing.standin_gateway: cannot serve on 127.0.0.1:{port}: ")
    assert done.stderr.count("\n") == 1
