"""Local servers that speak just enough of each storage protocol for the loader, on loopback ports (or on a given
address, for pods of the real node to reach).

- `HubServer`: the part of the Hugging Face Hub API that the loader uses through `huggingface_hub` (model info with
  file metadata, `resolve` downloads with ETag / X-Repo-Commit / Range). Private repos demand a bearer token.
- `OssServer`: the part of the OSS API oss2 uses for the loader (ListObjectsV2, HEAD and ranged conditional GET).
  Limit: credentials are checked by access key ID only; the request signature is not verified.
- `ThrottlingProxy`: a TCP proxy that slows a real server (moto) down and records request heads, so a download can
  be killed half-way and its resumption observed.
Every server records the requests it saw; `rate` (bytes per second) throttles response bodies.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import escape

from aiohttp import web

CHUNK = 16 * 1024


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]


class _ThreadLoop:
    """An asyncio loop in a daemon thread, so synchronous tests and subprocesses can talk to the servers."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def call(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=30)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


class HttpServer:
    """Base: an aiohttp app on `host` (default 127.0.0.1) with a request log, failure injection and body
    throttling."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.seen: list[Seen] = []
        self.rate: int | None = None
        self.fail_next: list[int] = []  # statuses to answer to the next requests, in order
        self._thread = _ThreadLoop()
        self._runner: web.AppRunner | None = None
        self.port = 0

    def routes(self) -> list[web.RouteDef]:
        raise NotImplementedError

    @web.middleware
    async def _record(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        self.seen.append(Seen(request.method, request.path_qs, dict(request.headers)))
        if self.fail_next:
            return web.Response(status=self.fail_next.pop(0), text="injected failure")
        return await handler(request)

    def start(self) -> HttpServer:
        async def start() -> None:
            app = web.Application(middlewares=[self._record])
            app.add_routes(self.routes())
            self._runner = web.AppRunner(app)
            await self._runner.setup()
            site = web.TCPSite(self._runner, self.host, 0)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

        self._thread.call(start())
        return self

    def stop(self) -> None:
        if self._runner is not None:
            self._thread.call(self._runner.cleanup())
        self._thread.close()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def ranges_requested(self) -> list[str]:
        return [s.headers["Range"] for s in self.seen if "Range" in s.headers]

    async def send(self, request: web.Request, data: bytes, headers: dict[str, str]) -> web.StreamResponse:
        """Serve `data` honouring `Range: bytes=N-` / `bytes=N-M` and `If-Match` on the given ETag."""
        etag = headers.get("ETag", "")
        if_match = request.headers.get("If-Match")
        if if_match is not None and if_match.strip('"') != etag.strip('"'):
            return web.Response(status=412, text="precondition failed")
        start, end, status = 0, len(data) - 1, 200
        range_header = request.headers.get("Range", "")
        if range_header.startswith("bytes="):
            first, _, last = range_header[len("bytes=") :].partition("-")
            start, end, status = int(first), int(last) if last else len(data) - 1, 206
            if start >= len(data):
                return web.Response(status=416, headers={"Content-Range": f"bytes */{len(data)}"})
            headers = {**headers, "Content-Range": f"bytes {start}-{end}/{len(data)}"}
        body = data[start : end + 1]
        response = web.StreamResponse(status=status, headers={**headers, "Content-Length": str(len(body))})
        await response.prepare(request)
        if request.method == "HEAD":
            return response
        for offset in range(0, len(body), CHUNK):
            await response.write(body[offset : offset + CHUNK])
            if self.rate:
                await asyncio.sleep(CHUNK / self.rate)
        await response.write_eof()
        return response


@dataclass
class HubRepo:
    """A model repo: revision name -> {path: content}; every revision gets a fixed fake commit sha."""

    revisions: dict[str, dict[str, bytes]]
    token: str | None = None  # a private repo answers 401 unless this bearer token is sent
    commits: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in self.revisions:
            self.commits[name] = hashlib.sha1(name.encode()).hexdigest()

    def files_at(self, revision: str) -> tuple[str, dict[str, bytes]] | None:
        for name, sha in self.commits.items():
            if revision in (name, sha):
                return sha, self.revisions[name]
        return None


def is_lfs(path: str) -> bool:
    return path.endswith((".bin", ".safetensors", ".gguf"))


class HubServer(HttpServer):
    def __init__(self) -> None:
        super().__init__()
        self.repos: dict[str, HubRepo] = {}

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/api/models/{org}/{name}/revision/{revision}", self.model_info),
            web.route("*", "/{org}/{name}/resolve/{revision}/{path:.+}", self.resolve),
        ]

    def _revision(self, request: web.Request) -> tuple[HubRepo, str, dict[str, bytes]] | web.Response:
        """The repository, commit and files a request names, or the Hub's error response."""
        repo = self.repos.get(f"{request.match_info['org']}/{request.match_info['name']}")
        if repo is None:
            return _hub_error(404, "RepoNotFound", "Repository not found")
        if repo.token is not None and request.headers.get("Authorization") != f"Bearer {repo.token}":
            return _hub_error(401, "RepoNotFound", "Invalid username or password.")
        found = repo.files_at(request.match_info["revision"])
        if found is None:
            return _hub_error(404, "RevisionNotFound", "Invalid rev id")
        return repo, *found

    async def model_info(self, request: web.Request) -> web.Response:
        revision = self._revision(request)
        if isinstance(revision, web.Response):
            return revision
        repo, sha, files = revision
        siblings = [_sibling(path, data) for path, data in sorted(files.items())]
        return web.json_response(
            {
                "id": f"{request.match_info['org']}/{request.match_info['name']}",
                "sha": sha,
                "private": repo.token is not None,
                "siblings": siblings,
            }
        )

    async def resolve(self, request: web.Request) -> web.StreamResponse:
        revision = self._revision(request)
        if isinstance(revision, web.Response):
            return revision
        _, sha, files = revision
        data = files.get(request.match_info["path"])
        if data is None:
            return _hub_error(404, "EntryNotFound", "Entry not found", commit=sha)
        etag = hashlib.sha256(data).hexdigest() if is_lfs(request.match_info["path"]) else _git_blob_id(data)
        return await self.send(request, data, {"ETag": f'"{etag}"', "X-Repo-Commit": sha, "Accept-Ranges": "bytes"})


