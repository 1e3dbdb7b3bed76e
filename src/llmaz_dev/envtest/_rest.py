"""A minimal synchronous HTTPS client for driving the API server during setup and teardown.

The control-plane driver is synchronous (it manages processes and runs inside pytest's session setup), so it
talks to kube-apiserver with urllib rather than an event loop. Only what setup needs is here: JSON requests,
server-side apply, and readiness probes. Tests use a real client of their own.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
_TIMEOUT = 10.0


class ApiError(RuntimeError):
    """A non-2xx answer from the API server (or the etcd gateway)."""

    def __init__(self, method: str, url: str, status: int, body: str) -> None:
        super().__init__(f"{method} {url}: HTTP {status}: {body[:500]}")
        self.status = status
        self.body = body


class RestClient:
    """Requests against one API server, authenticated by client certificate or bearer token."""

    def __init__(
        self,
        server: str,
        ca_file: Path,
        cert_file: Path | None = None,
        key_file: Path | None = None,
        token: str | None = None,
    ) -> None:
        self.server = server.rstrip("/")
        self._context = ssl.create_default_context(cafile=str(ca_file))
        if cert_file is not None:
            self._context.load_cert_chain(str(cert_file), str(key_file) if key_file else None)
        self._token = token

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        query: dict[str, str] | None = None,
        timeout: float = _TIMEOUT,
    ) -> Any:
        """Send one request; return the decoded JSON answer (or text), raise ApiError on non-2xx."""
        url = self.server + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        headers = {"Accept": "application/json", "Content-Type": content_type}
        if self._token is not None:
            headers["Authorization"] = f"Bearer {self._token}"
        data = None if body is None else json.dumps(body).encode()
        return send(urllib.request.Request(url, data, headers, method=method), self._context, timeout)

    def exists(self, path: str) -> bool:
        """Whether GET `path` finds an object (404: no; any other error is raised)."""
        try:
            self.request("GET", path)
        except ApiError as error:
            if error.status == 404:
                return False
            raise
        return True

    def apply(self, path: str, obj: dict[str, Any], field_manager: str) -> Any:
        """Server-side apply `obj` at `path` (the object's own URL), taking over conflicting fields."""
        query = {"fieldManager": field_manager, "force": "true"}
        return self.request("PATCH", path, obj, content_type=APPLY_CONTENT_TYPE, query=query)

    def get_text(self, path: str, timeout: float = _TIMEOUT) -> str:
        request = urllib.request.Request(self.server + path, headers={"Accept": "text/plain"})
        result = send(request, self._context, timeout)
        return result if isinstance(result, str) else json.dumps(result)


def plain_http(url: str, body: Any = None, timeout: float = _TIMEOUT) -> Any:
    """GET (no body) or POST JSON over plain HTTP: etcd's health endpoint and JSON gateway on loopback."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    return send(request, None, timeout)


def send(request: urllib.request.Request, context: ssl.SSLContext | None, timeout: float) -> Any:
    # No ProxyHandler: an http(s)_proxy in the environment must never see loopback control-plane traffic.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
    try:
        with opener.open(request, timeout=timeout) as response:
            payload: bytes = response.read()
    except urllib.error.HTTPError as error:
        detail = error.read().decode(errors="replace")
        raise ApiError(request.get_method(), request.full_url, error.code, detail) from error
    text = payload.decode(errors="replace")
    try:
        return json.loads(text)
    except ValueError:
        return text
