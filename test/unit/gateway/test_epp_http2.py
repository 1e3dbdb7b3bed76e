"""The endpoint picker's own gRPC transport (`llmaz.gateway.epp.http2`) at the frame level, and its health service.

A raw client on a loopback socket writes HTTP/2 frames by hand and reads the server's back, for what a gRPC client
never sends: header blocks split or padded, flow control at a window's edge, resets, connections that are not
HTTP/2 or break its rules, a drain; and the gRPC edges: unknown methods, requests that are not gRPC, compressed or
oversized messages. The health service (`llmaz.gateway.epp.health`) is driven by a real grpc.aio client.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar
from urllib.parse import unquote

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hpack import Decoder, Encoder

from llmaz.gateway.epp.health import NOT_SERVING, SERVICE_UNKNOWN, SERVING, Health
from llmaz.gateway.epp.http2 import (
    CONNECTION_WINDOW,
    PREFACE,
    RECEIVE_FRAME_SIZE,
    STREAM_WINDOW,
    Call,
    CallHandler,
    ErrorCode,
    FrameType,
    Http2Server,
    Method,
    Status,
)

WAIT: Final = 5.0
QUIET: Final = 0.2
"""How long a check that nothing arrives waits for a frame."""

ECHO: Final = "/test.Echo/Echo"
HOLD: Final = "/test.Hold/Hold"
REPLY: Final = "/test.Reply/Reply"

# RFC 9113's frame flags and setting identifiers.
END_STREAM: Final = 0x1
ACK: Final = 0x1
END_HEADERS: Final = 0x4
PADDED: Final = 0x8
PRIORITY: Final = 0x20
INITIAL_WINDOW_SIZE: Final = 0x4
MAX_FRAME_SIZE: Final = 0x5
DEFAULT_WINDOW: Final = 65_535
DEFAULT_FRAME_SIZE: Final = 16_384


@dataclass(frozen=True)
class Frame:
    kind: int
    flags: int
    stream_id: int
    payload: bytes


def settings_payload(settings: Mapping[int, int]) -> bytes:
    """A SETTINGS frame's payload."""
    return b"".join(key.to_bytes(2, "big") + value.to_bytes(4, "big") for key, value in settings.items())


def parse_settings(payload: bytes) -> dict[int, int]:
    """A SETTINGS frame's settings, by identifier."""
    return {
        int.from_bytes(payload[offset : offset + 2], "big"): int.from_bytes(payload[offset + 2 : offset + 6], "big")
        for offset in range(0, len(payload), 6)
    }


def grpc_message(message: bytes) -> bytes:
    """`message` length-prefixed, uncompressed, as gRPC frames it."""
    return b"\x00" + len(message).to_bytes(4, "big") + message


def increment(size: int) -> bytes:
    """A WINDOW_UPDATE's payload."""
    return size.to_bytes(4, "big")


def goaway(frame: Frame) -> tuple[int, ErrorCode]:
    """A GOAWAY's last stream id and error code."""
    assert frame.kind == FrameType.GOAWAY
    last = int.from_bytes(frame.payload[:4], "big") & 0x7FFF_FFFF
    return last, ErrorCode(int.from_bytes(frame.payload[4:8], "big"))


def on_stream(frames: Iterable[Frame], stream_id: int) -> list[Frame]:
    return [frame for frame in frames if frame.stream_id == stream_id]


def ends(stream_id: int) -> Callable[[Frame], bool]:
    """Whether a frame ends the server's side of `stream_id`."""
    return lambda frame: frame.stream_id == stream_id and bool(frame.flags & END_STREAM)


def is_ping_ack(frame: Frame) -> bool:
    return frame.kind == FrameType.PING and bool(frame.flags & ACK)


