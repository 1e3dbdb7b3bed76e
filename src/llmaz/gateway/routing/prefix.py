"""The routing key of an inference request: its prompt cut into hashed blocks, and where it sits on the ring.

Engines cache the KV of prompt prefixes (vLLM's and SGLang's prefix caching): a request whose prompt starts like
one an engine has just seen is prefilled there for a fraction of the cost. The gateway has no tokenizer, so it
reads the prompt as text:

- chat (`messages`): each message in order, its role and the text of its `content` (a string, or a list of parts
  whose text parts count as text); other parts (images, audio) and an assistant's `tool_calls` count as a marker
  with their JSON, at most MAX_PART_CHARS of it. Completions: `prompt` (a string, or a list of strings or of token
  ids). Embeddings: `input`, the same shapes. Any other shape has no key (the request is routed by load only);
  nothing here raises on a body's shape.
- The text is cut into blocks of BLOCK_CHARS characters, and each block's hash covers it and every block before it
  (a chain), so one hash names a whole prefix: an endpoint holding block i's hash was sent this very prefix.
  The hash is blake2b (8 bytes), never Python's `hash`, which differs per process: gateway replicas must agree.
- Bounded: only the first MAX_BLOCKS blocks are read or hashed, and at most MAX_CHARS items of any list are looked
  at, so the time and memory a key costs do not grow with the prompt (the body's own size is bounded by the
  server).
- The ring key (where the request's home is looked for) is the session when the client names one (header
  `x-session-id`, else the body's OpenAI `user`), else the hash of the prompt's start up to the end of the first
  user message, at most RING_KEY_BLOCKS blocks: it is the same on every turn of a conversation, differs between
  short system prompts or first questions, and is shared by every request under one long system prompt.
- A request for a LoRA adapter is keyed in the adapter's scope: its block hashes and ring key start from the
  adapter's name. An engine's cache of a prompt computed under one adapter is no use under another or the base
  model (llama.cpp clears a slot's cache when its adapters change, vLLM keys its cached blocks by adapter), and
  a distinct home per adapter keeps an engine from switching adapters back and forth.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import islice
from typing import Any, Final

import orjson

SESSION_HEADER: Final = "x-session-id"
# 64 characters is about 16 tokens of English text (~4 characters a token), the size of vLLM's KV block: a block
# here maps to about one cached block there, so a match is counted at the engine's own granularity, and a short
# prompt still has a block or two to route by.
BLOCK_CHARS: Final = 64
# 256 blocks, 16,384 characters (~4,000 tokens): longer shared prefixes still route together (their first 4,000
# tokens match), and a key costs at most 256 small hashes whatever the prompt's size.
MAX_BLOCKS: Final = 256
MAX_CHARS: Final = BLOCK_CHARS * MAX_BLOCKS
# The ring key's prefix: up to 4 blocks (256 characters), enough to tell system prompts and first questions apart.
RING_KEY_BLOCKS: Final = 4
# What a non-text part (an image, audio, a tool call) contributes at most: its JSON's start. A part carrying a
# megabyte of base64 costs no more than a short one.
MAX_PART_CHARS: Final = 256
# Separators that cannot be confused with text: a role from its content, a message from the next.
_ROLE_END: Final = "\x1f"
_ITEM_END: Final = "\x1e"
_PART: Final = "\x1d"
_HASH_BYTES: Final = 8


def stable_hash(data: bytes, key: bytes = b"") -> int:
    """A 64-bit hash that is the same in every process and on every machine."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=_HASH_BYTES, key=key).digest(), "big")


@dataclass(frozen=True, slots=True)
class RoutingKey:
    blocks: tuple[int, ...]
    """The chain hashes of the prompt's blocks: `blocks[i]` covers blocks 0..i."""
    ring: int
    """Where the request's home is looked for on the ring (see the module docstring)."""


class _Text:
    """The prompt's text, gathered up to MAX_CHARS: nothing after that is read."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.size = 0
        self.anchor: int | None = None

    @property
    def full(self) -> bool:
        return self.size >= MAX_CHARS

    def add(self, text: str) -> None:
        if not self.full:
            piece = text[: MAX_CHARS - self.size]
            self.pieces.append(piece)
            self.size += len(piece)

    def mark_anchor(self) -> None:
        if self.anchor is None:
            self.anchor = self.size

    def text(self) -> str:
        return "".join(self.pieces)


def _part_json(value: Any) -> str:
    """A non-text part's marker: its JSON, cut to MAX_PART_CHARS (long strings are cut before encoding)."""
    try:
        return orjson.dumps(_cut(value, MAX_PART_CHARS, 0)).decode()[:MAX_PART_CHARS]
    except TypeError:
        return ""