def _git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _sibling(path: str, data: bytes) -> dict[str, Any]:
    sibling: dict[str, Any] = {"rfilename": path, "size": len(data), "blobId": _git_blob_id(data)}
    if is_lfs(path):
        sibling["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
    return sibling


def _hub_error(status: int, code: str, message: str, commit: str | None = None) -> web.Response:
    headers = {"X-Error-Code": code, "X-Error-Message": message}
    if commit:
        headers["X-Repo-Commit"] = commit
    return web.json_response({"error": message}, status=status, headers=headers)


class OssServer(HttpServer):
    """Path-style OSS: `/<bucket>/?list-type=2&prefix=...`, `/<bucket>/<key>`."""

    def __init__(self, access_key_id: str | None = None, host: str = "127.0.0.1") -> None:
        super().__init__(host)
        self.buckets: dict[str, dict[str, bytes]] = {}
        self.access_key_id = access_key_id

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/{bucket}/", self.list_objects), web.route("*", "/{bucket}/{key:.+}", self.get_object)]

    def _check(self, request: web.Request) -> tuple[dict[str, bytes] | None, web.Response | None]:
        if self.access_key_id and not request.headers.get("Authorization", "").startswith(f"OSS {self.access_key_id}:"):
            return None, _oss_error(403, "AccessDenied", "You have no right to access this object.")
        bucket = self.buckets.get(request.match_info["bucket"])
        if bucket is None:
            return None, _oss_error(404, "NoSuchBucket", "The specified bucket does not exist.")
        return bucket, None

    async def list_objects(self, request: web.Request) -> web.Response:
        bucket, error = self._check(request)
        if bucket is None:
            return error  # type: ignore[return-value]
        prefix = request.query.get("prefix", "")
        contents = "".join(
            f"<Contents><Key>{escape(key)}</Key><LastModified>2024-01-01T00:00:00.000Z</LastModified>"
            f'<ETag>"{_md5(data)}"</ETag><Type>Normal</Type><Size>{len(data)}</Size>'
            "<StorageClass>Standard</StorageClass></Contents>"
            for key, data in sorted(bucket.items())
            if key.startswith(prefix)
        )
        body = (
            f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>{request.match_info["bucket"]}'
            f"</Name><Prefix>{escape(prefix)}</Prefix><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>"
            f"{contents}</ListBucketResult>"
        )
        return web.Response(body=body.encode(), content_type="application/xml")

    async def get_object(self, request: web.Request) -> web.StreamResponse:
        bucket, error = self._check(request)
        if bucket is None:
            return error  # type: ignore[return-value]
        data = bucket.get(request.match_info["key"])
        if data is None:
            return _oss_error(404, "NoSuchKey", "The specified key does not exist.")
        return await self.send(request, data, {"ETag": f'"{_md5(data)}"', "x-oss-request-id": "fake"})


def _md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest().upper()


def _oss_error(status: int, code: str, message: str) -> web.Response:
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{message}</Message>'
        "<RequestId>fake</RequestId><HostId>127.0.0.1</HostId></Error>"
    )
    return web.Response(
        status=status, body=body.encode(), content_type="application/xml", headers={"x-oss-request-id": "fake"}
    )


class ThrottlingProxy:
    """Forwards 127.0.0.1:<port> to an upstream port, throttling responses and recording request heads."""

    def __init__(self, upstream_port: int, rate: int | None = None) -> None:
        self.upstream_port = upstream_port
        self.rate = rate
        self.request_heads: list[str] = []
        self._thread = _ThreadLoop()
        self._server: asyncio.AbstractServer | None = None
        self.port = 0

    def start(self) -> ThrottlingProxy:
        async def start() -> None:
            self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
            self.port = self._server.sockets[0].getsockname()[1]

        self._thread.call(start())
        return self

    def stop(self) -> None:
        async def stop() -> None:
            if self._server is not None:
                self._server.close()

        self._thread.call(stop())
        self._thread.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        upstream = asyncio.ensure_future(self._pump(reader, up_writer, record=True))
        try:
            await self._pump(up_reader, writer, record=False)
        finally:
            upstream.cancel()
            writer.close()
            up_writer.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: bool) -> None:
        while data := await reader.read(CHUNK):
            if record:
                self.request_heads.append(data.decode("latin-1").split("\r\n\r\n", 1)[0])
            writer.write(data)
            await writer.drain()
            if self.rate and not record:
                await asyncio.sleep(len(data) / self.rate)
