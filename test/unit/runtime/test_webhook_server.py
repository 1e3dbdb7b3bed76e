"""The webhook server: 200 + AdmissionReview for every outcome, metrics, TLS, and certificate reload."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer
from cryptography import x509

from llmaz.certs.pki import KeyPair, new_ca, new_serving_cert
from llmaz.runtime.metrics import REGISTRY
from llmaz.runtime.webhook import (
    AdmissionRequest,
    AdmissionResponse,
    Rule,
    Webhook,
    WebhookServer,
    WebhookType,
    allowed,
    denied,
)


async def judge(request: AdmissionRequest) -> AdmissionResponse:
    if request.name == "boom":
        raise RuntimeError("handler bug")
    if request.name == "bad":
        return denied("spec: Forbidden: no")
    return allowed().with_warnings(["hello"])


HOOK = Webhook(
    "vthing.example.io", "/validate-thing", WebhookType.VALIDATING, (Rule(("g",), ("v1",), ("things",)),), judge
)


def review(name: str, uid: str = "u-1") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": uid, "kind": {"group": "g", "version": "v1", "kind": "Thing"}, "name": name,
                    "operation": "CREATE", "object": {"metadata": {"name": name}}},
    }  # fmt: skip


@pytest_asyncio.fixture
async def client() -> AsyncIterator[TestClient[Any, Any]]:
    async with TestClient(TestServer(WebhookServer([HOOK], tls=False).app())) as c:
        yield c


async def post(client: TestClient[Any, Any], body: bytes, content_type: str = "application/json") -> dict[str, Any]:
    resp = await client.post(HOOK.path, data=body, headers={"Content-Type": content_type})
    assert resp.status == 200
    doc: dict[str, Any] = orjson.loads(await resp.read())
    assert doc["kind"] == "AdmissionReview"
    response: dict[str, Any] = doc["response"]
    return response


async def test_an_allowed_request_is_answered_with_its_uid_and_warnings(client: TestClient[Any, Any]) -> None:
    assert await post(client, orjson.dumps(review("ok"))) == {"uid": "u-1", "allowed": True, "warnings": ["hello"]}


async def test_a_denial_is_http_200_with_a_403_status(client: TestClient[Any, Any]) -> None:
    response = await post(client, orjson.dumps(review("bad")))
    assert response["allowed"] is False
    assert response["status"]["code"] == 403


async def test_a_handler_exception_is_a_500_coded_denial_and_counted(client: TestClient[Any, Any]) -> None:
    before = REGISTRY.get_sample_value("controller_runtime_webhook_panics_total") or 0
    response = await post(client, orjson.dumps(review("boom", uid="u-9")))
    assert (response["uid"], response["allowed"], response["status"]["code"]) == ("u-9", False, 500)
    assert "handler bug" in response["status"]["message"]
    assert REGISTRY.get_sample_value("controller_runtime_webhook_panics_total") == before + 1


@pytest.mark.parametrize(
    ("body", "content_type"),
    [(b"", "application/json"), (b"{", "application/json"), (b"{}", "text/yaml"), (b"null", "application/json")],
)
async def test_malformed_input_is_a_400_coded_denial(
    client: TestClient[Any, Any], body: bytes, content_type: str
) -> None:
    response = await post(client, body, content_type)
    assert (response["allowed"], response["status"]["code"]) == (False, 400)


async def test_requests_are_counted_by_path_and_code(client: TestClient[Any, Any]) -> None:
    labels = {"webhook": HOOK.path, "code": "200"}
    before = REGISTRY.get_sample_value("controller_runtime_webhook_requests_total", labels) or 0
    await post(client, orjson.dumps(review("ok")))
    assert REGISTRY.get_sample_value("controller_runtime_webhook_requests_total", labels) == before + 1
    assert REGISTRY.get_sample_value("controller_runtime_webhook_requests_total", {**labels, "code": "500"}) is not None
    assert REGISTRY.get_sample_value("controller_runtime_webhook_requests_in_flight", {"webhook": HOOK.path}) == 0
    assert REGISTRY.get_sample_value("controller_runtime_webhook_latency_seconds_count", {"webhook": HOOK.path})


def test_two_webhooks_on_one_path_are_refused() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        WebhookServer([HOOK, HOOK], tls=False)


def write_pair(directory: Path, pair: KeyPair) -> None:
    # Key first, then certificate, each by atomic rename, as a certificate writer would.
    for name, data in (("tls.key", pair.key_pem), ("tls.crt", pair.cert_pem)):
        tmp = directory / f".{name}.tmp"
        tmp.write_bytes(data)
        tmp.replace(directory / name)


async def served_certificate(port: int, ca: KeyPair) -> x509.Certificate:
    context = ssl.create_default_context(cadata=ca.cert_pem.decode())
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="webhook.test")
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    return x509.load_der_x509_certificate(der)


async def test_tls_serving_waits_for_a_certificate_and_follows_renewed_files(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    ca = new_ca(now, "test-ca", "test")
    server = WebhookServer([HOOK], host="127.0.0.1", port=0, cert_dir=tmp_path, cert_poll_interval=0.05)
    stopping = asyncio.Event()
    task = asyncio.create_task(server.run(stopping))
    await asyncio.sleep(0.2)
    assert not server.started()  # no certificate yet
    first = new_serving_cert(ca, now, ["webhook.test"])
    write_pair(tmp_path, first)
    await asyncio.wait_for(server.wait_started(), 5)
    assert (await served_certificate(server.port, ca)).serial_number == first.cert.serial_number

    second = new_serving_cert(ca, now, ["webhook.test"])
    write_pair(tmp_path, second)
    for _ in range(100):
        if (await served_certificate(server.port, ca)).serial_number == second.cert.serial_number:
            break
        await asyncio.sleep(0.05)
    assert (await served_certificate(server.port, ca)).serial_number == second.cert.serial_number

    async with aiohttp.ClientSession() as session:
        context = ssl.create_default_context(cadata=ca.cert_pem.decode())
        url = f"https://127.0.0.1:{server.port}{HOOK.path}"
        headers = {"Content-Type": "application/json", "Host": "webhook.test"}
        async with session.post(url, data=orjson.dumps(review("ok")), ssl=context, server_hostname="webhook.test",
                                headers=headers) as resp:  # fmt: skip
            assert (await resp.json())["response"]["allowed"] is True
    stopping.set()
    await asyncio.wait_for(task, 5)
    assert not server.started()


async def test_a_broken_pair_keeps_the_previous_certificate(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    ca = new_ca(now, "test-ca", "test")
    good = new_serving_cert(ca, now, ["webhook.test"])
    write_pair(tmp_path, good)
    server = WebhookServer([HOOK], host="127.0.0.1", port=0, cert_dir=tmp_path, cert_poll_interval=0.05)
    stopping = asyncio.Event()
    task = asyncio.create_task(server.run(stopping))
    await asyncio.wait_for(server.wait_started(), 5)
    other = new_serving_cert(ca, now, ["webhook.test"])
    (tmp_path / "tls.crt").write_bytes(other.cert_pem)  # the key does not match it
    assert server.certs.reload() is False
    assert (await served_certificate(server.port, ca)).serial_number == good.cert.serial_number
    stopping.set()
    await asyncio.wait_for(task, 5)
