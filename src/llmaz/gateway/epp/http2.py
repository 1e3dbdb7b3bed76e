"""gRPC's server side over cleartext HTTP/2, on the event loop alone: the transport the endpoint picker serves on.

A picker's work per request is small (a headers message, a body message, two answers), so what a request costs is
mostly its transport's. grpcio's asyncio server spends ~1.5 ms of CPU per ext_proc stream at a gateway's pace,
most of it handing each message between its own threads and the event loop (~35 context switches a request);
this transport reads and answers on the loop's own thread, in ~0.3 ms and 3 wake-ups (bench/README.md).

What it implements, as a server for gRPC clients such as Envoy's:
- HTTP/2 (RFC 9113): the connection preface; SETTINGS (the peer's initial window, frame size and header table
  size honoured); PING; HEADERS and CONTINUATION, decoded by `hpack`; DATA; flow control both ways (our windows
  replenished as data arrives, our DATA held while the peer's windows are shut); RST_STREAM; GOAWAY, sent on
  `close` so that the client opens no new stream here and lets the ones in flight end.
- gRPC: the `:path` names the method; length-prefixed messages, uncompressed (a compressed one ends its call
  UNIMPLEMENTED: this server accepts no `grpc-encoding`, so a client sends none); a message over
  `max_message_bytes` ends its call RESOURCE_EXHAUSTED; the status in trailers (trailers only for a call that sent
  nothing); an unknown method, UNIMPLEMENTED.
- Not TLS, priorities, server push, nor HTTP/1.1 (a connection that does not open with HTTP/2's preface closes).

A method is a factory taking the `Call` and returning its `CallHandler`, which is told each message, the client's
end (half-close) and a cancellation (RST_STREAM, the connection gone, or the server's drain past its bound). The
handler answers through the `Call`, at once or later (from a task), and ends it with a status.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Mapping
from typing import Final, Protocol
from urllib.parse import quote

from hpack import Decoder
from hpack.exceptions import HPACKError

from llmaz.runtime.log import get_logger

PREFACE: Final = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_LOG = get_logger("llmaz.gateway.epp.http2")


class FrameType(enum.IntEnum):
    DATA = 0
    HEADERS = 1
    PRIORITY = 2
    RST_STREAM = 3
    SETTINGS = 4
    PUSH_PROMISE = 5
    PING = 6
    GOAWAY = 7
    WINDOW_UPDATE = 8
    CONTINUATION = 9


class ErrorCode(enum.IntEnum):
    NO_ERROR = 0
    PROTOCOL_ERROR = 1
    INTERNAL_ERROR = 2
    FLOW_CONTROL_ERROR = 3
    STREAM_CLOSED = 5
    FRAME_SIZE_ERROR = 6
    REFUSED_STREAM = 7
    CANCEL = 8
    COMPRESSION_ERROR = 9


class Status(enum.IntEnum):
    """gRPC status codes this server sends."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    NOT_FOUND = 5
    RESOURCE_EXHAUSTED = 8
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14


END_STREAM: Final = 0x1
ACK: Final = 0x1
END_HEADERS: Final = 0x4
PADDED: Final = 0x8
PRIORITY_FLAG: Final = 0x20

SETTINGS_INITIAL_WINDOW_SIZE: Final = 0x4
SETTINGS_MAX_FRAME_SIZE: Final = 0x5
SETTINGS_MAX_HEADER_LIST_SIZE: Final = 0x6

MAX_WINDOW: Final = (1 << 31) - 1
DEFAULT_WINDOW: Final = 65_535
DEFAULT_FRAME_SIZE: Final = 16_384
# What this server accepts in one frame: fewer, larger frames for a large body (the most RFC 9113 allows is 2^24-1).
RECEIVE_FRAME_SIZE: Final = 1 << 20
# The windows it gives each stream and the connection, topped up once half is used.
STREAM_WINDOW: Final = 16 << 20
CONNECTION_WINDOW: Final = 64 << 20
MAX_HEADER_LIST_BYTES: Final = 64 << 10
_MESSAGE_PREFIX: Final = 5

