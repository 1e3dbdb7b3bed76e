"""gRPC health checking (`grpc.health.v1.Health`: Check and Watch) on the picker's own transport.

Check answers a service's status, NOT_FOUND for a service never set. Watch sends the status at once
(SERVICE_UNKNOWN for a service never set) and again at each change, until the client goes or the server stops:
`enter_graceful_shutdown` sets every service NOT_SERVING, tells the watchers, ends their calls (UNAVAILABLE, so
that they call again elsewhere) and ignores later changes, as grpcio's health servicer does.
"""

from __future__ import annotations

from typing import Final

from google.protobuf.message import DecodeError
from grpc_health.v1 import health_pb2

from llmaz.gateway.epp.http2 import Call, CallHandler, Method, Status

CHECK: Final = "/grpc.health.v1.Health/Check"
WATCH: Final = "/grpc.health.v1.Health/Watch"
SERVING: Final = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING: Final = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN: Final = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN


class Health:
    """Each service's status, and the calls watching it."""

    def __init__(self) -> None:
        self._statuses: dict[str, int] = {}
        self._watchers: dict[str, set[Call]] = {}
        self._shut_down = False

    def status(self, service: str) -> int | None:
        return self._statuses.get(service)

    def set(self, service: str, status: int) -> None:
        """Set `service`'s status and tell its watchers (ignored once shutting down)."""
        if self._shut_down:
            return
        self._set(service, status)

    def enter_graceful_shutdown(self) -> None:
        if self._shut_down:
            return
        for service in self._statuses:
            self._set(service, NOT_SERVING)
        self._shut_down = True
        watchers, self._watchers = self._watchers, {}
        for calls in watchers.values():
            for call in calls:
                call.finish(Status.UNAVAILABLE, "the server is stopping")

    def methods(self) -> dict[str, Method]:
        return {CHECK: lambda call: _Check(self, call), WATCH: lambda call: _Watch(self, call)}

    def watch(self, service: str, call: Call) -> None:
        if self._shut_down:
            call.finish(Status.UNAVAILABLE, "the server is stopping")
            return
        self._watchers.setdefault(service, set()).add(call)
        call.send(_answer(self._statuses.get(service, SERVICE_UNKNOWN)))

    def unwatch(self, service: str, call: Call) -> None:
        calls = self._watchers.get(service)
        if calls is not None:
            calls.discard(call)
            if not calls:
                del self._watchers[service]

    def _set(self, service: str, status: int) -> None:
        if self._statuses.get(service) == status:
            return
        self._statuses[service] = status
        for call in self._watchers.get(service, ()):
            call.send(_answer(status))


def _answer(status: int) -> bytes:
    return health_pb2.HealthCheckResponse(status=status).SerializeToString()


def _service(call: Call, message: bytes) -> str | None:
    """The service a request names; None, with the call ended INVALID_ARGUMENT, for bytes that are no request."""
    try:
        return health_pb2.HealthCheckRequest.FromString(message).service
    except DecodeError:
        call.finish(Status.INVALID_ARGUMENT, "the request is not a grpc.health.v1.HealthCheckRequest")
        return None


class _Check(CallHandler):
    def __init__(self, health: Health, call: Call) -> None:
        self.health = health
        self.call = call

    def on_message(self, message: bytes) -> None:
        service = _service(self.call, message)
        if service is None:
            return
        status = self.health.status(service)
        if status is None:
            self.call.finish(Status.NOT_FOUND, "unknown service")
            return
        self.call.send(_answer(status))
        self.call.finish()

    def on_half_close(self) -> None:
        self.call.finish(Status.INVALID_ARGUMENT, "no request message")

    def on_cancel(self) -> None:
        pass


class _Watch(CallHandler):
    def __init__(self, health: Health, call: Call) -> None:
        self.health = health
        self.call = call
        self.service: str | None = None

    def on_message(self, message: bytes) -> None:
        if self.service is not None:
            self.call.finish(Status.INVALID_ARGUMENT, "more than one request message")
            self.on_cancel()
            return
        self.service = _service(self.call, message)
        if self.service is not None:
            self.health.watch(self.service, self.call)

    def on_half_close(self) -> None:
        if self.service is None:
            self.call.finish(Status.INVALID_ARGUMENT, "no request message")

    def on_cancel(self) -> None:
        if self.service is not None:
            self.health.unwatch(self.service, self.call)
