"""The routing key of a request: its prompt's text from every body shape, hashed in bounded chained blocks, and a
ring key that is the same on every turn of a conversation."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from llmaz.gateway.routing.prefix import (
    BLOCK_CHARS,
    MAX_BLOCKS,
    MAX_CHARS,
    RoutingKey,
    routing_key,
    stable_hash,
)

SYSTEM = {"role": "system", "content": "You are a careful assistant for the accounts team. " * 4}


def key(document: dict[str, Any], session: str | None = None) -> RoutingKey:
    found = routing_key(document, session)
    assert found is not None
    return found


def chat(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": list(messages), **extra}


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


@pytest.mark.parametrize(
    "document",
    [
        {"model": "m"},
        chat(),
        {"model": "m", "messages": "hello"},  # not a list: not a chat
        {"model": "m", "messages": [1, None, "x", []]},  # no message is an object: no text
        {"model": "m", "prompt": None},
        {"model": "m", "prompt": {"text": "hi"}},
        {"model": "m", "input": 3.5},
        {"model": "m", "prompt": [], "user": ""},
    ],
)
def test_bodies_without_a_prompt_or_session_have_no_key(document: dict[str, Any]) -> None:
    assert routing_key(document) is None


@pytest.mark.parametrize(
    ("document", "text_blocks"),
    [
        (chat(user("hi")), 1),
        (chat(SYSTEM, user("hi")), 4),
        ({"model": "m", "prompt": "Once upon a time"}, 1),
        ({"model": "m", "prompt": ["Once", "upon"]}, 1),
        ({"model": "m", "prompt": [101, 2023, 2003]}, 1),
        ({"model": "m", "prompt": [[101, 2023], [101, 7592]]}, 1),
        ({"model": "m", "input": "embed this " * 20}, 4),
        ({"model": "m", "input": ["a", "b"]}, 1),
        (chat({"role": "user"}), 1),  # no content: its role still counts
        (chat({"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function"}]}), 1),
    ],
)
def test_every_body_shape_has_a_key_of_whole_blocks(document: dict[str, Any], text_blocks: int) -> None:
    found = key(document)
    assert len(found.blocks) == text_blocks
    assert key(document) == found  # the same body, the same key


def test_text_parts_read_as_the_same_text_as_a_string_and_other_parts_as_markers() -> None:
    plain = key(chat(user("Describe the picture, please.")))
    parts = key(chat(user([{"type": "text", "text": "Describe the picture, "}, {"type": "text", "text": "please."}])))
    assert parts == plain
    cat = {"type": "image_url", "image_url": {"url": "https://img.example/cat.png"}}
    dog = {"type": "image_url", "image_url": {"url": "https://img.example/dog.png"}}
    with_cat = key(chat(user([{"type": "text", "text": "Describe the picture, please."}, cat])))
    with_dog = key(chat(user([{"type": "text", "text": "Describe the picture, please."}, dog])))
    assert with_cat.blocks != plain.blocks
    assert with_cat.blocks != with_dog.blocks


def test_a_huge_image_costs_no_more_than_its_marker() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 5_000_000}}
    small = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 1_000}}
    assert key(chat(user([image]))) == key(chat(user([small])))  # both cut to their first MAX_PART_CHARS
    assert len(key(chat(user([image]))).blocks) <= 6


def test_tool_calls_and_tool_results_are_part_of_the_prompt() -> None:
    call = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "function": {"name": "get_weather"}}]}
    other = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "function": {"name": "get_time"}}]}
    result = {"role": "tool", "tool_call_id": "c1", "content": "21C"}
    first, second = key(chat(user("weather?"), call, result)), key(chat(user("weather?"), other, result))
    assert first.blocks != second.blocks
    assert first.ring == second.ring  # the conversation started the same way


def test_blocks_are_chained_so_a_shared_start_shares_hashes_and_nothing_after_a_difference_does() -> None:
    common = "x" * (3 * BLOCK_CHARS)
    one = key({"model": "m", "prompt": common + "a" * BLOCK_CHARS + common})
    two = key({"model": "m", "prompt": common + "b" * BLOCK_CHARS + common})
    assert one.blocks[:3] == two.blocks[:3]
    assert all(a != b for a, b in zip(one.blocks[3:], two.blocks[3:], strict=True))
    repeated = key({"model": "m", "prompt": "y" * (2 * BLOCK_CHARS)})
    assert repeated.blocks[0] != repeated.blocks[1]  # the same text at another place is another prefix


def test_a_huge_prompt_is_read_only_up_to_max_blocks() -> None:
    # How long these take is a benchmark's reading (make bench-picker: the worst inputs), not this test's.
    huge = "lorem ipsum dolor sit amet " * 400_000  # ~10 MB, the largest body the server takes
    found = key({"model": "m", "prompt": huge})
    many_messages = key(chat(*[user("hi")] * 1_000_000))
    many_parts = key(chat(user([{"type": "image_url"}] * 1_000_000)))
    many_tokens = key({"model": "m", "prompt": [[1] * 3_000_000]})
    assert found == key({"model": "m", "prompt": huge[:MAX_CHARS]})
    for bounded in (found, many_messages, many_parts, many_tokens):
        assert len(bounded.blocks) == MAX_BLOCKS


def test_the_ring_key_is_the_same_on_every_turn_of_a_conversation_and_differs_between_conversations() -> None:
    first_turn = key(chat(SYSTEM, user("What is our refund policy?")))
    third_turn = key(
        chat(
            SYSTEM,
            user("What is our refund policy?"),
            {"role": "assistant", "content": "Thirty days."},
            user("And for services?"),
        )
    )
    assert third_turn.ring == first_turn.ring
    assert third_turn.blocks[: len(first_turn.blocks) - 1] == first_turn.blocks[:-1]
    assert key(chat(SYSTEM, user("Where is the office?"))).ring != first_turn.ring
    assert key(chat(user("What is our refund policy?"))).ring != first_turn.ring


def test_the_session_header_wins_over_the_user_field_and_either_sets_the_ring_key() -> None:
    one = key(chat(user("a question"), user="alice"))
    two = key(chat(user("another question entirely"), user="alice"))
    assert one.ring == two.ring
    assert one.blocks != two.blocks
    assert key(chat(user("a question"), user="bob")).ring != one.ring
    header = key(chat(user("a question"), user="alice"), session="s-1")
    assert header.ring == key(chat(user("other"), user="carol"), session="s-1").ring != one.ring
    assert key({"model": "m", "user": "alice"}) == RoutingKey((), one.ring)  # a session alone still has a home


def test_hashes_are_the_same_in_another_process_whatever_its_hash_seed() -> None:
    document = chat(SYSTEM, user("stable?"))
    code = (
        "from llmaz.gateway.routing.prefix import routing_key, stable_hash\n"
        f"k = routing_key({document!r})\n"
        "print(k.ring, *k.blocks, stable_hash(b'x'))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    here = key(document)
    assert out.split() == [str(n) for n in (here.ring, *here.blocks, stable_hash(b"x"))]
