"""Hostile traffic against the three servers (webhooks, metrics, probes), run in their own process on loopback:
random bytes, huge heads and bodies, bad JSON, wrong content types and methods, path tricks, broken chunking,
junk credentials and slow clients. Whatever arrives, no answer is a 5xx, memory stays bounded, nothing is
logged as an unhandled error, and each server still answers a proper request afterwards.

The requests are drawn from a seeded generator (the seed is in the test id), bounded in count (600) and time
(each exchange gives up after the servers' read timeout plus a margin).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import ssl
from collections import Counter
from collections.abc import Callable

import orjson
import pytest

from llmaz_dev.testing.servers import READER_TOKEN, ServersProcess

MiB = 1024 * 1024
READ_TIMEOUT = 1.0
REQUESTS_PER_SERVER = 200
WEBHOOK_PATHS = [
    "/mutate-llmaz-io-v1alpha1-openmodel",
    "/validate-llmaz-io-v1alpha1-openmodel",
    "/mutate-inference-llmaz-io-v1alpha1-playground",
    "/validate-inference-llmaz-io-v1alpha1-playground",
    "/validate-inference-llmaz-io-v1alpha1-service",
    "/mutate-inference-llmaz-io-v1alpha1-backendruntime",
]
PATH_TRICKS = [
    "/../{p}", "//{p}", "/%2e%2e/{p}", "{p}/../../etc/passwd", "{p}%00", "{p}?{q}", "{p}#frag", "/{p}",
    "http://evil.example{p}", "*", "{p}/", "{p};x=1", "/%ff%fe", "/\u00e9", "/" + "a" * 5000,
]  # fmt: skip
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT", "HEAD", "BREW", "G\x00T"]


def head(method: str, target: str, headers: list[tuple[str, str]], version: str = "HTTP/1.1") -> bytes:
    lines = [f"{method} {target} {version}", "Host: fuzz", *(f"{k}: {v}" for k, v in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape")


def review(rng: random.Random) -> bytes:
    """An AdmissionReview-ish body: sometimes right, mostly wrong in one or more ways."""
    junk: list[object] = [None, 1, -1, 2**70, 1.5, "", "x" * rng.randint(0, 3000), [], {}, [[[]]], True]
    request: dict[str, object] = {
        "uid": rng.choice(["u", "", 3, None, "\u2603" * 10]),
        "kind": rng.choice([{"group": "llmaz.io", "version": "v1alpha1", "kind": "OpenModel"}, *junk]),
        "operation": rng.choice(["CREATE", "UPDATE", "DELETE", *junk]),
        "object": rng.choice([{"metadata": {"name": "m"}, "spec": {"familyName": "f", "source": {"uri": "oss://b"}}},
                              *junk]),
        "oldObject": rng.choice([None, {"spec": {"createdAt": rng.choice(junk)}}, *junk]),
        "userInfo": rng.choice([{"username": "x" * rng.randint(0, 5000)}, *junk]),
    }  # fmt: skip
    for key in rng.sample(sorted(request), rng.randint(0, 3)):
        del request[key]
    body = {"apiVersion": rng.choice(["admission.k8s.io/v1", "admission.k8s.io/v1beta1", "v1", 7]),
            "kind": rng.choice(["AdmissionReview", "Pod", None]), "request": request}  # fmt: skip
    text = json.dumps(body, ensure_ascii=rng.random() < 0.5).encode()  # json: 2**70 is a number, not an error
    if rng.random() < 0.2:  # truncated or corrupted JSON
        text = text[: rng.randint(0, len(text))] + bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 8)))
    return text


def chunked(rng: random.Random, body: bytes) -> bytes:
    size = rng.choice([f"{len(body):x}", "zz", "-1", "ffffffffffffffff", f"{len(body) + 10:x}", f"{len(body):x};ext=1"])
    tail = rng.choice([b"\r\n0\r\n\r\n", b"\r\n0\r\nTrailer: x\r\n\r\n", b"", b"\r\nnot-a-chunk\r\n"])
    return size.encode() + b"\r\n" + body + tail


def hostile(rng: random.Random, paths: list[str], server: str) -> tuple[bytes, float]:
    """(bytes to send, seconds to pause halfway: slow clients); the pause stays under the read timeout."""
    path = rng.choice(paths)
    kind = rng.randrange(12)
    if kind == 0:  # random bytes
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 3000))), 0.0
    if kind == 1:  # a huge header, or very many
        if rng.random() < 0.5:
            return head("GET", path, [("X-Big", "b" * rng.randint(8000, 70000))]), 0.0
        return head("GET", path, [(f"X-{i}", "v") for i in range(rng.randint(100, 400))]), 0.0
    if kind == 2:  # a huge declared body, of which little arrives
        length = rng.choice([10**9, 8 * MiB, 2**63 - 1, -5])
        return head("POST", path, [("Content-Type", "application/json"), ("Content-Length", str(length))]) + b"{", 0.0
    if kind == 3:  # bad JSON, or no JSON at all
        body = review(rng)
        return post(path, body), 0.0
    if kind == 4:  # wrong or odd content types
        body = review(rng)
        content_type = rng.choice(["text/plain", "", "application/json; charset=latin-1", "application/yaml",
                                   "multipart/form-data; boundary=x", "application/json\x7f"])  # fmt: skip
        headers = [("Content-Type", content_type), ("Content-Length", str(len(body)))]
        return head("POST", path, headers) + body, 0.0
    if kind == 5:  # path tricks
        target = rng.choice(PATH_TRICKS).format(p=path.lstrip("/") if rng.random() < 0.5 else path, q="q" * 3000)
        return head(rng.choice(["GET", "POST"]), target, [("Content-Length", "0")]), 0.0
    if kind == 6:  # odd methods and versions
        version = rng.choice(["HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/9.9", "HTTPS/1.1", ""])
        return head(rng.choice(METHODS), path, [("Content-Length", "0")], version), 0.0
    if kind == 7:  # broken chunked encoding
        body = review(rng)
        headers = [
            ("Content-Type", "application/json"),
            ("Transfer-Encoding", rng.choice(["chunked", "gzip, chunked", "chunked, chunked", "x"])),
        ]
        return head("POST", path, headers) + chunked(rng, body), 0.0  # fmt: skip
    if kind == 8:  # request smuggling shapes: both framings, duplicated lengths
        body = review(rng)
        headers = [("Content-Length", str(len(body))), ("Content-Length", str(len(body) + 1)),
                   ("Transfer-Encoding", "chunked"), ("Content-Type", "application/json")]  # fmt: skip
        return head("POST", path, rng.sample(headers, rng.randint(1, 4))) + body, 0.0
    if kind == 9:  # junk credentials
        token = rng.choice(["Bearer " + "t" * rng.randint(0, 9000), "Bearer \udcff\udcfe", "Bearer a b", "Basic x",
                            "Bearer " + READER_TOKEN + "\x00", "Negotiate", "Bearer"])  # fmt: skip
        return head("GET", path, [("Authorization", token)]), 0.0
    if kind == 10:  # HTTP/2 preface, TLS inside TLS, pipelined junk
        preludes = [b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", b"\x16\x03\x01\x02\x00\x01", head("GET", path, []) * 50]
        return rng.choice(preludes), 0.0
    # a slow client: a proper request, with a pause in the middle of it
    return post(path, review(rng)), rng.uniform(0.1, READ_TIMEOUT / 2)


def post(path: str, body: bytes) -> bytes:
    return head("POST", path, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]) + body


async def exchange(port: int, tls: bool, data: bytes, pause: float) -> int | None:
    """Send `data` (pausing halfway) and return the status of the first answer, or None if there was none."""
    context = None
    if tls:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # the servers' self-signed certificates
    try:
        async with asyncio.timeout(READ_TIMEOUT * 3 + 5):
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
            try:
                half = len(data) // 2
                writer.write(data[:half])
                if pause:
                    await writer.drain()
                    await asyncio.sleep(pause)  # the slow client under test, not a synchronisation
                writer.write(data[half:])
                await writer.drain()
                line = await reader.readline()
            finally:
                writer.close()
    except (ConnectionError, ssl.SSLError, TimeoutError):
        return None
    parts = line.split()
    return int(parts[1]) if len(parts) >= 2 and parts[0].startswith(b"HTTP/") and parts[1].isdigit() else None


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", [20251124])
async def test_hostile_requests_get_no_5xx_and_leave_every_server_serving(seed: int) -> None:
    rng = random.Random(seed)
    async with ServersProcess.start(read_timeout=READ_TIMEOUT) as servers:
        targets: list[tuple[str, bool, list[str]]] = [
            ("webhook", True, WEBHOOK_PATHS),
            ("metrics", True, ["/metrics", "/metrics/", "/healthz"]),
            ("probes", False, ["/healthz", "/readyz", "/readyz/ready", "/healthz/ping", "/readyz/none"]),
        ]
        plan = [
            (server, tls, *hostile(rng, paths, server))
            for server, tls, paths in targets
            for _ in range(REQUESTS_PER_SERVER)
        ]
        rng.shuffle(plan)
        gate = asyncio.Semaphore(24)

        async def one(server: str, tls: bool, data: bytes, pause: float) -> tuple[str, int | None]:
            async with gate:
                return server, await exchange(servers.ports[server], tls, data, pause)

        results = await asyncio.gather(*(one(*item) for item in plan))
        statuses = Counter(results)
        assert len(results) >= 500
        assert not [key for key in statuses if key[1] is not None and key[1] >= 500], statuses
        assert servers.peak_rss() < 256 * MiB

        await assert_still_serving(servers.ports)
        errors = servers.stderr()
        assert "Traceback" not in errors, errors[-3000:]


async def assert_still_serving(ports: dict[str, int]) -> None:
    valid = orjson.dumps({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "after", "kind": {"group": "llmaz.io", "version": "v1alpha1", "kind": "OpenModel"},
                    "operation": "CREATE", "object": {"metadata": {"name": "m"},
                                                      "spec": {"familyName": "f", "source": {"uri": "s3://b/p"}}}},
    })  # fmt: skip
    checks: list[tuple[str, bool, bytes, Callable[[int | None], bool]]] = [
        ("webhook", True, head("POST", "/mutate-llmaz-io-v1alpha1-openmodel",
                               [("Content-Type", "application/json"), ("Content-Length", str(len(valid)))]) + valid,
         lambda s: s == 200),
        ("metrics", True, head("GET", "/metrics", [("Authorization", f"Bearer {READER_TOKEN}")]), lambda s: s == 200),
        ("probes", False, head("GET", "/readyz", []), lambda s: s == 200),
    ]  # fmt: skip
    for server, tls, data, ok in checks:
        status = None
        with contextlib.suppress(AssertionError):
            status = await exchange(ports[server], tls, data, 0.0)
        assert ok(status), f"{server} answered {status} after the fuzzing"
