"""Token usage read from relayed responses, for the token counters, without holding up or changing the relay.

- A JSON response (non-streaming) is copied aside as it is relayed, up to MAX_JSON_BYTES (completions are
  small; a huge embeddings answer is not worth parsing), and its `usage` read at the end.
- An SSE stream (`text/event-stream`) is scanned line by line as it passes; only `data:` lines mentioning
  `"usage"` are decoded, and the last non-null `usage` object wins: OpenAI sends it in a final chunk when the
  request asks `stream_options.include_usage`, and some engines (llama.cpp) put it in their last chunk anyway.
- A compressed body, or any other content type, is not inspected.
A `usage` counts only when `prompt_tokens` and `completion_tokens` are non-negative integers (embeddings
report no completion tokens: 0). The prompt's cached tokens (`prompt_tokens_details.cached_tokens`, vLLM's and
OpenAI's) are read when they are a non-negative integer, else not known. The Responses API names the counts
`input_tokens` and `output_tokens`, and streams its `usage` inside the `response` of its last event
(`response.completed`): both are read the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import orjson

MAX_JSON_BYTES = 1024 * 1024
# A longer SSE line is not a usage chunk; holding more of it would only cost memory.
MAX_SSE_LINE_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None = None
    """The prompt tokens the engine found in its prefix cache, when it says."""


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def usage_of(document: Any) -> Usage | None:
    if not isinstance(document, dict):
        return None
    usage = document.get("usage")
    if usage is None and isinstance(response := document.get("response"), dict):
        usage = response.get("usage")  # a Responses API event
    if not isinstance(usage, dict):
        return None
    prompt = _count(usage.get("prompt_tokens", usage.get("input_tokens")))
    completion = _count(usage.get("completion_tokens", usage.get("output_tokens", 0)))
    if prompt is None or completion is None:
        return None
    details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else None
    return Usage(prompt, completion, cached)


class UsageMeter(Protocol):
    def feed(self, chunk: bytes) -> None: ...

    def result(self) -> Usage | None: ...


class NoUsage:
    def feed(self, chunk: bytes) -> None:
        pass

    def result(self) -> Usage | None:
        return None


class JsonUsage:
    def __init__(self) -> None:
        self._chunks: list[bytes] = []
        self._size = 0

    def feed(self, chunk: bytes) -> None:
        if self._size <= MAX_JSON_BYTES:
            self._chunks.append(chunk)
            self._size += len(chunk)

    def result(self) -> Usage | None:
        if self._size > MAX_JSON_BYTES:
            return None
        try:
            return usage_of(orjson.loads(b"".join(self._chunks)))
        except orjson.JSONDecodeError:
            return None


class SseUsage:
    def __init__(self) -> None:
        self._partial = b""
        self._skipping = False  # inside an overlong line, whose rest is dropped up to its newline
        self._usage: Usage | None = None

    def feed(self, chunk: bytes) -> None:
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            if self._skipping:
                self._skipping = False
            else:
                self._line(line)
        if len(self._partial) > MAX_SSE_LINE_BYTES:
            self._partial = b""
            self._skipping = True

    def _line(self, line: bytes) -> None:
        line = line.rstrip(b"\r")
        if not line.startswith(b"data:") or b'"usage"' not in line:
            return
        try:
            found = usage_of(orjson.loads(line[5:]))
        except orjson.JSONDecodeError:
            return
        if found is not None:
            self._usage = found

    def result(self) -> Usage | None:
        if self._partial and not self._skipping:
            self._line(self._partial)
            self._partial = b""
        return self._usage


def meter_for(content_type: str, content_encoding: str) -> UsageMeter:
    if content_encoding.strip().lower() not in ("", "identity"):
        return NoUsage()
    media = content_type.split(";", 1)[0].strip().lower()
    if media == "text/event-stream":
        return SseUsage()
    if media == "application/json":
        return JsonUsage()
    return NoUsage()
