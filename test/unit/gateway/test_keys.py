"""API keys held in Secrets: identities, expiry, rotation, refusal of bad values, and the limits per key."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
from structlog.testing import capture_logs

from llmaz.gateway.proxy.auth import Authenticator, parse_keys
from llmaz.gateway.proxy.errors import OpenAIError
from llmaz.gateway.proxy.keys import KeyPolicy, SecretKeys, compact_secret, digest, parse_secret
from llmaz.gateway.proxy.limits import LimitReachedError, Limits, reservation_of
from llmaz.gateway.proxy.server import GatewayOptions
from llmaz.gateway.proxy.usage import Usage
from llmaz.runtime.cache import Obj
from llmaz_dev.testing.clock import FakeClock
from llmaz_dev.testing.informer import FakeInformer

from .support import API_KEYS_NAMESPACE as NAMESPACE
from .support import Cluster, engines, running_gateway, secret


def authenticator(*secrets: Obj, clock: FakeClock | None = None) -> tuple[Authenticator, FakeInformer]:
    informer = FakeInformer()
    for s in secrets:
        informer.add(s)
    informer.mark_synced()
    return Authenticator(None, SecretKeys(informer), clock or FakeClock()), informer


def refusal(auth: Authenticator, key: str) -> OpenAIError | None:
    try:
        auth.check(f"Bearer {key}")
    except OpenAIError as err:
        return err
    return None


def test_the_informer_never_holds_the_key_itself() -> None:
    compacted = secret("team-a", key="sk-plain-text", tenant="team-a")
    assert "sk-plain-text" not in repr(compacted)
    assert compacted["data"]["key-sha256"] == digest("sk-plain-text").hex()


def test_a_secrets_key_is_accepted_as_its_tenant_with_its_limits() -> None:
    auth, _ = authenticator(
        secret("a", key="sk-a", tenant="team-a", requests_per_minute="10", may_wake="false", priority="7")
    )
    caller = auth.check("Bearer sk-a")
    assert caller.tenant == "team-a"
    assert caller.policy is not None
    assert caller.policy.requests_per_minute == 10
    assert caller.policy.priority == 7
    assert not caller.may_wake
    assert refusal(auth, "sk-b") is not None


def test_a_deleted_secrets_key_is_refused_and_a_rotated_one_replaced_at_once() -> None:
    auth, informer = authenticator(secret("a", key="sk-old", tenant="team-a"), secret("b", key="sk-b", tenant="b"))
    informer.update(secret("a", key="sk-new", tenant="team-a"))
    old = refusal(auth, "sk-old")
    assert old is not None
    assert (old.status, old.code) == (401, "invalid_api_key")
    assert auth.check("Bearer sk-new").tenant == "team-a"
    informer.delete(secret("b", key="sk-b", tenant="b"))
    revoked = refusal(auth, "sk-b")
    assert revoked is not None
    assert (revoked.status, revoked.code) == (401, "invalid_api_key")


def test_an_expired_key_is_refused_as_invalid_and_counted_against_its_tenant() -> None:
    clock = FakeClock(wall_start=datetime(2026, 1, 1, tzinfo=UTC))
    auth, _ = authenticator(secret("a", key="sk-a", tenant="team-a", expires="2026-01-01T00:00:10Z"), clock=clock)
    assert auth.check("Bearer sk-a").tenant == "team-a"
    clock.step(10)
    expired = refusal(auth, "sk-a")
    assert expired is not None
    assert (expired.status, expired.code) == (401, "invalid_api_key")
    assert "expired" in expired.message
    assert expired.tenant == "team-a"


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("tenant", "", "data.tenant"),
        ("tenant", "team a", "data.tenant"),
        ("requests_per_minute", "ten", "data.requests-per-minute"),
        ("tokens_per_minute", "0", "data.tokens-per-minute"),
        ("max_streams", "-1", "data.max-streams"),
        ("expires", "tomorrow", "data.expires"),
        ("expires", "2026-01-01T00:00:00", "data.expires"),
        ("may_wake", "no", "data.may-wake"),
        ("priority", "10", "data.priority"),
        ("priority", "high", "data.priority"),
    ],
)
def test_a_secret_with_a_bad_value_refuses_its_key_and_logs_which_field(field: str, value: str, named: str) -> None:
    values = {"key": "sk-secret-value", "tenant": "team-a", field: value}
    with capture_logs() as logs:
        auth, _ = authenticator(secret("bad", **values))
    err = refusal(auth, "sk-secret-value")
    assert err is not None
    assert (err.status, err.code) == (401, "invalid_api_key")
    assert err.detail is not None
    assert named in err.detail
    [line] = [line for line in logs if line["log_level"] == "error"]
    assert line["secret"] == f"{NAMESPACE}/bad"
    assert named in line["reason"]
    assert "sk-secret-value" not in repr(logs)


def test_a_secret_without_a_key_or_with_undecodable_data_is_refused() -> None:
    refused = parse_secret(secret("nokey", tenant="t")).refused
    assert refused == "data.key must hold the key (base64 of a non-empty UTF-8 string)"
    raw = {"metadata": {"name": "x", "namespace": NAMESPACE}, "data": {"key": "not base64!", "tenant": "dA=="}}
    assert parse_secret(compact_secret(raw)).refused is not None


def test_one_key_in_two_secrets_is_refused() -> None:
    auth, _ = authenticator(secret("a", key="sk-same", tenant="a"), secret("b", key="sk-same", tenant="b"))
    err = refusal(auth, "sk-same")
    assert err is not None
    assert err.code == "invalid_api_key"


def test_unknown_keys_wait_for_the_secrets_to_be_listed() -> None:
    informer = FakeInformer()
    auth = Authenticator(None, SecretKeys(informer), FakeClock())
    err = refusal(auth, "sk-a")
    assert err is not None
    assert err.status == 503


def test_the_keys_file_may_name_a_tenant_and_its_old_format_still_works() -> None:
    keys = parse_keys("sk-1\nsk-2 tenant=team-b\nsk 3 with spaces\n")
    assert keys == {digest("sk-1"): "default", digest("sk-2"): "team-b", digest("sk 3 with spaces"): "default"}


# Limits, on a fake clock


def policy(**limits: Any) -> KeyPolicy:
    return KeyPolicy(tenant="t", source=limits.pop("source", f"{NAMESPACE}/t"), **limits)


def test_requests_per_minute_refill_continuously_and_say_when_to_retry() -> None:
    clock = FakeClock()
    limits = Limits(clock.now)
    key = policy(requests_per_minute=6)  # one every 10 s
    for _ in range(6):
        limits.admit(key, 0, False).finish(None, True)
    with pytest.raises(LimitReachedError) as refused:
        limits.admit(key, 0, False)
    assert (refused.value.limit, refused.value.retry_after) == ("requests", 10)
    clock.step(9.5)
    with pytest.raises(LimitReachedError) as refused:
        limits.admit(key, 0, False)
    assert refused.value.retry_after == 1
    clock.step(0.5)
    limits.admit(key, 0, False)


def test_tokens_are_reserved_before_and_settled_from_the_usage_after() -> None:
    clock = FakeClock()
    limits = Limits(clock.now)
    key = policy(tokens_per_minute=600)  # 10 a second
    first = limits.admit(key, 500, False)
    with pytest.raises(LimitReachedError) as refused:
        limits.admit(key, 200, False)  # 100 left of the reservation
    assert (refused.value.limit, refused.value.retry_after) == ("tokens", 10)
    first.finish(Usage(prompt_tokens=50, completion_tokens=50), True)  # 400 reserved and not used come back
    second = limits.admit(key, 200, False)
    second.finish(None, False)  # no engine answered: all back
    third = limits.admit(key, 500, False)
    third.finish(None, True)  # answered, usage unknown: the reservation stays spent
    with pytest.raises(LimitReachedError):
        limits.admit(key, 1, False)


def test_requests_in_flight_together_reserve_no_more_than_the_budget() -> None:
    clock = FakeClock()
    limits = Limits(clock.now)
    key = policy(tokens_per_minute=1000)
    admitted = []
    for _ in range(100):
        try:
            admitted.append(limits.admit(key, 130, False))
        except LimitReachedError:
            break
    assert len(admitted) * 130 <= 1000 < (len(admitted) + 1) * 130


def test_usage_beyond_the_reservation_is_charged_and_delays_the_next_request() -> None:
    clock = FakeClock()
    limits = Limits(clock.now)
    key = policy(tokens_per_minute=600)  # 10 a second
    limits.admit(key, 600, False).finish(Usage(prompt_tokens=100, completion_tokens=600), True)  # 100 over
    with pytest.raises(LimitReachedError) as refused:
        limits.admit(key, 50, False)
    assert refused.value.retry_after == 15  # 100 owed and 50 to reserve, at 10 a second


def test_a_reservation_above_the_budget_waits_for_a_full_bucket() -> None:
    clock = FakeClock()
    limits = Limits(clock.now)
    key = policy(tokens_per_minute=60)
    limits.admit(key, 1000, False).finish(Usage(1, 1), True)
    with pytest.raises(LimitReachedError) as refused:
        limits.admit(key, 1000, False)
    assert refused.value.retry_after == 2
    clock.step(2)
    limits.admit(key, 1000, False)


def test_streams_in_flight_are_capped_and_a_refusal_spends_nothing() -> None:
    clock = FakeClock()
    limits = Limits(clock.now)
    key = policy(max_streams=1, requests_per_minute=2)
    held = limits.admit(key, 0, True)
    with pytest.raises(LimitReachedError) as refused:
        limits.admit(key, 0, True)
    assert refused.value.limit == "streams"
    held.finish(None, True)
    held.finish(None, True)  # idempotent: the stream is freed once
    limits.admit(key, 0, True)  # the refused stream took no request of the two per minute
    with pytest.raises(LimitReachedError) as refused:
        limits.admit(key, 0, False)
    assert refused.value.limit == "requests"


def test_a_deleted_secrets_budget_is_forgotten() -> None:
    clock = FakeClock()
    limits = Limits(clock.now)
    informer = FakeInformer()
    SecretKeys(informer, forget=limits.forget)
    informer.add(secret("a", key="sk-a", tenant="a", requests_per_minute="1"))
    key = policy(requests_per_minute=1, source=f"{NAMESPACE}/a")
    limits.admit(key, 0, False)
    with pytest.raises(LimitReachedError):
        limits.admit(key, 0, False)
    informer.delete(secret("a", key="sk-a", tenant="a", requests_per_minute="1"))
    limits.admit(key, 0, False)  # a Secret made again under the name starts afresh


def test_each_key_has_its_own_budget() -> None:
    clock = FakeClock()
    limits = Limits(clock.now)
    a, b = policy(requests_per_minute=1, source="ns/a"), policy(requests_per_minute=1, source="ns/b")
    limits.admit(a, 0, False)
    with pytest.raises(LimitReachedError):
        limits.admit(a, 0, False)
    limits.admit(b, 0, False)


def test_the_reservation_is_max_tokens_or_the_default_plus_a_quarter_of_the_body() -> None:
    assert reservation_of(b"x" * 40, {"max_tokens": 7}, 1024) == 17
    assert reservation_of(b"x" * 41, {"max_completion_tokens": 7}, 1024) == 18
    assert reservation_of(b"x" * 40, {}, 1024) == 1034
    assert reservation_of(b"x" * 40, {"max_tokens": "7"}, 1024) == 1034


# Through the gateway


async def test_over_a_limit_the_gateway_answers_429_as_openai_with_retry_after() -> None:
    auth, _ = authenticator(secret("a", key="sk-a", tenant="team-a", requests_per_minute="1"))
    clock = FakeClock()
    async with engines(1) as (engine,):
        cluster = Cluster().synced()
        cluster.serve("m", engine.endpoint)
        async with running_gateway(cluster, api_keys=auth, limits=Limits(clock.now)) as gw:
            headers = {"Authorization": "Bearer sk-a"}
            status, _ = await gw.post("/v1/chat/completions", {"model": "m"}, headers=headers)
            assert status == 200
            async with gw.session.post(gw.url + "/v1/chat/completions", json={"model": "m"}, headers=headers) as resp:
                assert resp.status == 429
                assert resp.headers["Retry-After"] == "60"
                error = (await resp.json())["error"]
            assert (error["type"], error["code"], error["param"]) == ("requests", "rate_limit_exceeded", None)
            assert gw.sample("llmaz_gateway_tenant_requests_total", tenant="team-a", code="200") == 1
            assert gw.sample("llmaz_gateway_tenant_requests_total", tenant="team-a", code="429") == 1
            assert gw.sample("llmaz_gateway_tenant_rejections_total", tenant="team-a", reason="requests") == 1
            assert gw.sample("llmaz_gateway_tenant_tokens_total", tenant="team-a", kind="completion") == 5
            assert gw.sample("llmaz_gateway_tenant_tokens_total", tenant="team-a", kind="prompt") == 3
            assert len(engine.requests) == 1


async def test_a_flood_from_one_key_is_bounded_and_leaves_another_keys_requests_alone() -> None:
    auth, _ = authenticator(
        secret("a", key="sk-a", tenant="team-a", requests_per_minute="5", max_streams="2"),
        secret("b", key="sk-b", tenant="team-b", requests_per_minute="5"),
    )
    clock = FakeClock()
    async with engines(1) as (engine,):
        cluster = Cluster().synced()
        cluster.serve("m", engine.endpoint)
        async with running_gateway(cluster, api_keys=auth, limits=Limits(clock.now)) as gw:
            flood = [
                gw.post("/v1/chat/completions", {"model": "m"}, headers={"Authorization": "Bearer sk-a"})
                for _ in range(50)
            ]
            others = [
                gw.post("/v1/chat/completions", {"model": "m"}, headers={"Authorization": "Bearer sk-b"})
                for _ in range(5)
            ]
            answers = await asyncio.gather(*flood, *others)
            flooded = [status for status, _ in answers[:50]]
            assert sorted(flooded) == [200] * 5 + [429] * 45
            assert [status for status, _ in answers[50:]] == [200] * 5
            assert len(engine.requests) == 10


async def test_a_request_asking_more_than_the_cap_is_refused_naming_the_field() -> None:
    async with engines(1) as (engine,):
        cluster = Cluster().synced()
        cluster.serve("m", engine.endpoint)
        async with running_gateway(cluster, GatewayOptions(max_tokens_cap=100)) as gw:
            status, answer = await gw.post("/v1/chat/completions", {"model": "m", "max_completion_tokens": 101})
            assert status == 400
            error = answer["error"]
            assert (error["param"], error["code"]) == ("max_completion_tokens", "max_tokens_too_large")
            status, _ = await gw.post("/v1/chat/completions", {"model": "m", "max_tokens": 100})
            assert status == 200
            assert len(engine.requests) == 1