@dataclass
class RawClient:
    """An HTTP/2 client at the frame level: frames written as given, frames read as they come."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    encoder: Encoder = field(default_factory=Encoder)
    decoder: Decoder = field(default_factory=Decoder)
    opening: list[Frame] = field(default_factory=list)
    """What the server sent up to its acknowledgement of the client's first SETTINGS."""

    def send_frame(self, kind: int, flags: int, stream_id: int, payload: bytes = b"") -> None:
        header = len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream_id.to_bytes(4, "big")
        self.writer.write(header + payload)

    async def read_frame(self, within: float = WAIT) -> Frame:
        """The next frame: TimeoutError if none comes `within` seconds, IncompleteReadError once the server closed."""
        return await asyncio.wait_for(self._next_frame(), within)

    async def _next_frame(self) -> Frame:
        header = await self.reader.readexactly(9)
        payload = await self.reader.readexactly(int.from_bytes(header[:3], "big"))
        stream_id = int.from_bytes(header[5:9], "big") & 0x7FFF_FFFF
        return Frame(header[3], header[4], stream_id, payload)

    async def frame_within(self, within: float = QUIET) -> Frame | None:
        """The frame that comes `within` seconds, if any."""
        try:
            return await self.read_frame(within)
        except TimeoutError:
            return None

    async def read_until(self, done: Callable[[Frame], bool]) -> list[Frame]:
        """The frames up to the first that is `done`, that one included."""
        frames: list[Frame] = []
        while True:
            frame = await self.read_frame()
            frames.append(frame)
            if done(frame):
                return frames

    async def read_to_end(self) -> list[Frame]:
        """The frames up to the server's end of the connection."""
        frames: list[Frame] = []
        while True:
            try:
                frames.append(await self.read_frame())
            except (asyncio.IncompleteReadError, ConnectionResetError):
                return frames

    async def barrier(self) -> list[Frame]:
        """The frames the server sends before it answers a PING sent now (its answer left out)."""
        self.send_frame(FrameType.PING, 0, 0, b"barrier!")
        frames = await self.read_until(is_ping_ack)
        assert frames[-1].payload == b"barrier!"
        return frames[:-1]

    def headers(self, path: str, *, method: str = "POST", content_type: str = "application/grpc") -> bytes:
        """A request's header block."""
        return self.encoder.encode(
            [
                (":method", method),
                (":scheme", "http"),
                (":path", path),
                (":authority", "127.0.0.1"),
                ("content-type", content_type),
                ("te", "trailers"),
            ]
        )

    def decode(self, block: bytes) -> dict[str, str]:
        """A header block the server sent, as text."""
        return {bytes(name).decode(): bytes(value).decode() for name, value in self.decoder.decode(block, raw=True)}

    def call(self, stream_id: int, path: str, *messages: bytes, half_close: bool = True) -> None:
        """Open `stream_id` for `path` and send `messages` in one DATA frame (ending the client's side, unless not)."""
        self.send_frame(FrameType.HEADERS, END_HEADERS, stream_id, self.headers(path))
        body = b"".join(grpc_message(message) for message in messages)
        self.send_frame(FrameType.DATA, END_STREAM if half_close else 0, stream_id, body)

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


async def connect(port: int, settings: Mapping[int, int] | None = None) -> RawClient:
    """A client past the connection preface and its first SETTINGS (`settings`), acknowledged."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    client = RawClient(reader, writer)
    writer.write(PREFACE)
    client.send_frame(FrameType.SETTINGS, 0, 0, settings_payload(settings or {}))
    client.opening = await client.read_until(lambda frame: frame.kind == FrameType.SETTINGS and bool(frame.flags & ACK))
    return client


@contextlib.asynccontextmanager
async def talking(
    methods: Mapping[str, Method], *, settings: Mapping[int, int] | None = None, max_message_bytes: int = 1 << 20
) -> AsyncIterator[tuple[Http2Server, RawClient]]:
    """A server of `methods` on loopback and a raw client connected to it."""
    server = Http2Server(methods, max_message_bytes=max_message_bytes)
    port = await server.start("127.0.0.1", 0)
    try:
        client = await connect(port, settings)
        try:
            yield server, client
        finally:
            await client.close()
    finally:
        await server.stop(0)


class Echo:
    """Sends each message back; ends OK on the client's half-close."""

    def __init__(self, call: Call) -> None:
        self.call = call
        self.messages: list[bytes] = []
        self.half_closed = asyncio.Event()
        self.cancelled = asyncio.Event()

    def on_message(self, message: bytes) -> None:
        self.messages.append(message)
        self.call.send(message)

    def on_half_close(self) -> None:
        self.half_closed.set()
        self.call.finish()

    def on_cancel(self) -> None:
        self.cancelled.set()