# HPACK (RFC 7541), sent as literals never added to the peer's table, so nothing here keeps an encoder's state:
# `:status: 200` is the static table's entry 8; `content-type` its entry 31, with a literal value.
_RESPONSE_HEADERS: Final = b"\x88" + b"\x0f\x10" + bytes((16,)) + b"application/grpc"
_STATUS_415: Final = b"\x08\x03415"  # `:status` (entry 8's name) with the literal value "415", without indexing


def _literal(name: bytes, value: bytes) -> bytes:
    """A header field as an HPACK literal without indexing, with a new name (RFC 7541 section 6.2.2)."""
    return b"\x00" + _length(name) + name + _length(value) + value


def _length(text: bytes) -> bytes:
    """An HPACK string length, not Huffman-coded: a 7-bit prefix integer (RFC 7541 section 5.1)."""
    size = len(text)
    if size < 127:
        return bytes((size,))
    encoded = bytearray((127,))
    size -= 127
    while size >= 128:
        encoded.append((size & 0x7F) | 0x80)
        size >>= 7
    encoded.append(size)
    return bytes(encoded)


def _trailers(status: Status, details: str) -> bytes:
    block = _literal(b"grpc-status", str(int(status)).encode())
    if details:
        # gRPC percent-encodes the message; a long one is cut to keep the block within one frame.
        block += _literal(b"grpc-message", quote(details[:1024], safe=" ").encode())
    return block


