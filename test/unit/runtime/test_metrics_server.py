"""The metrics endpoint's delegated auth as callers meet it: a burst of scrapes with one token costs one
TokenReview, random tokens cost one each but no lasting memory, and malformed credentials are a 401."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer

from llmaz.runtime.client import Client
from llmaz.runtime.server.authn import DelegatingAuth
from llmaz.runtime.server.metrics_server import MetricsServer
from llmaz_dev.testing.servers import READER_TOKEN, FakeReviewer


@pytest_asyncio.fixture
async def scraper() -> AsyncIterator[tuple[TestClient[Any, Any], FakeReviewer, DelegatingAuth]]:
    reviewer = FakeReviewer()
    auth = DelegatingAuth(cast(Client, reviewer))
    server = MetricsServer("127.0.0.1:0", auth=auth)
    async with TestClient(TestServer(server.app())) as client:
        yield client, reviewer, auth


async def scrape(client: TestClient[Any, Any], authorization: str) -> int:
    async with client.get("/metrics", headers={"Authorization": authorization}) as resp:
        await resp.read()
        return resp.status


async def test_300_concurrent_scrapes_with_one_token_make_one_token_review(
    scraper: tuple[TestClient[Any, Any], FakeReviewer, DelegatingAuth],
) -> None:
    client, reviewer, _ = scraper
    statuses = await asyncio.gather(*(scrape(client, f"Bearer {READER_TOKEN}") for _ in range(300)))
    assert set(statuses) == {200}
    assert (reviewer.token_reviews, reviewer.access_reviews) == (1, 1)


async def test_300_random_tokens_are_refused_and_the_cache_stays_bounded(
    scraper: tuple[TestClient[Any, Any], FakeReviewer, DelegatingAuth],
) -> None:
    client, reviewer, auth = scraper
    statuses = await asyncio.gather(*(scrape(client, f"Bearer {secrets.token_urlsafe(32)}") for _ in range(300)))
    assert set(statuses) == {401}
    assert reviewer.token_reviews == 300  # an unseen token can only be judged by asking the API server
    assert auth.cached[0] <= 4096


async def test_credentials_that_cannot_be_a_token_are_a_401_without_a_review(
    scraper: tuple[TestClient[Any, Any], FakeReviewer, DelegatingAuth],
) -> None:
    client, reviewer, _ = scraper
    for authorization in ("Bearer x y", "Bearer t\u00f6k\u00e9n", "Basic abc", "Bearer", "bearer  "):
        assert await scrape(client, authorization) == 401
    assert reviewer.token_reviews == 0
