"""The admission webhook server: AdmissionReview over HTTPS, one route per registered webhook.

Invariants:
- Every POST to a webhook path is answered with HTTP 200 and a well-formed AdmissionReview carrying the
  request's uid (when it has one): bad input becomes a 400-coded denial, a handler exception a 500-coded
  denial (counted in `controller_runtime_webhook_panics_total`). Only cancellation escapes a request.
- One structured log line per request: uid, kind, name, namespace, operation, allowed, code, latency.
- With TLS (the default) the server listens only once a certificate has loaded from `cert_dir`, and picks up
  renewed files without a restart (see `CertWatcher`); `started()` tells readiness probes it is serving.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

from aiohttp import web

from llmaz.runtime.log import get_logger
from llmaz.runtime.webhook import metrics
from llmaz.runtime.webhook.certwatcher import DEFAULT_INTERVAL, CertWatcher
from llmaz.runtime.webhook.handler import Webhook
from llmaz.runtime.webhook.response import AdmissionResponse, encode_review, errored
from llmaz.runtime.webhook.review import MAX_BODY_BYTES, AdmissionRequest, ReviewError, decode_review

DEFAULT_PORT = 9443
DEFAULT_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")
SHUTDOWN_TIMEOUT = 60.0


class WebhookServer:
    """A Runnable serving `webhooks`; it does not need leader election (every replica answers)."""

    needs_leader_election = False

    def __init__(
        self,
        webhooks: Iterable[Webhook],
        *,
        host: str = "0.0.0.0",
        port: int = DEFAULT_PORT,
        cert_dir: Path = DEFAULT_CERT_DIR,
        cert_name: str = "tls.crt",
        key_name: str = "tls.key",
        tls: bool = True,
        cert_poll_interval: float = DEFAULT_INTERVAL,
    ) -> None:
        self.webhooks = list(webhooks)
        paths = [w.path for w in self.webhooks]
        if len(set(paths)) != len(paths):
            raise ValueError(f"duplicate webhook paths in {paths}")
        self.host = host
        self.port = port
        self.tls = tls
        self.certs = CertWatcher(cert_dir / cert_name, cert_dir / key_name, interval=cert_poll_interval)
        self._serving = asyncio.Event()
        self._log = get_logger("llmaz.runtime.webhook")
        for webhook in self.webhooks:
            metrics.register_path(webhook.path)

    def started(self) -> bool:
        """Readiness: the server is listening (with a loaded certificate when TLS is on)."""
        return self._serving.is_set()

    async def wait_started(self) -> None:
        await self._serving.wait()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES + 1)
        for webhook in self.webhooks:
            app.router.add_post(webhook.path, self._route(webhook))
        return app

    def _route(self, webhook: Webhook) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(request: web.Request) -> web.Response:
            return await self.serve(webhook, request)

        return handle

    async def run(self, stopping: asyncio.Event) -> None:
        if self.tls and not await self.certs.wait_loaded(stopping):
            return
        runner = web.AppRunner(self.app(), access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT)
        await runner.setup()
        try:
            ssl_context = self.certs.server_context() if self.tls else None
            site = web.TCPSite(runner, self.host, self.port, ssl_context=ssl_context)
            await site.start()
            self.port = runner.addresses[0][1]
            self._serving.set()
            self._log.info("webhook server started", port=self.port, tls=self.tls)
            await (self.certs.watch(stopping) if self.tls else stopping.wait())
        finally:
            self._serving.clear()
            await runner.cleanup()

    async def serve(self, webhook: Webhook, request: web.Request) -> web.Response:
        body = await _read_capped(request)
        return web.Response(
            body=await self.review(webhook, body, request.content_type), content_type="application/json"
        )

    async def review(self, webhook: Webhook, body: bytes, content_type: str) -> bytes:
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
        latency = time.perf_counter() - started
        metrics.LATENCY.labels(webhook=webhook.path).observe(latency)
        metrics.REQUESTS.labels(webhook=webhook.path, code="200").inc()
        self._log_request(webhook, admission, response, latency)
        uid = admission.uid if isinstance(admission, AdmissionRequest) else admission
        return encode_review(response, uid, api_version)

    async def _judge(
        self, webhook: Webhook, body: bytes, content_type: str
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
            self._log.exception("webhook handler failed", webhook=webhook.name, uid=admission.uid)
            response = errored(500, f"internal error in webhook {webhook.name}: {exc!r}")
        return admission, response, admission.api_version

    def _log_request(
        self, webhook: Webhook, admission: AdmissionRequest | str, response: AdmissionResponse, latency: float
    ) -> None:
        fields: dict[str, object] = {"webhook": webhook.name, "allowed": response.allowed, "code": response.code}
        if isinstance(admission, AdmissionRequest):
            meta = (admission.object or admission.old_object or {}).get("metadata")
            name = admission.name or (meta.get("name") if isinstance(meta, dict) else None) or ""
            fields |= {
                "uid": admission.uid,
                "kind": admission.kind.kind,
                "name": name,
                "namespace": admission.namespace,
                "operation": admission.operation,
            }
        else:
            fields["uid"] = admission
        self._log.info("admission", latency=round(latency, 6), **fields)


async def _read_capped(request: web.Request) -> bytes:
    """The body, or its first MAX_BODY_BYTES + 1 bytes when longer (enough for decoding to refuse it)."""
    chunks: list[bytes] = []
    size = 0
    while size <= MAX_BODY_BYTES:
        chunk = await request.content.readany()
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)
