"""The admission webhook server: AdmissionReview over HTTPS, one route per registered webhook.

Invariants:
- Every POST to a webhook path that is taken on is answered with HTTP 200 and a well-formed AdmissionReview
  carrying the request's uid (when it has one): bad input becomes a 400-coded denial, a handler exception a
  500-coded denial (counted in `controller_runtime_webhook_panics_total`). Only cancellation escapes a request.
- What is taken on at once is bounded (`Limits`): requests being read or judged, and their body bytes (the
  Content-Length, reserved before the body is read; bytes read so far for a chunked body). A request beyond
  either bound gets HTTP 429 with `Retry-After: 1` at once, its body unread, and its connection closed once
  drained (client-go, the API server's client, retries such answers). Judging itself runs one request at a
  time (it never awaits), so memory is bounded by the bodies in flight plus one decoded review. Connections
  are bounded too (`llmaz.runtime.server.listener`).
- A connection must send its first request head (TLS: its ClientHello), finish its TLS handshake, deliver
  each request head, then each body, each within `read_timeout`; one that stalls is closed, and so is an idle
  keep-alive connection after as long. A body that does not arrive in time gets no answer: its connection is
  closed at once.
- One structured log line per request: uid, kind, name, namespace, operation, user, allowed, code, latency;
  every request-derived value is cut to `MAX_FIELD_CHARS`.
- With TLS (the default) the server listens only once a certificate has loaded from `cert_dir`, and picks up
  renewed files without a restart (see `CertWatcher`); `started()` tells readiness probes it is serving.
- Stopping loses no request to a connection closed under it: connections are drained first (`Connections.drain`).
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from llmaz.runtime.log import bounded, get_logger
from llmaz.runtime.runnable import until_cancelled
from llmaz.runtime.server.address import join_host_port
from llmaz.runtime.server.listener import ConnectionLimits, Connections, serving
from llmaz.runtime.webhook import metrics
from llmaz.runtime.webhook.certwatcher import DEFAULT_INTERVAL, CertWatcher
from llmaz.runtime.webhook.handler import Webhook
from llmaz.runtime.webhook.response import AdmissionResponse, encode_review, errored
from llmaz.runtime.webhook.review import MAX_BODY_BYTES, V1, AdmissionRequest, ReviewError, decode_review

DEFAULT_PORT = 9443
DEFAULT_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")
SHUTDOWN_TIMEOUT = 60.0
MiB = 1024 * 1024
RETRY_AFTER_SECONDS = 1
_REFUSAL_LOG_INTERVAL = 10.0
_STACK_CHARS = 4096
_READ_BUFFER = 16 * 1024


@dataclass(frozen=True, slots=True)
class Limits:
    """How much one server takes on at once; past a bound a request is refused (429) before its body is read.

    Memory at the bounds, which the defaults keep well within a replica's 256 Mi: bodies in flight (16 MiB:
    two maximum-size reviews, or 32 of 512 KiB; reviews are usually a few KiB), the one review being judged
    (decoded and validated, up to ~60 MiB at `MAX_JSON_VALUES`), and up to `2 * max_requests` connections
    served, each holding up to ~0.8 MiB of TLS and read buffers while a body streams in (`listener`). The read
    timeout matches the API server's default webhook timeout (10 s): a request still arriving after that has
    already failed there.
    """

    max_requests: int = 32
    max_bytes: int = 16 * MiB
    read_timeout: float = 10.0

    def __post_init__(self) -> None:
        if self.max_requests < 1:
            raise ValueError("max_requests must be at least 1")
        if self.max_bytes < MAX_BODY_BYTES:
            raise ValueError(f"max_bytes must be at least one maximum-size review ({MAX_BODY_BYTES} bytes)")
        if self.read_timeout <= 0:
            raise ValueError("read_timeout must be positive")


class _InFlight:
    """Requests and body bytes taken on, against `Limits`."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.requests = 0
        self.bytes = 0

    def enter(self, size: int) -> bool:
        if self.requests >= self.limits.max_requests or not self.grow(size):
            return False
        self.requests += 1
        return True

    def grow(self, size: int) -> bool:
        if self.bytes + size > self.limits.max_bytes:
            return False
        self.bytes += size
        return True

    def leave(self, size: int) -> None:
        self.requests -= 1
        self.bytes -= size


class _OverBudgetError(Exception):
    """The body outgrew what is left of the in-flight byte budget while it was read (chunked bodies)."""