class Hold(Echo):
    """Keeps each message and answers nothing: the test ends the call."""

    def on_message(self, message: bytes) -> None:
        self.messages.append(message)

    def on_half_close(self) -> None:
        self.half_closed.set()


class Reply(Echo):
    """Answers the first message with one of `size` bytes and ends OK."""

    size = 0

    def on_message(self, message: bytes) -> None:
        self.messages.append(message)
        self.call.send(b"r" * self.size)
        self.call.finish()


def replying(size: int) -> type[Reply]:
    return type(f"Reply{size}", (Reply,), {"size": size})


H = TypeVar("H", bound=CallHandler)


def recorded(make: Callable[[Call], H], into: list[H]) -> Method:
    """A method whose handlers `make` builds, each kept in `into`."""

    def method(call: Call) -> H:
        handler = make(call)
        into.append(handler)
        return handler

    return method


async def test_a_unary_call_gets_200_grpc_headers_its_echoed_message_and_ok_trailers() -> None:
    async with talking({ECHO: Echo}) as (_, client):
        client.call(1, ECHO, b"hello")
        frames = await client.read_until(ends(1))
    answer = on_stream(frames, 1)
    assert [frame.kind for frame in answer] == [FrameType.HEADERS, FrameType.DATA, FrameType.HEADERS]
    assert client.decode(answer[0].payload) == {":status": "200", "content-type": "application/grpc"}
    assert not answer[0].flags & END_STREAM
    assert answer[1].payload == grpc_message(b"hello")
    assert client.decode(answer[2].payload) == {"grpc-status": "0"}
    assert answer[2].flags & END_STREAM


async def test_a_message_split_across_data_frames_and_two_in_one_frame_get_each_echoed_whole() -> None:
    async with talking({ECHO: Echo}) as (_, client):
        first, second, third = grpc_message(b"split in two"), grpc_message(b"two"), grpc_message(b"in one")
        client.send_frame(FrameType.HEADERS, END_HEADERS, 1, client.headers(ECHO))
        client.send_frame(FrameType.DATA, 0, 1, first[:7])
        client.send_frame(FrameType.DATA, 0, 1, first[7:])
        client.send_frame(FrameType.DATA, END_STREAM, 1, second + third)
        frames = await client.read_until(ends(1))
    data = b"".join(frame.payload for frame in on_stream(frames, 1) if frame.kind == FrameType.DATA)
    assert data == first + second + third


async def test_an_unknown_path_gets_a_trailers_only_unimplemented_naming_the_path() -> None:
    async with talking({ECHO: Echo}) as (_, client):
        client.call(1, "/test.Missing/Nope", b"hello")
        frames = on_stream(await client.read_until(ends(1)), 1)
    assert len(frames) == 1
    assert frames[0].kind == FrameType.HEADERS
    assert frames[0].flags & END_HEADERS
    fields = client.decode(frames[0].payload)
    assert fields[":status"] == "200"
    assert fields["content-type"] == "application/grpc"
    assert fields["grpc-status"] == str(Status.UNIMPLEMENTED) == "12"
    assert "/test.Missing/Nope" in unquote(fields["grpc-message"])


@pytest.mark.parametrize(("method", "content_type"), [("POST", "application/json"), ("GET", "application/grpc")])
async def test_a_request_that_is_not_grpc_gets_415_and_its_stream_ended(method: str, content_type: str) -> None:
    made: list[Echo] = []
    async with talking({ECHO: recorded(Echo, made)}) as (_, client):
        block = client.headers(ECHO, method=method, content_type=content_type)
        client.send_frame(FrameType.HEADERS, END_HEADERS | END_STREAM, 1, block)
        frames = on_stream(await client.read_until(ends(1)), 1)
    assert len(frames) == 1
    assert frames[0].kind == FrameType.HEADERS
    assert client.decode(frames[0].payload) == {":status": "415"}
    assert made == []


