"""The manager's three HTTP servers alone in a process, for tests that measure their memory or attack them.

`python -m llmaz_dev.testing.servers [--read-timeout SECONDS]` serves, on 127.0.0.1 with free ports: the admission
webhook server (TLS, the eight llmaz webhooks), the metrics server (TLS, delegated auth) and the probe server
(plain HTTP, one passing readiness check), all three with that read deadline. It prints one JSON line
`{"webhook": port, "metrics": port, "probes": port}` and serves until its stdin closes. `ServersProcess`
starts it from a test and reads its peak resident memory.

Limits: there is no API server. The webhooks warn about no missing references, and TokenReviews and
SubjectAccessReviews are answered by `FakeReviewer`: only `READER_TOKEN` is a valid token, and its user may
read /metrics. The certificates are self-signed; clients must not verify them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import orjson

from llmaz.certs import ensure_self_signed
from llmaz.runtime import log
from llmaz.runtime.client import Client
from llmaz.runtime.server.authn import SUBJECT_ACCESS_REVIEWS, TOKEN_REVIEWS, DelegatingAuth
from llmaz.runtime.server.healthz import HealthProbeServer
from llmaz.runtime.server.metrics_server import MetricsServer
from llmaz.runtime.webhook import WebhookServer
from llmaz.runtime.webhook.server import Limits
from llmaz.webhooks import webhooks
from llmaz_dev.testing.runnables import started

READER_TOKEN = "reader-token"
READER = "system:serviceaccount:test:reader"


class FakeReviewer:
    """Answers TokenReviews and SubjectAccessReviews as `Client.request` would; counts them."""

    def __init__(self) -> None:
        self.token_reviews = 0
        self.access_reviews = 0

    async def request(self, method: str, path: str, body: Any = None, **_: Any) -> dict[str, Any]:
        await asyncio.sleep(0)  # as a real API call, it yields to the loop: concurrent callers overlap
        if path == TOKEN_REVIEWS:
            self.token_reviews += 1
            valid = body["spec"]["token"] == READER_TOKEN
            return {"status": {"authenticated": True, "user": {"username": READER}} if valid else {}}
        if path == SUBJECT_ACCESS_REVIEWS:
            self.access_reviews += 1
            spec = body["spec"]
            allowed = spec["user"] == READER and spec["nonResourceAttributes"]["path"] == "/metrics"
            return {"status": {"allowed": allowed}}
        raise AssertionError(f"unexpected API call {method} {path}")


async def serve(read_timeout: float) -> None:
    log.configure("warning", "json")
    with tempfile.TemporaryDirectory() as tmp:
        certs = Path(tmp)
        ensure_self_signed(certs, ["localhost"], ["127.0.0.1", "::1"])
        webhook = WebhookServer(
            webhooks(), host="127.0.0.1", port=0, cert_dir=certs, limits=Limits(read_timeout=read_timeout)
        )
        auth = DelegatingAuth(cast(Client, FakeReviewer()))
        metrics = MetricsServer("127.0.0.1:0", auth=auth, cert_dir=certs, read_timeout=read_timeout)
        probes = HealthProbeServer("127.0.0.1:0", read_timeout=read_timeout)
        probes.readyz.add("ready", lambda: True)
        async with started(webhook, metrics, probes):
            await asyncio.gather(webhook.wait_started(), metrics.wait_started(), probes.wait_started())
            ports = {"webhook": webhook.port, "metrics": metrics.port, "probes": probes.port}
            sys.stdout.write(orjson.dumps(ports).decode() + "\n")
            sys.stdout.flush()
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


@dataclass
class ServersProcess:
    """`python -m llmaz_dev.testing.servers` as a child process: `async with ServersProcess.start() as servers`.

    Its stderr goes to a file (`stderr()`), so that nothing it logs can block it on a full pipe.
    """

    process: asyncio.subprocess.Process
    ports: dict[str, int]
    errors: IO[bytes]

    @classmethod
    @contextlib.asynccontextmanager
    async def start(cls, read_timeout: float = 10.0, within: float = 60.0) -> AsyncIterator[ServersProcess]:
        with tempfile.TemporaryFile() as errors:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "llmaz_dev.testing.servers", "--read-timeout", str(read_timeout),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=errors,
            )  # fmt: skip
            assert process.stdout is not None
            assert process.stdin is not None
            try:
                line = await asyncio.wait_for(process.stdout.readline(), within)
                if not line:
                    raise RuntimeError("the servers process exited before serving")
                yield cls(process, orjson.loads(line), errors)
            finally:
                process.stdin.close()
                try:
                    await asyncio.wait_for(process.wait(), within)
                except TimeoutError:
                    process.kill()
                    await process.wait()

    def peak_rss(self) -> int:
        """The process's peak resident memory so far (VmHWM), in bytes."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmHWM in /proc/<pid>/status")

    def stderr(self) -> str:
        """What the process has written to stderr so far."""
        self.errors.seek(0)
        return self.errors.read().decode(errors="replace")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m llmaz_dev.testing.servers")
    parser.add_argument("--read-timeout", type=float, default=10.0)
    asyncio.run(serve(parser.parse_args().read_timeout))


if __name__ == "__main__":
    main()