class WebhookServer:
    """A Runnable serving `webhooks`; it does not need leader election (every replica answers).

    `host` "" (the default) or "::" listens on every interface, IPv4 and IPv6.
    """

    needs_leader_election = False

    def __init__(
        self,
        webhooks: Iterable[Webhook],
        *,
        host: str = "",
        port: int = DEFAULT_PORT,
        cert_dir: Path = DEFAULT_CERT_DIR,
        cert_name: str = "tls.crt",
        key_name: str = "tls.key",
        tls: bool = True,
        cert_poll_interval: float = DEFAULT_INTERVAL,
        limits: Limits | None = None,
    ) -> None:
        self.webhooks = list(webhooks)
        paths = [w.path for w in self.webhooks]
        if len(set(paths)) != len(paths):
            raise ValueError(f"duplicate webhook paths in {paths}")
        self.host = host.removeprefix("[").removesuffix("]")
        self.port = port
        self.tls = tls
        self.limits = limits or Limits()
        self.certs = CertWatcher(cert_dir / cert_name, cert_dir / key_name, interval=cert_poll_interval)
        self._in_flight = _InFlight(self.limits)
        self._connections = Connections()
        self._refused = 0
        self._next_refusal_log = 0.0
        self._serving = asyncio.Event()
        self._log = get_logger("llmaz.runtime.webhook")
        for webhook in self.webhooks:
            metrics.register_path(webhook.path)

    @property
    def in_flight(self) -> tuple[int, int]:
        """(requests, body bytes) taken on now."""
        return self._in_flight.requests, self._in_flight.bytes

    def started(self) -> bool:
        """Readiness: the server is listening (with a loaded certificate when TLS is on)."""
        return self._serving.is_set()

    async def wait_started(self) -> None:
        await self._serving.wait()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES + 1, middlewares=[self._connections.middleware])
        for webhook in self.webhooks:
            app.router.add_post(webhook.path, self._route(webhook))
        return app

    def _route(self, webhook: Webhook) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handle(request: web.Request) -> web.StreamResponse:
            return await self.serve(webhook, request)

        return handle

    async def run(self) -> None:
        if self.tls:
            await self.certs.wait_loaded()
        ssl_context = self.certs.server_context() if self.tls else None
        # Twice as many connections served as requests taken on: room to refuse a burst with 429s at once; more
        # would only cost TLS buffers. Refused and idle connections pass their slot on (see listener).
        limits = ConnectionLimits(
            max_served=2 * self.limits.max_requests, first_message_timeout=self.limits.read_timeout
        )
        try:
            # aiohttp closes a connection that has not delivered a whole request head this long after it opened
            # (or after the previous response): the header read deadline.
            async with serving(
                self.app(), self.host, self.port, self._connections, ssl_context=ssl_context, limits=limits,
                shutdown_timeout=SHUTDOWN_TIMEOUT, keepalive_timeout=self.limits.read_timeout,
                read_bufsize=_READ_BUFFER,
            ) as self.port:  # fmt: skip
                self._serving.set()
                self._log.info("webhook server started", address=join_host_port(self.host, self.port), tls=self.tls)
                await (self.certs.watch() if self.tls else until_cancelled())
        finally:
            self._serving.clear()

    async def serve(self, webhook: Webhook, request: web.Request) -> web.StreamResponse:
        length = request.content_length
        if length is not None and length > MAX_BODY_BYTES:
            too_large = errored(400, f"request entity is too large; limit is {MAX_BODY_BYTES} bytes")
            return _review_response(self._answer(webhook, "", too_large, V1, time.perf_counter()))
        if not self._in_flight.enter(length or 0):
            return self._busy(webhook)
        reserved = [length or 0]  # grows while a chunked body is read; released whatever happens
        try:
            try:
                async with asyncio.timeout(self.limits.read_timeout):
                    body = await self._read(request, reserved)
            except _OverBudgetError:
                return self._busy(webhook)
            except TimeoutError:
                return self._stalled(webhook, request)
            except ConnectionError:  # the client went away mid-body: there is nobody to answer
                return web.Response(status=400, text="request body incomplete\n")
            except HttpProcessingError as exc:  # e.g. a malformed chunked body
                return web.Response(status=400, text=f"bad request body: {bounded(exc.message)}\n")
            return _review_response(await self.review(webhook, body, request.content_type))
        finally:
            self._in_flight.leave(reserved[0])

    async def _read(self, request: web.Request, reserved: list[int]) -> bytearray:
        """The body, cut at MAX_BODY_BYTES + 1 bytes (enough for decoding to refuse it); `reserved[0]` follows
        the bytes held against the in-flight budget."""
        body = bytearray()
        while len(body) <= MAX_BODY_BYTES:
            chunk = await request.content.readany()
            if not chunk:
                break
            chunk = chunk[: MAX_BODY_BYTES + 1 - len(body)]
            more = len(body) + len(chunk) - reserved[0]
            if more > 0:
                if not self._in_flight.grow(more):
                    raise _OverBudgetError
                reserved[0] += more
            body += chunk
        return body

    def _busy(self, webhook: Webhook) -> web.Response:
        metrics.REQUESTS.labels(webhook=webhook.path, code="429").inc()
        self._refused += 1
        now = time.monotonic()
        if now >= self._next_refusal_log:
            self._log.warning(
                "admission requests refused: too many in flight",
                refused=self._refused,
                in_flight=self._in_flight.requests,
                in_flight_bytes=self._in_flight.bytes,
            )
            self._refused, self._next_refusal_log = 0, now + _REFUSAL_LOG_INTERVAL
        # The retry comes on a new connection: this one's slot passes on once its body has drained.
        headers = {"Retry-After": str(RETRY_AFTER_SECONDS), "Connection": "close"}
        response = web.Response(status=429, text="too many admission requests in flight\n", headers=headers)
        response.force_close()
        return response

    def _stalled(self, webhook: Webhook, request: web.Request) -> web.Response:
        metrics.REQUESTS.labels(webhook=webhook.path, code="408").inc()
        peer = bounded(request.remote or "")
        self._log.info("admission request body not received in time", webhook=webhook.name, peer=peer)
        # Close now: lingering to drain the rest of a stalled body would hold the connection again as long.
        request.protocol.force_close()
        return web.Response(status=408, text="request body not received in time\n")

    async def review(self, webhook: Webhook, body: bytes | bytearray, content_type: str) -> bytes:
        """The encoded AdmissionReview answering `body`: everything `serve` does but HTTP (metrics, log line).

        Never raises for any input: a body that cannot be decoded, or a handler that fails, gets a denial.
        """
        started = time.perf_counter()
        gauge = metrics.IN_FLIGHT.labels(webhook=webhook.path)
        gauge.inc()
        try:
            admission, response, api_version = await self._judge(webhook, body, content_type)
        finally:
            gauge.dec()
        return self._answer(webhook, admission, response, api_version, started)

    def _answer(
        self, webhook: Webhook, admission: AdmissionRequest | str, response: AdmissionResponse, api_version: str,
        started: float,
    ) -> bytes:  # fmt: skip
        latency = time.perf_counter() - started
        metrics.LATENCY.labels(webhook=webhook.path).observe(latency)
        metrics.REQUESTS.labels(webhook=webhook.path, code="200").inc()
        self._log_request(webhook, admission, response, latency)
        uid = admission.uid if isinstance(admission, AdmissionRequest) else admission
        return encode_review(response, uid, api_version)

    async def _judge(
        self, webhook: Webhook, body: bytes | bytearray, content_type: str
    ) -> tuple[AdmissionRequest | str, AdmissionResponse, str]:
        """(the request, or its uid if it could not be decoded; the response; the review apiVersion)."""
        try:
            admission = decode_review(body, content_type)
        except ReviewError as exc:
            return exc.uid, errored(exc.code, exc.message), exc.api_version
        try:
            response = await webhook.handler(admission)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            metrics.PANICS.inc()
            error = bounded(repr(exc), 1024)
            # The stack without the exception's text, which may quote the request: bounded either way.
            stack = "".join(traceback.format_tb(exc.__traceback__))[-_STACK_CHARS:]
            self._log.error(
                "webhook handler failed", webhook=webhook.name, uid=bounded(admission.uid), error=error, stack=stack
            )
            response = errored(500, f"internal error in webhook {webhook.name}: {error}")
        return admission, response, admission.api_version

    def _log_request(
        self, webhook: Webhook, admission: AdmissionRequest | str, response: AdmissionResponse, latency: float
    ) -> None:
        fields: dict[str, object] = {"webhook": webhook.name, "allowed": response.allowed, "code": response.code}
        if isinstance(admission, AdmissionRequest):
            meta = (admission.object or admission.old_object or {}).get("metadata")
            name = admission.name or (meta.get("name") if isinstance(meta, dict) else None) or ""
            fields |= {
                "uid": bounded(admission.uid),
                "kind": bounded(admission.kind.kind),
                "name": bounded(name),
                "namespace": bounded(admission.namespace),
                "operation": bounded(admission.operation),
                "user": bounded(admission.user_info.get("username") or ""),
            }
        else:
            fields["uid"] = bounded(admission)
        self._log.info("admission", latency=round(latency, 6), **fields)


def _review_response(body: bytes) -> web.Response:
    return web.Response(body=body, content_type="application/json")