async def test_a_compressed_message_gets_unimplemented_and_the_handler_cancelled() -> None:
    made: list[Hold] = []
    async with talking({HOLD: recorded(Hold, made)}) as (_, client):
        client.send_frame(FrameType.HEADERS, END_HEADERS, 1, client.headers(HOLD))
        client.send_frame(FrameType.DATA, 0, 1, b"\x01" + (4).to_bytes(4, "big") + b"gzip")
        frames = on_stream(await client.read_until(ends(1)), 1)
        await asyncio.wait_for(made[0].cancelled.wait(), WAIT)
    assert [frame.kind for frame in frames] == [FrameType.HEADERS]
    assert client.decode(frames[0].payload)["grpc-status"] == "12"
    assert made[0].messages == []


async def test_a_message_declared_over_the_bound_gets_resource_exhausted_before_its_body_and_a_cancel() -> None:
    made: list[Hold] = []
    async with talking({HOLD: recorded(Hold, made)}, max_message_bytes=100) as (_, client):
        client.send_frame(FrameType.HEADERS, END_HEADERS, 1, client.headers(HOLD))
        client.send_frame(FrameType.DATA, 0, 1, b"\x00" + (101).to_bytes(4, "big"))
        frames = on_stream(await client.read_until(ends(1)), 1)
        await asyncio.wait_for(made[0].cancelled.wait(), WAIT)
    assert [frame.kind for frame in frames] == [FrameType.HEADERS]
    fields = client.decode(frames[0].payload)
    assert fields["grpc-status"] == str(Status.RESOURCE_EXHAUSTED) == "8"
    assert "101" in unquote(fields["grpc-message"])
    assert made[0].messages == []


async def test_a_message_at_the_bound_is_accepted() -> None:
    async with talking({ECHO: Echo}, max_message_bytes=100) as (_, client):
        client.call(1, ECHO, b"m" * 100)
        frames = on_stream(await client.read_until(ends(1)), 1)
    assert frames[1].payload == grpc_message(b"m" * 100)
    assert client.decode(frames[2].payload) == {"grpc-status": "0"}


async def test_a_stream_ended_inside_a_message_gets_internal_and_the_handler_cancelled() -> None:
    made: list[Hold] = []
    async with talking({HOLD: recorded(Hold, made)}) as (_, client):
        client.send_frame(FrameType.HEADERS, END_HEADERS, 1, client.headers(HOLD))
        client.send_frame(FrameType.DATA, END_STREAM, 1, grpc_message(b"cut short")[:8])
        frames = on_stream(await client.read_until(ends(1)), 1)
        await asyncio.wait_for(made[0].cancelled.wait(), WAIT)
    assert client.decode(frames[0].payload)["grpc-status"] == str(Status.INTERNAL)
    assert not made[0].half_closed.is_set()


async def test_a_header_block_split_into_headers_and_continuations_gets_decoded_with_its_first_frames_flags() -> None:
    made: list[Echo] = []
    async with talking({ECHO: recorded(Echo, made)}) as (_, client):
        block = client.headers(ECHO)
        client.send_frame(FrameType.HEADERS, 0, 1, block[:5])
        client.send_frame(FrameType.CONTINUATION, 0, 1, block[5:10])
        client.send_frame(FrameType.CONTINUATION, END_HEADERS, 1, block[10:])
        client.send_frame(FrameType.DATA, END_STREAM, 1, grpc_message(b"continued"))
        first = on_stream(await client.read_until(ends(1)), 1)
        # END_STREAM on the HEADERS frame: a call without messages, half-closed once its block ends.
        block = client.headers(ECHO)
        client.send_frame(FrameType.HEADERS, END_STREAM, 3, block[:4])
        client.send_frame(FrameType.CONTINUATION, END_HEADERS, 3, block[4:])
        second = on_stream(await client.read_until(ends(3)), 3)
    assert first[1].payload == grpc_message(b"continued")
    assert client.decode(first[2].payload) == {"grpc-status": "0"}
    assert made[0].messages == [b"continued"]
    assert made[1].half_closed.is_set()
    assert [frame.kind for frame in second] == [FrameType.HEADERS]
    assert client.decode(second[0].payload)["grpc-status"] == "0"


async def test_a_header_block_cut_by_another_frame_gets_a_protocol_error_goaway() -> None:
    async with talking({ECHO: Echo}) as (_, client):
        block = client.headers(ECHO)
        client.send_frame(FrameType.HEADERS, 0, 1, block[:5])
        client.send_frame(FrameType.PING, 0, 0, b"12345678")
        frames = await client.read_to_end()
    assert [frame.kind for frame in frames] == [FrameType.GOAWAY]
    assert goaway(frames[0])[1] is ErrorCode.PROTOCOL_ERROR