def _cut(value: Any, limit: int, depth: int) -> Any:
    """`value` with every string cut to `limit` characters and every list or object to its first items, so its
    JSON costs a bounded time to make."""
    if depth > 4:
        return None
    if isinstance(value, str):
        return value[:limit]
    if isinstance(value, Mapping):
        return {str(k): _cut(v, limit, depth + 1) for k, v in islice(value.items(), 8)}
    if isinstance(value, list):
        return [_cut(v, limit, depth + 1) for v in value[:8]]
    return value


def _add_content(text: _Text, content: Any) -> None:
    if isinstance(content, str):
        text.add(content)
    elif isinstance(content, list):
        for part in islice(content, MAX_CHARS):
            if text.full:
                return
            if isinstance(part, Mapping) and part.get("type") == "text" and isinstance(part.get("text"), str):
                text.add(part["text"])
            elif isinstance(part, str):
                text.add(part)
            else:
                text.add(_PART + _part_json(part) + _PART)


def _add_messages(text: _Text, messages: list[Any]) -> None:
    for message in islice(messages, MAX_CHARS):
        if text.full:
            return
        if not isinstance(message, Mapping):
            continue
        role = message.get("role")
        text.add((role if isinstance(role, str) else "") + _ROLE_END)
        _add_content(text, message.get("content"))
        for extra in ("tool_calls", "tool_call_id", "name"):
            if extra in message and message[extra] is not None:
                text.add(_PART + _part_json({extra: message[extra]}) + _PART)
        text.add(_ITEM_END)
        if role == "user":
            text.mark_anchor()


def _add_prompt(text: _Text, prompt: Any) -> None:
    """A prompt or an input: a string, token ids, or a list of either (a batch)."""
    if isinstance(prompt, str):
        text.add(prompt)
        return
    if not isinstance(prompt, list):
        return
    for item in islice(prompt, MAX_CHARS):
        if text.full:
            return
        if isinstance(item, str):
            text.add(item)
        elif isinstance(item, int) and not isinstance(item, bool):
            text.add(f"{item} ")
        elif isinstance(item, list):
            text.add(" ".join(str(t) for t in _ints(item, MAX_CHARS - text.size)))
        text.add(_ITEM_END)


def _ints(items: Iterable[Any], limit: int) -> Iterator[int]:
    """The token ids of a list, at most `limit` of them (each takes at least one character)."""
    for item in islice(items, limit):
        if isinstance(item, int) and not isinstance(item, bool):
            yield item


def session_of(document: Mapping[str, Any], header: str | None) -> str | None:
    """The session a request names: `header` (`x-session-id`) when given, else the body's OpenAI `user`."""
    if header:
        return header
    user = document.get("user")
    return user if isinstance(user, str) and user else None


def routing_key(
    document: Mapping[str, Any], session_header: str | None = None, adapter: str | None = None
) -> RoutingKey | None:
    """The routing key of a parsed request body, in `adapter`'s scope when it names one (see the module
    docstring); None when it has no prompt."""
    text = _Text()
    messages, prompt, input_ = document.get("messages"), document.get("prompt"), document.get("input")
    if isinstance(messages, list):
        _add_messages(text, messages)
    elif prompt is not None:
        _add_prompt(text, prompt)
    elif input_ is not None:
        _add_prompt(text, input_)
    whole = text.text()
    session = session_of(document, session_header)
    if not whole and session is None:
        return None
    # One running hash over the text: its digest after block i is the hash of blocks 0..i (a digest does not end
    # the hash), so a chain costs one pass over the text.
    scope = b"" if adapter is None else b"adapter\x00" + adapter.encode("utf-8", "surrogatepass") + b"\x00"
    running = hashlib.blake2b(scope, digest_size=_HASH_BYTES)
    blocks: list[int] = []
    for start in range(0, len(whole), BLOCK_CHARS):
        running.update(whole[start : start + BLOCK_CHARS].encode("utf-8", "surrogatepass"))
        blocks.append(int.from_bytes(running.digest(), "big"))
    if session is not None:
        ring = stable_hash(scope + b"session\x00" + session.encode("utf-8", "surrogatepass"))
    else:
        anchor = text.anchor if text.anchor is not None else len(whole)
        start_text = whole[: min(anchor, RING_KEY_BLOCKS * BLOCK_CHARS)]
        ring = stable_hash(scope + b"prompt\x00" + start_text.encode("utf-8", "surrogatepass"))
    return RoutingKey(tuple(blocks), ring)