def _frame(kind: FrameType, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream_id.to_bytes(4, "big") + payload


class CallHandler(Protocol):
    """One call's receiver (see the module docstring); its methods run on the event loop and must not block."""

    def on_message(self, message: bytes) -> None: ...

    def on_half_close(self) -> None: ...

    def on_cancel(self) -> None: ...


Method = Callable[["Call"], CallHandler]


class Call:
    """One gRPC call on a stream: what its handler sends back."""

    __slots__ = (
        "_connection",
        "_outbox",
        "_trailers",
        "gone",
        "handler",
        "received",
        "send_window",
        "started",
        "stream_id",
        "unacknowledged",
    )

    def __init__(self, connection: _Connection, stream_id: int, send_window: int) -> None:
        self._connection = connection
        self.stream_id = stream_id
        self.send_window = send_window
        self.received = bytearray()
        self.handler: CallHandler | None = None
        self.started = False
        """The response headers are sent."""
        self.gone = False
        """The stream is reset or its connection lost: nothing more goes out on it."""
        self.unacknowledged = 0
        """Bytes received on the stream since its window was last topped up."""
        self._outbox = bytearray()
        self._trailers: bytes | None = None

    @property
    def finished(self) -> bool:
        """The server has ended the call (its status is sent or waits only on the peer's flow control)."""
        return self._trailers is not None

    def send(self, message: bytes) -> None:
        """Send one message (ignored once the call has finished)."""
        if self._trailers is not None or self.gone:
            return
        connection = self._connection
        if not self.started:
            connection.emit(_frame(FrameType.HEADERS, END_HEADERS, self.stream_id, _RESPONSE_HEADERS))
            self.started = True
        self._outbox += b"\x00" + len(message).to_bytes(4, "big") + message
        connection.flush(self)

    def finish(self, status: Status = Status.OK, details: str = "") -> None:
        """End the call with `status` (once: later calls do nothing). Its handler hears nothing more."""
        if self._trailers is not None:
            return
        if self.gone:
            self._trailers = b""
            return
        block = _trailers(status, details)
        if not self.started:
            block = _RESPONSE_HEADERS + block
            self.started = True
        self._trailers = block
        self._connection.flush(self)

    def drain(self, window: int, frame_size: int) -> tuple[list[bytes], int]:
        """The frames the windows allow now (DATA, then the trailers once nothing waits), and the bytes they spend."""
        frames: list[bytes] = []
        spent = 0
        outbox = self._outbox
        while outbox and window > spent and self.send_window > 0:
            size = min(len(outbox), window - spent, self.send_window, frame_size)
            frames.append(_frame(FrameType.DATA, 0, self.stream_id, bytes(outbox[:size])))
            del outbox[:size]
            self.send_window -= size
            spent += size
        if not outbox and self._trailers is not None:
            frames.append(_frame(FrameType.HEADERS, END_HEADERS | END_STREAM, self.stream_id, self._trailers))
            self._trailers = b""
        return frames, spent

    @property
    def blocked(self) -> bool:
        return bool(self._outbox)

    @property
    def closed_locally(self) -> bool:
        """The trailers are sent."""
        return self._trailers == b"" and not self._outbox


class _ConnectionError(Exception):
    def __init__(self, code: ErrorCode, why: str) -> None:
        super().__init__(why)
        self.code = code


class _Connection(asyncio.Protocol):
    """One client connection: its frames in, its calls' frames out."""

    def __init__(self, server: Http2Server) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.preface_read = False
        self.decoder = Decoder(max_header_list_size=MAX_HEADER_LIST_BYTES)
        self.calls: dict[int, Call] = {}
        self.blocked: dict[int, Call] = {}
        self.last_stream_id = 0
        self.send_window = DEFAULT_WINDOW
        self.peer_initial_window = DEFAULT_WINDOW
        self.peer_frame_size = DEFAULT_FRAME_SIZE
        self.unacknowledged_connection = 0
        self.header_block: tuple[int, int, bytearray] | None = None
        self.going_away = False
        self.out: list[bytes] | None = None
        """Frames to write at the end of this turn of the event loop: one write (and one wake-up of the peer) for
        all of a turn's answers, not one per frame."""
        self.loop = asyncio.get_running_loop()
        self.closed = asyncio.get_running_loop().create_future()

    # The connection's life.

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.server.connections.add(self)
        settings = b"".join(
            key.to_bytes(2, "big") + value.to_bytes(4, "big")
            for key, value in (
                (SETTINGS_INITIAL_WINDOW_SIZE, STREAM_WINDOW),
                (SETTINGS_MAX_FRAME_SIZE, RECEIVE_FRAME_SIZE),
                (SETTINGS_MAX_HEADER_LIST_SIZE, MAX_HEADER_LIST_BYTES),
            )
        )
        raise_window = (CONNECTION_WINDOW - DEFAULT_WINDOW).to_bytes(4, "big")
        opening = _frame(FrameType.SETTINGS, 0, 0, settings) + _frame(FrameType.WINDOW_UPDATE, 0, 0, raise_window)
        transport.write(opening)
        if self.server.closing:
            self.go_away(ErrorCode.NO_ERROR)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        calls, self.calls = self.calls, {}
        self.blocked.clear()
        for call in calls.values():
            self._cancel(call)
        if not self.closed.done():
            self.closed.set_result(None)

    def go_away(self, code: ErrorCode, why: str = "") -> None:
        """Tell the client to open no new stream here (the ones in flight go on); on an error, close."""
        if self.transport is None or self.transport.is_closing():
            return
        self.going_away = True
        payload = self.last_stream_id.to_bytes(4, "big") + int(code).to_bytes(4, "big") + why.encode()[:256]
        self.emit(_frame(FrameType.GOAWAY, 0, 0, payload))
        if code is not ErrorCode.NO_ERROR:
            self._write_out()
            self.transport.close()
        elif not self.calls:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    # Frames in.

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        if not self.preface_read:
            if len(buffer) < len(PREFACE):
                if not PREFACE.startswith(bytes(buffer)):
                    self._refuse_non_http2()
                return
            if bytes(buffer[: len(PREFACE)]) != PREFACE:
                self._refuse_non_http2()
                return
            del buffer[: len(PREFACE)]
            self.preface_read = True
        try:
            position = 0
            available = len(buffer)
            while available - position >= 9:
                length = int.from_bytes(buffer[position : position + 3], "big")
                if length > RECEIVE_FRAME_SIZE:
                    raise _ConnectionError(ErrorCode.FRAME_SIZE_ERROR, f"a frame of {length} bytes")
                if available - position < 9 + length:
                    break
                kind = buffer[position + 3]
                flags = buffer[position + 4]
                stream_id = int.from_bytes(buffer[position + 5 : position + 9], "big") & MAX_WINDOW
                payload = bytes(buffer[position + 9 : position + 9 + length])
                position += 9 + length
                self._frame_received(kind, flags, stream_id, payload)
            del buffer[:position]
        except _ConnectionError as error:
            _LOG.warning("http/2 connection error", code=error.code.name, reason=str(error))
            self.go_away(error.code, str(error))

    def _refuse_non_http2(self) -> None:
        assert self.transport is not None
        self.transport.close()

    def _frame_received(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if self.header_block is not None and kind != FrameType.CONTINUATION:
            raise _ConnectionError(ErrorCode.PROTOCOL_ERROR, "a header block cut by another frame")
        if kind == FrameType.DATA:
            self._data(flags, stream_id, payload)
        elif kind == FrameType.HEADERS:
            if stream_id == 0:
                raise _ConnectionError(ErrorCode.PROTOCOL_ERROR, "HEADERS on stream 0")
            payload = _unpad(flags, payload)
            if flags & PRIORITY_FLAG:
                payload = payload[5:]
            if flags & END_HEADERS:
                self._headers(stream_id, flags, payload)
            else:
                self.header_block = (stream_id, flags, bytearray(payload))
        elif kind == FrameType.CONTINUATION:
            if self.header_block is None or self.header_block[0] != stream_id:
                raise _ConnectionError(ErrorCode.PROTOCOL_ERROR, "CONTINUATION out of a header block")
            block = self.header_block[2]
            block += payload
            if len(block) > MAX_HEADER_LIST_BYTES * 2:
                raise _ConnectionError(ErrorCode.PROTOCOL_ERROR, "a header block over the bound")
            if flags & END_HEADERS:
                first_flags = self.header_block[1]
                self.header_block = None
                self._headers(stream_id, first_flags, bytes(block))
        elif kind == FrameType.SETTINGS:
            if not flags & ACK:
                self._settings(payload)
                self.emit(_frame(FrameType.SETTINGS, ACK, 0))
        elif kind == FrameType.PING:
            if not flags & ACK:
                self.emit(_frame(FrameType.PING, ACK, 0, payload))
        elif kind == FrameType.WINDOW_UPDATE:
            self._window_update(stream_id, payload)
        elif kind == FrameType.RST_STREAM:
            call = self.calls.pop(stream_id, None)
            self.blocked.pop(stream_id, None)
            if call is not None:
                self._cancel(call)
                self._close_if_drained()
        elif kind == FrameType.GOAWAY:
            self.going_away = True
        elif kind == FrameType.PUSH_PROMISE:
            raise _ConnectionError(ErrorCode.PROTOCOL_ERROR, "PUSH_PROMISE from a client")
        # PRIORITY and unknown frame types are ignored, as RFC 9113 says.

    def _settings(self, payload: bytes) -> None:
        if len(payload) % 6:
            raise _ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "a SETTINGS frame of a partial setting")
        for offset in range(0, len(payload), 6):
            key = int.from_bytes(payload[offset : offset + 2], "big")
            value = int.from_bytes(payload[offset + 2 : offset + 6], "big")
            if key == SETTINGS_INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise _ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, "an initial window over 2^31-1")
                delta = value - self.peer_initial_window
                self.peer_initial_window = value
                for call in self.calls.values():
                    call.send_window += delta
            elif key == SETTINGS_MAX_FRAME_SIZE:
                if not DEFAULT_FRAME_SIZE <= value <= (1 << 24) - 1:
                    raise _ConnectionError(ErrorCode.PROTOCOL_ERROR, f"a max frame size of {value}")
                self.peer_frame_size = value
        # The peer's window may have opened: whatever waited on it goes.
        for call in list(self.blocked.values()):
            self.flush(call)

    def _window_update(self, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise _ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "a WINDOW_UPDATE not of 4 bytes")
        increment = int.from_bytes(payload, "big") & MAX_WINDOW
        if stream_id == 0:
            self.send_window += increment
            for waiting in list(self.blocked.values()):
                self.flush(waiting)
            return
        call = self.calls.get(stream_id)
        if call is not None:
            call.send_window += increment
            self.flush(call)

    def _headers(self, stream_id: int, flags: int, block: bytes) -> None:
        try:
            fields = self.decoder.decode(block, raw=True)
        except HPACKError as error:
            why = f"a header block HPACK cannot decode: {error}"
            raise _ConnectionError(ErrorCode.COMPRESSION_ERROR, why) from None
        call = self.calls.get(stream_id)
        if call is not None:
            # The client's trailers: its side of the call ends.
            if flags & END_STREAM:
                self._half_closed(call)
            return
        if stream_id % 2 == 0 or stream_id <= self.last_stream_id:
            # A stream already closed, or not the client's to open.
            if stream_id > self.last_stream_id:
                raise _ConnectionError(ErrorCode.PROTOCOL_ERROR, f"a client stream of even id {stream_id}")
            return
        self.last_stream_id = stream_id
        if self.going_away:
            self.emit(_frame(FrameType.RST_STREAM, 0, stream_id, int(ErrorCode.REFUSED_STREAM).to_bytes(4, "big")))
            return
        headers = {bytes(name): bytes(value) for name, value in fields}
        path = headers.get(b":path", b"").decode("latin-1")
        call = Call(self, stream_id, self.peer_initial_window)
        self.calls[stream_id] = call
        content_type = headers.get(b"content-type", b"")
        if headers.get(b":method") != b"POST" or not content_type.startswith(b"application/grpc"):
            # Not gRPC: HTTP's own answer, nothing more.
            self.emit(_frame(FrameType.HEADERS, END_HEADERS | END_STREAM, stream_id, _STATUS_415))
            self.calls.pop(stream_id, None)
            return
        method = self.server.methods.get(path)
        if method is None:
            call.finish(Status.UNIMPLEMENTED, f"Method not found: {path}")
        else:
            call.handler = method(call)
        if flags & END_STREAM:
            self._half_closed(call)

    def _data(self, flags: int, stream_id: int, payload: bytes) -> None:
        received = len(payload)
        payload = _unpad(flags, payload)
        self.unacknowledged_connection += received
        if self.unacknowledged_connection >= CONNECTION_WINDOW // 2:
            self.emit(_frame(FrameType.WINDOW_UPDATE, 0, 0, self.unacknowledged_connection.to_bytes(4, "big")))
            self.unacknowledged_connection = 0
        call = self.calls.get(stream_id)
        if call is None:
            if stream_id == 0 or stream_id > self.last_stream_id:
                raise _ConnectionError(ErrorCode.PROTOCOL_ERROR, f"DATA on stream {stream_id}, never opened")
            return  # a stream this server has ended: what the client sent before it knew is dropped
        call.received += payload
        # The stream's window, topped up as its data arrives (the messages' own bound keeps what is buffered small).
        call.unacknowledged += received
        if call.unacknowledged >= STREAM_WINDOW // 2 and not flags & END_STREAM:
            self.emit(_frame(FrameType.WINDOW_UPDATE, 0, stream_id, call.unacknowledged.to_bytes(4, "big")))
            call.unacknowledged = 0
        self._messages(call)
        if flags & END_STREAM:
            self._half_closed(call)

    def _messages(self, call: Call) -> None:
        buffered = call.received
        limit = self.server.max_message_bytes
        while len(buffered) >= _MESSAGE_PREFIX and not call.finished:
            size = int.from_bytes(buffered[1:5], "big")
            if buffered[0] != 0:
                self._refuse(call, Status.UNIMPLEMENTED, "compressed messages are not accepted (no grpc-encoding)")
                return
            if size > limit:
                self._refuse(call, Status.RESOURCE_EXHAUSTED, f"Received message larger than max ({size} vs. {limit})")
                return
            if len(buffered) < _MESSAGE_PREFIX + size:
                return
            message = bytes(buffered[_MESSAGE_PREFIX : _MESSAGE_PREFIX + size])
            del buffered[: _MESSAGE_PREFIX + size]
            if call.handler is not None:
                call.handler.on_message(message)

    def _refuse(self, call: Call, status: Status, details: str) -> None:
        call.received.clear()
        handler, call.handler = call.handler, None
        call.finish(status, details)
        if handler is not None:
            handler.on_cancel()

    def _half_closed(self, call: Call) -> None:
        if call.received and not call.finished:
            self._refuse(call, Status.INTERNAL, "the stream ended inside a message")
            return
        handler = call.handler
        if handler is not None and not call.finished:
            handler.on_half_close()
        self._forget_if_done(call)

    def _cancel(self, call: Call) -> None:
        call.gone = True
        handler, call.handler = call.handler, None
        if handler is not None and not call.finished:
            handler.on_cancel()

    # Frames out.

    def emit(self, frame: bytes) -> None:
        if self.out is None:
            self.out = []
            self.loop.call_soon(self._write_out)
        self.out.append(frame)

    def flush(self, call: Call) -> None:
        """Send what `call` has waiting, as far as the windows allow."""
        if self.calls.get(call.stream_id) is not call:
            return  # reset or gone: nothing more goes out on it
        frames, spent = call.drain(self.send_window, self.peer_frame_size)
        self.send_window -= spent
        for frame in frames:
            self.emit(frame)
        if call.blocked:
            self.blocked[call.stream_id] = call
        else:
            self.blocked.pop(call.stream_id, None)
        if call.closed_locally:
            call.handler = None
            self._forget_if_done(call)

    def _forget_if_done(self, call: Call) -> None:
        # A call ends with its trailers sent, whether or not the client has closed its side: what the client sends
        # after that is dropped. Until then (its last DATA waiting on the client's window) it is kept.
        if call.closed_locally:
            self.calls.pop(call.stream_id, None)
            self.blocked.pop(call.stream_id, None)
            self._close_if_drained()

    def _close_if_drained(self) -> None:
        """Going away, the connection closes with its last call."""
        if self.going_away and not self.calls and self.transport is not None:
            self._write_out()
            self.transport.close()

    def _write_out(self) -> None:
        out, self.out = self.out, None
        if out and self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(out))


def _unpad(flags: int, payload: bytes) -> bytes:
    if not flags & PADDED:
        return payload
    if not payload or payload[0] >= len(payload):
        raise _ConnectionError(ErrorCode.PROTOCOL_ERROR, "padding as long as the frame")
    return payload[1 : len(payload) - payload[0]]


class Http2Server:
    """A gRPC server on one port: `methods` by `/package.Service/Method` path."""

    def __init__(self, methods: Mapping[str, Method], *, max_message_bytes: int) -> None:
        self.methods = dict(methods)
        self.max_message_bytes = max_message_bytes
        self.connections: set[_Connection] = set()
        self.closing = False
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> int:
        """Listen on `host` (empty: every address) and `port` (0: any free one); return the port."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Connection(self), host or None, port)
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self, grace: float) -> None:
        """Take no new connection or stream; give the calls in flight `grace` seconds, then cancel the rest."""
        self.closing = True
        if self._server is not None:
            self._server.close()
        connections = list(self.connections)
        for connection in connections:
            connection.go_away(ErrorCode.NO_ERROR)
        if connections:
            await asyncio.wait([connection.closed for connection in connections], timeout=grace)
        for connection in list(self.connections):
            connection.abort()
        if self._server is not None:
            await self._server.wait_closed()