async def test_a_padded_and_prioritised_headers_frame_and_a_padded_data_frame_are_understood() -> None:
    made: list[Echo] = []
    async with talking({ECHO: recorded(Echo, made)}) as (_, client):
        priority = (3).to_bytes(4, "big") + bytes((200,))
        client.send_frame(
            FrameType.HEADERS,
            END_HEADERS | PADDED | PRIORITY,
            1,
            bytes((7,)) + priority + client.headers(ECHO) + b"\x00" * 7,
        )
        client.send_frame(FrameType.DATA, END_STREAM | PADDED, 1, bytes((5,)) + grpc_message(b"padded") + b"\x00" * 5)
        first = on_stream(await client.read_until(ends(1)), 1)
        client.send_frame(FrameType.HEADERS, END_HEADERS | PRIORITY, 3, priority + client.headers(ECHO))
        client.send_frame(FrameType.DATA, END_STREAM | PADDED, 3, bytes((0,)) + grpc_message(b"unpadded"))
        second = on_stream(await client.read_until(ends(3)), 3)
    assert [handler.messages for handler in made] == [[b"padded"], [b"unpadded"]]
    assert first[1].payload == grpc_message(b"padded")
    assert second[1].payload == grpc_message(b"unpadded")
    assert client.decode(first[2].payload) == client.decode(second[2].payload) == {"grpc-status": "0"}


async def test_a_data_frame_whose_padding_is_as_long_as_the_frame_gets_a_protocol_error_goaway() -> None:
    async with talking({ECHO: Echo}) as (_, client):
        client.send_frame(FrameType.HEADERS, END_HEADERS, 1, client.headers(ECHO))
        client.send_frame(FrameType.DATA, PADDED, 1, bytes((4,)) + b"\x00" * 3)
        frames = await client.read_to_end()
    assert goaway(frames[-1]) == (1, ErrorCode.PROTOCOL_ERROR)


async def test_a_ping_gets_a_ping_ack_with_the_same_payload() -> None:
    async with talking({}) as (_, client):
        client.send_frame(FrameType.PING, 0, 0, b"\x01\x02\x03\x04\x05\x06\x07\x08")
        frame = await client.read_frame()
        client.send_frame(FrameType.PING, ACK, 0, b"ignored!")
        after = await client.barrier()
    assert frame == Frame(FrameType.PING, ACK, 0, b"\x01\x02\x03\x04\x05\x06\x07\x08")
    assert after == []


async def test_a_settings_frame_gets_an_empty_settings_ack_and_an_ack_gets_nothing() -> None:
    async with talking({}) as (_, client):
        client.send_frame(FrameType.SETTINGS, 0, 0, settings_payload({INITIAL_WINDOW_SIZE: 1000}))
        frame = await client.read_frame()
        client.send_frame(FrameType.SETTINGS, ACK, 0)
        after = await client.barrier()
    assert frame == Frame(FrameType.SETTINGS, ACK, 0, b"")
    assert after == []


async def test_the_servers_opening_settings_give_its_windows_and_frame_size_then_raise_the_connection_window() -> None:
    async with talking({}) as (_, client):
        opening = client.opening
    assert [(frame.kind, frame.flags, frame.stream_id) for frame in opening] == [
        (FrameType.SETTINGS, 0, 0),
        (FrameType.WINDOW_UPDATE, 0, 0),
        (FrameType.SETTINGS, ACK, 0),
    ]
    settings = parse_settings(opening[0].payload)
    assert settings[INITIAL_WINDOW_SIZE] == STREAM_WINDOW
    assert settings[MAX_FRAME_SIZE] == RECEIVE_FRAME_SIZE
    assert int.from_bytes(opening[1].payload, "big") == CONNECTION_WINDOW - DEFAULT_WINDOW


async def read_data(client: RawClient, stream_id: int, size: int) -> list[Frame]:
    """The frames up to `size` bytes of DATA on `stream_id`."""
    frames: list[Frame] = []
    received = 0
    while received < size:
        frame = await client.read_frame()
        frames.append(frame)
        if frame.kind == FrameType.DATA and frame.stream_id == stream_id:
            received += len(frame.payload)
    return frames


