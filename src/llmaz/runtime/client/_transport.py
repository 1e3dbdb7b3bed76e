"""One aiohttp session per client: auth headers, TLS, QPS limiting, retries on Retry-After, metrics.

Invariants: every HTTP attempt passes the token bucket of its resource (see `limiter_key`) and is counted in
`rest_client_requests_total` exactly once; every non-stream request has one deadline that bounds all its
attempts and the waits between them (as a client-go request's context does), so a retrying request never
outlives its timeout; a response >= 400 becomes a typed `ApiError` (through `error_from_status`) and nothing
else escapes except `ApiConnectionError` and `CancelledError`; `connectivity` hears of every response and of every
request that ended without one (after its retries).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aiohttp
import orjson

from llmaz.runtime.client import _metrics
from llmaz.runtime.client.config import RestConfig
from llmaz.runtime.client.connectivity import Connectivity
from llmaz.runtime.client.errors import ApiConnectionError, ApiError, TooManyRequests, error_from_status
from llmaz.runtime.client.throttle import TokenBucket
from llmaz.runtime.clock import REAL_CLOCK, Clock

Params = dict[str, str]


def limiter_key(path: str) -> str:
    """The resource a request path addresses, "group/version/plural" ("v1/pods" for the core group), or "" for
    non-resource paths. Namespace, name and subresource do not count: controller-runtime builds one REST
    client, and so one rate limiter, per kind, and `Transport` keeps one bucket per key the same way."""
    parts = path.strip("/").split("/")
    if parts[0] == "api" and len(parts) >= 3:
        group_version, rest = parts[1:2], parts[2:]
    elif parts[0] == "apis" and len(parts) >= 4:
        group_version, rest = parts[1:3], parts[3:]
    else:
        return ""
    if rest[0] == "namespaces" and len(rest) > 2:
        rest = rest[2:]
    return "/".join([*group_version, rest[0]])


def decode(payload: bytes) -> Any:
    """JSON body to Python objects; a non-JSON body (e.g. "404 page not found") comes back as text."""
    if not payload:
        return {}
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError:
        return payload.decode("utf-8", "replace")


class Transport:
    def __init__(self, config: RestConfig, clock: Clock = REAL_CLOCK) -> None:
        self.config = config
        self._clock = clock
        self._buckets: dict[str, TokenBucket] = {}
        self._session: aiohttp.ClientSession | None = None
        self._host = config.host_label
        self.connectivity = Connectivity(config.host_label, clock)

    def _get_session(self) -> aiohttp.ClientSession:
        # Created on first use so it binds to the running event loop.
        if self._session is None or self._session.closed:
            # limit=0: every open watch pins a connection, so a pool limit would queue requests behind them.
            connector = aiohttp.TCPConnector(ssl=self.config.ssl_context(), limit=0)
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    def bucket_for(self, path: str) -> TokenBucket:
        """The token bucket the request to `path` waits on (created on first use)."""
        key = limiter_key(path)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = TokenBucket(self.config.qps, self.config.burst, self._clock)
        return bucket

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {
            "Accept": "application/json",
            "User-Agent": self.config.user_agent,
            **self.config.extra_headers,
        }
        headers.update(await self.config.auth_headers())
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Params | None = None,
        body: bytes | None = None,
        content_type: str | None = None,
        request_timeout: float | None = None,
        guard: Callable[[], None] | None = None,
    ) -> Any:
        """Send one request, retrying (at most `max_retries`) when the server asks for a later retry.

        `request_timeout` (default `RestConfig.timeout`) bounds the attempts and the waits between them; the
        wait for the first token does not count, as in client-go, so a throttled client does not time out
        requests it never sent. `guard`, if given, runs right before each attempt is sent and raises to stop it.
        """
        await self._throttle(method, path)
        deadline = self._clock.now() + (request_timeout or self.config.timeout)
        attempt = 0
        while True:
            try:
                return await self._request_once(method, path, params, body, content_type, deadline, guard)
            except ApiError as err:
                delay = self._retry_delay(err, attempt, method)
                if delay is None or self._clock.now() + delay >= deadline:
                    if isinstance(err, ApiConnectionError):
                        self.connectivity.failed(err.message)
                    raise
                _metrics.REQUEST_RETRIES.labels(str(err.status), method, self._host).inc()
                await self._clock.sleep(delay)
                await self._throttle(method, path)
                attempt += 1

    def _retry_delay(self, err: ApiError, attempt: int, method: str = "GET") -> float | None:
        if attempt >= self.config.max_retries:
            return None
        if isinstance(err, ApiConnectionError):
            # A pooled keep-alive connection may have died with a restarted server: retry a read once, at once.
            return 0.0 if method == "GET" and attempt == 0 else None
        if isinstance(err, TooManyRequests):
            return min(err.retry_after if err.retry_after is not None else 1.0, self.config.max_retry_after)
        if err.status >= 500 and err.retry_after is not None:
            return min(err.retry_after, self.config.max_retry_after)
        return None

    async def _request_once(
        self,
        method: str,
        path: str,
        params: Params | None,
        body: bytes | None,
        content_type: str | None,
        deadline: float,
        guard: Callable[[], None] | None,
    ) -> Any:
        remaining = deadline - self._clock.now()
        if remaining <= 0:
            raise ApiConnectionError(f"{method} {path}: request timed out")
        resp = await self._send(method, path, params, body, content_type, aiohttp.ClientTimeout(total=remaining), guard)
        try:
            payload = await resp.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ApiConnectionError(f"{method} {path}: reading the response failed: {exc!r}") from exc
        finally:
            resp.release()
        return decode(payload)

    async def _throttle(self, method: str, path: str) -> None:
        waited = await self.bucket_for(path).acquire()
        _metrics.RATE_LIMITER_DURATION.labels(method, self._host).observe(waited)

    async def open(
        self,
        method: str,
        path: str,
        *,
        params: Params | None = None,
        body: bytes | None = None,
        content_type: str | None = None,
        client_timeout: aiohttp.ClientTimeout,
    ) -> aiohttp.ClientResponse:
        """Send a request once and return the response when its headers are in (the caller releases it).

        For streams (watches), bounded by `client_timeout` alone. A status >= 400 is read, released and raised
        as a typed error.
        """
        await self._throttle(method, path)
        try:
            return await self._send(method, path, params, body, content_type, client_timeout)
        except ApiConnectionError as err:
            self.connectivity.failed(err.message)
            raise

    async def _send(
        self,
        method: str,
        path: str,
        params: Params | None,
        body: bytes | None,
        content_type: str | None,
        client_timeout: aiohttp.ClientTimeout,
        guard: Callable[[], None] | None = None,
    ) -> aiohttp.ClientResponse:
        headers = await self._headers(content_type)
        if guard is not None:
            guard()  # after the last await before sending, so nothing can change the answer in between
        start = self._clock.now()
        try:
            resp = await self._get_session().request(
                method,
                self.config.host + path,
                params=params,
                data=body,
                headers=headers,
                timeout=client_timeout,
                server_hostname=self.config.tls_server_name,
            )
        except (aiohttp.ClientError, TimeoutError) as exc:
            _metrics.REQUESTS_TOTAL.labels("<error>", method, self._host).inc()
            raise ApiConnectionError(f"{method} {path}: {exc!r}") from exc
        finally:
            _metrics.REQUEST_DURATION.labels(method, self._host).observe(self._clock.now() - start)
        _metrics.REQUESTS_TOTAL.labels(str(resp.status), method, self._host).inc()
        self.connectivity.reached()
        if resp.status < 400:
            return resp
        try:
            payload = await resp.read()
        except (aiohttp.ClientError, TimeoutError):
            payload = b""
        finally:
            resp.release()
        raise error_from_status(resp.status, decode(payload), resp.headers.get("Retry-After"))
