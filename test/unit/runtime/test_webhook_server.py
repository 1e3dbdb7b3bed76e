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
import structlog
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
from llmaz.webhooks import webhooks
from llmaz_dev.testing.runnables import running, stop
from llmaz_dev.testing.waiting import eventually


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
    looked = 0
    reload = server.certs.reload

    def counted_reload() -> bool:
        nonlocal looked
        looked += 1
        return reload()

    server.certs.reload = counted_reload  # type: ignore[method-assign]
    task = asyncio.create_task(server.run())
    await eventually(lambda: looked >= 2, what="the server to look for its certificate twice")
    assert not server.started()  # no certificate yet
    first = new_serving_cert(ca, now, ["webhook.test"])
    write_pair(tmp_path, first)
    await asyncio.wait_for(server.wait_started(), 5)
    assert (await served_certificate(server.port, ca)).serial_number == first.cert.serial_number

    second = new_serving_cert(ca, now, ["webhook.test"])
    write_pair(tmp_path, second)

    async def serves_second() -> bool:
        return (await served_certificate(server.port, ca)).serial_number == second.cert.serial_number

    await eventually(serves_second, within=5, what="the renewed certificate served")

    async with aiohttp.ClientSession() as session:
        context = ssl.create_default_context(cadata=ca.cert_pem.decode())
        url = f"https://127.0.0.1:{server.port}{HOOK.path}"
        headers = {"Content-Type": "application/json", "Host": "webhook.test"}
        async with session.post(url, data=orjson.dumps(review("ok")), ssl=context, server_hostname="webhook.test",
                                headers=headers) as resp:  # fmt: skip
            assert (await resp.json())["response"]["allowed"] is True
    await stop(task)
    assert not server.started()


async def test_a_broken_pair_keeps_the_previous_certificate(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    ca = new_ca(now, "test-ca", "test")
    good = new_serving_cert(ca, now, ["webhook.test"])
    write_pair(tmp_path, good)
    server = WebhookServer([HOOK], host="127.0.0.1", port=0, cert_dir=tmp_path, cert_poll_interval=0.05)
    async with running(server):
        other = new_serving_cert(ca, now, ["webhook.test"])
        (tmp_path / "tls.crt").write_bytes(other.cert_pem)  # the key does not match it
        assert server.certs.reload() is False
        assert (await served_certificate(server.port, ca)).serial_number == good.cert.serial_number


def panics() -> float:
    return REGISTRY.get_sample_value("controller_runtime_webhook_panics_total") or 0.0


def deep_review(kind: str, depth: int) -> bytes:
    """A CREATE review of a `kind` whose spec nests `depth` levels (as JSON text: orjson refuses to encode it)."""
    group = "llmaz.io" if kind == "OpenModel" else "inference.llmaz.io"
    spec = b'{"a":' * (depth - 1) + b"{}" + b"}" * (depth - 1)
    head = orjson.dumps({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "deep", "kind": {"group": group, "version": "v1alpha1", "kind": kind},
                    "operation": "CREATE", "object": {"metadata": {"name": "d"}, "spec": "@"}},
    })  # fmt: skip
    return head.replace(b'"@"', spec)


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        ("OpenModel", "/mutate-llmaz-io-v1alpha1-openmodel"),
        ("Playground", "/mutate-inference-llmaz-io-v1alpha1-playground"),
        ("OpenModel", "/validate-llmaz-io-v1alpha1-openmodel"),
        ("Playground", "/validate-inference-llmaz-io-v1alpha1-playground"),
    ],
)
async def test_a_thousand_levels_deep_object_is_a_400_saying_so_and_no_panic(kind: str, path: str) -> None:
    async with TestClient(TestServer(WebhookServer(webhooks(), tls=False).app())) as c:
        before = panics()
        resp = await c.post(path, data=deep_review(kind, 1000), headers={"Content-Type": "application/json"})
        assert resp.status == 200
        response = orjson.loads(await resp.read())["response"]
        assert (response["uid"], response["allowed"], response["status"]["code"]) == ("deep", False, 400)
        assert response["status"]["message"] == (
            "couldn't decode AdmissionRequest: object is nested more than 100 levels deep"
        )
        assert panics() == before


async def test_request_derived_values_are_cut_short_in_the_log() -> None:
    huge = "x" * 1_000_000
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": huge, "kind": {"group": "g", "version": "v1", "kind": huge}, "operation": huge,
                    "name": huge, "namespace": huge, "userInfo": {"username": huge},
                    "object": {"metadata": {"name": huge}}},
    }  # fmt: skip
    unsupported = {**review, "apiVersion": huge}
    server = WebhookServer([HOOK], tls=False)
    with structlog.testing.capture_logs() as logs:
        await server.review(HOOK, orjson.dumps(review), "application/json")
        await server.review(HOOK, orjson.dumps(unsupported), "application/json")
    lines = [line for line in logs if line["event"] == "admission"]
    assert len(lines) == 2
    for line in lines:
        for key, value in line.items():
            if isinstance(value, str):
                assert len(value) <= 300, f"{key} logged with {len(value)} characters"
    assert lines[0]["name"].startswith("x" * 256)
    assert lines[0]["name"].endswith(f"...[{1_000_000 - 256} more characters]")
    assert {"uid", "kind", "name", "namespace", "operation", "user"} <= set(lines[0])


async def test_a_failing_handler_is_logged_with_its_error_cut_short() -> None:
    async def explode(request: AdmissionRequest) -> AdmissionResponse:
        raise ValueError("y" * 1_000_000)

    hook = Webhook("vboom.example.io", "/boom", WebhookType.VALIDATING, HOOK.rules, explode)
    server = WebhookServer([hook], tls=False)
    with structlog.testing.capture_logs() as logs:
        answer = orjson.loads(
            await server.review(hook, orjson.dumps(review("x", uid="u" * 100_000)), "application/json")
        )
    (failure,) = [line for line in logs if line["event"] == "webhook handler failed"]
    assert all(len(str(value)) <= 5000 for value in failure.values())
    assert len(answer["response"]["status"]["message"]) < 1200
    assert answer["response"]["uid"] == "u" * 100_000  # the answer still carries the whole uid