def data_of(frames: Iterable[Frame], stream_id: int) -> bytes:
    return b"".join(frame.payload for frame in on_stream(frames, stream_id) if frame.kind == FrameType.DATA)


async def test_a_reply_over_the_clients_stream_window_waits_for_its_window_updates_then_ends_with_trailers() -> None:
    async with talking({REPLY: replying(100)}, settings={INITIAL_WINDOW_SIZE: 10}) as (_, client):
        client.call(1, REPLY, b"go", half_close=False)
        first = await read_data(client, 1, 10)
        held = await client.frame_within()
        client.send_frame(FrameType.WINDOW_UPDATE, 0, 1, increment(5))
        second = await read_data(client, 1, 5)
        held_again = await client.frame_within()
        client.send_frame(FrameType.WINDOW_UPDATE, 0, 1, increment(1000))
        client.send_frame(FrameType.WINDOW_UPDATE, 0, 0, increment(1000))
        rest = await client.read_until(ends(1))
    assert [frame.kind for frame in first] == [FrameType.HEADERS, FrameType.DATA]
    assert len(data_of(first, 1)) == 10
    assert held is None
    assert len(data_of(second, 1)) == 5
    assert held_again is None
    assert data_of(first + second + rest, 1) == grpc_message(b"r" * 100)
    assert rest[-1].kind == FrameType.HEADERS
    assert client.decode(rest[-1].payload) == {"grpc-status": "0"}


async def test_a_reply_over_the_connection_window_waits_for_a_connection_window_update() -> None:
    size = 100_000
    async with talking({REPLY: replying(size)}, settings={INITIAL_WINDOW_SIZE: 1 << 20}) as (_, client):
        client.call(1, REPLY, b"go", half_close=False)
        first = await read_data(client, 1, DEFAULT_WINDOW)
        held = await client.frame_within()
        client.send_frame(FrameType.WINDOW_UPDATE, 0, 1, increment(1 << 20))
        held_by_the_connection = await client.frame_within()
        client.send_frame(FrameType.WINDOW_UPDATE, 0, 0, increment(1 << 20))
        rest = await client.read_until(ends(1))
    assert len(data_of(first, 1)) == DEFAULT_WINDOW
    assert held is None
    assert held_by_the_connection is None
    assert all(len(frame.payload) <= DEFAULT_FRAME_SIZE for frame in first + rest)
    assert data_of(first + rest, 1) == grpc_message(b"r" * size)
    assert client.decode(rest[-1].payload) == {"grpc-status": "0"}


@pytest.mark.parametrize(
    ("window", "size", "settings"),
    [("stream", 100, {INITIAL_WINDOW_SIZE: 10}), ("connection", 100_000, {INITIAL_WINDOW_SIZE: 1 << 20})],
)
async def test_a_unary_reply_held_by_the_clients_window_gets_its_rest_and_trailers_after_window_updates(
    window: str, size: int, settings: dict[int, int]
) -> None:
    async with talking({REPLY: replying(size)}, settings=settings) as (_, client):
        client.call(1, REPLY, b"go")
        first = await read_data(client, 1, 10 if window == "stream" else DEFAULT_WINDOW)
        held = await client.frame_within()
        client.send_frame(FrameType.WINDOW_UPDATE, 0, 1, increment(1 << 20))
        client.send_frame(FrameType.WINDOW_UPDATE, 0, 0, increment(1 << 20))
        rest = await client.read_until(ends(1))
    assert held is None
    assert data_of(first + rest, 1) == grpc_message(b"r" * size)
    assert client.decode(rest[-1].payload) == {"grpc-status": "0"}


