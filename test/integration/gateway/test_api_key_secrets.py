"""The gateway process reads its API keys from labelled Secrets, live, as its own ServiceAccount (the generated
Role: list and watch on Secrets in its namespace only): a Secret's key works once created, a rotation and a
deletion apply without restart, and a tokens-per-minute budget holds."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest_asyncio

from llmaz_dev.envtest import Cluster
from llmaz_dev.testing.waiting import eventually

from .conftest import Engine, GatewayProcess, running_gateway
from .test_gateway_process import _objects

WAIT = 30.0
CHAT = "/v1/chat/completions"
# What the test engine reports of every answer (conftest.Engine): 2 prompt and 3 completion tokens.
USED = 5


def key_secret(namespace: str, name: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": {"llmaz.io/api-key": "true"}},
        "stringData": {k.replace("_", "-"): v for k, v in data.items()},
    }


@pytest_asyncio.fixture
async def keyed_gateway(gateway_kubeconfig: Path, namespace: str, tmp_path: Path) -> AsyncIterator[GatewayProcess]:
    args = ["--api-key-secrets=true", "--scale-to-zero=false", "--autoscaler=false"]
    async with running_gateway(gateway_kubeconfig, namespace, tmp_path / "gateway.log", args) as running:
        yield running


async def _chat(session: aiohttp.ClientSession, url: str, key: str, body: dict[str, Any]) -> tuple[int, Any, Any]:
    headers = {"Authorization": f"Bearer {key}"}
    async with session.post(url + CHAT, data=orjson.dumps(body), headers=headers) as resp:
        return resp.status, await resp.json(), resp.headers


async def test_a_secrets_key_works_rotates_and_is_revoked_without_restart_and_its_token_budget_holds(
    control_plane: Cluster, namespace: str, engine: Engine, keyed_gateway: GatewayProcess
) -> None:
    admin = control_plane.admin_client()
    model = f"keys-{namespace}"
    open_model, playground, endpoint_slice = _objects(namespace, model, engine.port)
    secrets = f"/api/v1/namespaces/{namespace}/secrets"
    admin.request("POST", "/apis/llmaz.io/v1alpha1/openmodels", open_model)
    try:
        admin.request("POST", f"/apis/inference.llmaz.io/v1alpha1/namespaces/{namespace}/playgrounds", playground)
        admin.request("POST", f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices", endpoint_slice)
        admin.request("POST", secrets, key_secret(namespace, "team-a", key="sk-first", tenant="team-a"))
        url = keyed_gateway.api
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT)) as session:

            async def answered(key: str) -> bool:
                return (await _chat(session, url, key, {"model": model}))[0] == 200

            async def refused(key: str) -> bool:
                status, answer, _ = await _chat(session, url, key, {"model": model})
                return status == 401 and answer["error"]["code"] == "invalid_api_key"

            await eventually(lambda: answered("sk-first"), within=WAIT, what="the Secret's key accepted")
            assert await refused("sk-unknown")

            # A rotation: the Secret's key replaced, the gateway not restarted.
            admin.request("PUT", f"{secrets}/team-a", key_secret(namespace, "team-a", key="sk-second", tenant="team-a"))
            await eventually(lambda: refused("sk-first"), within=WAIT, what="the old key refused after rotation")
            assert await answered("sk-second")

            # A revocation.
            admin.request("DELETE", f"{secrets}/team-a")
            await eventually(lambda: refused("sk-second"), within=WAIT, what="the key refused once deleted")

            # A budget: 100 tokens a minute, requests asking at most 20 and using USED each.
            budget, max_tokens = 100, 20
            admin.request(
                "POST",
                secrets,
                key_secret(namespace, "team-b", key="sk-b", tenant="team-b", tokens_per_minute=str(budget)),
            )
            await eventually(lambda: answered("sk-b"), within=WAIT, what="the budgeted key accepted")
            started = time.monotonic()
            served, limited = 1, None
            for _ in range(200):
                status, answer, headers = await _chat(session, url, "sk-b", {"model": model, "max_tokens": max_tokens})
                if status == 429:
                    limited = (answer["error"], headers.get("Retry-After"))
                    break
                assert status == 200
                served += 1
            elapsed = time.monotonic() - started
            assert limited is not None, "the budget never refused a request"
            error, retry_after = limited
            assert (error["type"], error["code"]) == ("tokens", "rate_limit_exceeded")
            assert retry_after is not None
            assert int(retry_after) >= 1
            # Tokens spent: what the engine reported; the budget may grow by its refill meanwhile.
            refilled = elapsed * budget / 60
            assert served * USED <= budget + refilled + max_tokens
            # Refused only once less than one request's reservation (max_tokens plus a quarter of its body) was left.
            reservation = max_tokens + len(orjson.dumps({"model": model, "max_tokens": max_tokens})) / 4 + 1
            assert served * USED >= budget - reservation

            async with session.get(keyed_gateway.metrics + "/metrics") as resp:
                text = await resp.text()
            assert 'llmaz_gateway_tenant_rejections_total{reason="tokens",tenant="team-b"} 1.0' in text
            assert f'llmaz_gateway_tenant_requests_total{{code="200",tenant="team-b"}} {float(served)}' in text
    finally:
        admin.request("DELETE", f"/apis/llmaz.io/v1alpha1/openmodels/{model}")