async def test_a_reset_stream_cancels_its_handler_and_nothing_more_goes_out_on_it() -> None:
    made: list[Echo] = []
    async with talking({ECHO: recorded(Echo, made)}) as (_, client):
        client.call(1, ECHO, b"before", half_close=False)
        before = await read_data(client, 1, len(grpc_message(b"before")))
        client.send_frame(FrameType.RST_STREAM, 0, 1, int(ErrorCode.CANCEL).to_bytes(4, "big"))
        await asyncio.wait_for(made[0].cancelled.wait(), WAIT)
        made[0].call.send(b"after")
        made[0].call.finish()
        client.send_frame(FrameType.DATA, END_STREAM, 1, grpc_message(b"late"))
        after = await client.barrier()
    assert data_of(before, 1) == grpc_message(b"before")
    assert after == []
    assert made[0].messages == [b"before"]
    assert not made[0].half_closed.is_set()


@pytest.mark.parametrize("opening", [b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", b"GET /"])
async def test_a_connection_that_does_not_open_with_the_http2_preface_gets_closed(opening: bytes) -> None:
    server = Http2Server({ECHO: Echo}, max_message_bytes=1 << 20)
    port = await server.start("127.0.0.1", 0)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(opening)
        received = await asyncio.wait_for(reader.read(), WAIT)
        writer.close()
        await writer.wait_closed()
    finally:
        await server.stop(0)
    assert reader.at_eof()
    assert b"HTTP/1.1" not in received
    assert received[3] == FrameType.SETTINGS


async def test_a_header_block_hpack_cannot_decode_gets_a_compression_error_goaway_and_the_connection_closed() -> None:
    async with talking({ECHO: Echo}) as (_, client):
        client.send_frame(FrameType.HEADERS, END_HEADERS | END_STREAM, 1, b"\xff\xff\xff\xff\xff")
        frames = await client.read_to_end()
    assert [frame.kind for frame in frames] == [FrameType.GOAWAY]
    assert goaway(frames[0])[1] is ErrorCode.COMPRESSION_ERROR
    assert int.from_bytes(frames[0].payload[4:8], "big") == 9
    assert client.reader.at_eof()


async def test_stop_sends_goaway_refuses_new_streams_and_returns_once_the_call_in_flight_finishes() -> None:
    made: list[Hold] = []
    async with talking({HOLD: recorded(Hold, made)}) as (server, client):
        client.call(1, HOLD, b"in flight")
        assert await client.barrier() == []
        assert made[0].half_closed.is_set()
        stopping = asyncio.create_task(server.stop(60))
        notice = await client.read_until(lambda frame: frame.kind == FrameType.GOAWAY)
        client.call(3, HOLD, b"too late")
        refusal = await client.read_until(lambda frame: frame.kind == FrameType.RST_STREAM)
        still_stopping = not stopping.done()
        made[0].call.send(b"done")
        made[0].call.finish()
        answer = await client.read_to_end()
        await asyncio.wait_for(stopping, WAIT)
    assert notice == [Frame(FrameType.GOAWAY, 0, 0, notice[0].payload)]
    assert goaway(notice[0]) == (1, ErrorCode.NO_ERROR)
    assert refusal == [Frame(FrameType.RST_STREAM, 0, 3, int(ErrorCode.REFUSED_STREAM).to_bytes(4, "big"))]
    assert still_stopping
    assert len(made) == 1
    assert [frame.kind for frame in answer] == [FrameType.HEADERS, FrameType.DATA, FrameType.HEADERS]
    assert data_of(answer, 1) == grpc_message(b"done")
    assert client.decode(answer[0].payload)[":status"] == "200"
    assert client.decode(answer[2].payload) == {"grpc-status": "0"}
    assert not made[0].cancelled.is_set()


async def test_stop_closes_the_connection_and_returns_once_the_client_resets_the_last_call_in_flight() -> None:
    made: list[Hold] = []
    async with talking({HOLD: recorded(Hold, made)}) as (server, client):
        client.call(1, HOLD, b"in flight")
        assert await client.barrier() == []
        stopping = asyncio.create_task(server.stop(60))
        notice = await client.read_until(lambda frame: frame.kind == FrameType.GOAWAY)
        client.send_frame(FrameType.RST_STREAM, 0, 1, int(ErrorCode.CANCEL).to_bytes(4, "big"))
        after = await client.read_to_end()
        await asyncio.wait_for(stopping, WAIT)
    assert goaway(notice[-1]) == (1, ErrorCode.NO_ERROR)
    assert made[0].cancelled.is_set()
    assert after == []


async def test_stop_cancels_a_call_still_in_flight_once_its_grace_has_passed() -> None:
    made: list[Hold] = []
    async with talking({HOLD: recorded(Hold, made)}) as (server, client):
        client.call(1, HOLD, b"never answered")
        assert await client.barrier() == []
        assert made[0].half_closed.is_set()
        await asyncio.wait_for(server.stop(0.3), WAIT)
        cancelled = made[0].cancelled.is_set()
        frames = await client.read_to_end()
    assert cancelled
    assert [frame.kind for frame in frames] == [FrameType.GOAWAY]
    assert goaway(frames[0]) == (1, ErrorCode.NO_ERROR)


async def test_a_data_frame_on_a_stream_never_opened_gets_a_protocol_error_goaway_and_the_connection_closed() -> None:
    async with talking({ECHO: Echo}) as (_, client):
        client.send_frame(FrameType.DATA, END_STREAM, 7, grpc_message(b"stray"))
        frames = await client.read_to_end()
    assert [frame.kind for frame in frames] == [FrameType.GOAWAY]
    assert goaway(frames[0]) == (0, ErrorCode.PROTOCOL_ERROR)


async def test_data_on_a_stream_the_server_has_ended_is_dropped_and_the_connection_keeps_serving() -> None:
    async with talking({ECHO: Echo}) as (_, client):
        # An unknown method: the server ends the call at once, before the client's side has ended.
        client.send_frame(FrameType.HEADERS, END_HEADERS, 1, client.headers("/no.Such/Method"))
        await client.read_until(ends(1))
        client.send_frame(FrameType.DATA, END_STREAM, 1, grpc_message(b"late"))
        after = await client.barrier()
        client.call(3, ECHO, b"still serving")
        frames = await client.read_until(ends(3))
    assert after == []
    assert data_of(frames, 3) == grpc_message(b"still serving")


async def test_headers_opening_an_even_stream_id_get_a_protocol_error_goaway_and_the_connection_closed() -> None:
    made: list[Echo] = []
    async with talking({ECHO: recorded(Echo, made)}) as (_, client):
        client.send_frame(FrameType.HEADERS, END_HEADERS | END_STREAM, 2, client.headers(ECHO))
        frames = await client.read_to_end()
    assert [frame.kind for frame in frames] == [FrameType.GOAWAY]
    assert goaway(frames[0]) == (0, ErrorCode.PROTOCOL_ERROR)
    assert made == []


@contextlib.asynccontextmanager
async def health_service() -> AsyncIterator[tuple[Health, Any]]:
    """A `Health` served on loopback, and a stub of it over a real gRPC channel."""
    health = Health()
    server = Http2Server(health.methods(), max_message_bytes=1 << 20)
    port = await server.start("127.0.0.1", 0)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield health, health_pb2_grpc.HealthStub(channel)  # the stubs type it for a synchronous channel
    finally:
        await channel.close()
        await server.stop(0)


async def test_a_health_check_of_a_service_never_set_gets_not_found_and_one_set_gets_its_status() -> None:
    async with health_service() as (health, stub):
        health.set("known", SERVING)
        known = await asyncio.wait_for(stub.Check(health_pb2.HealthCheckRequest(service="known")), WAIT)
        with pytest.raises(grpc.aio.AioRpcError) as unknown:
            await asyncio.wait_for(stub.Check(health_pb2.HealthCheckRequest(service="unknown")), WAIT)
    assert known.status == SERVING
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND


async def test_a_health_watch_gets_unknown_then_each_change_then_not_serving_and_unavailable_on_shutdown() -> None:
    async with health_service() as (health, stub):
        watch = stub.Watch(health_pb2.HealthCheckRequest(service="svc"))
        first = await asyncio.wait_for(watch.read(), WAIT)
        health.set("svc", SERVING)
        second = await asyncio.wait_for(watch.read(), WAIT)
        health.enter_graceful_shutdown()
        third = await asyncio.wait_for(watch.read(), WAIT)
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            await asyncio.wait_for(watch.read(), WAIT)
        health.set("svc", SERVING)
        after = health.status("svc")
    assert [first.status, second.status, third.status] == [SERVICE_UNKNOWN, SERVING, NOT_SERVING]
    assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
    assert after == NOT_SERVING
