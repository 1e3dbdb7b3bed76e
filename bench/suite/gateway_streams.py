"""What the gateway scenario reads from streams: the load generator's stream blocks (percentiles per subject, the
added figures, chunks a second), a process's memory with streams held open through it, and the picker's with
requests held in it. Shared by phases 2 and 3 and the endpoint picker's phases."""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
from collections.abc import Callable
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from llmaz_dev.testing.waiting import eventually
from suite import procstat

MODEL = "bench-model"  # what the launcher's Playground serves (gateway_launcher.MODEL)
HELD_MODEL = "bench-held"  # the launcher's model whose replica never becomes ready (gateway_launcher.HELD_MODEL)
SUBJECTS = ("direct", "gateway")  # go-gwload's two subjects
SETTLE_SECONDS = 1.0
HOLD_OPEN_TIMEOUT = 60.0
WARM_UP_REQUESTS = 20
KIB = 1024
MB = 1024 * 1024


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def _drain(session: aiohttp.ClientSession, url: str, body: bytes) -> None:
    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
        await resp.read()
        if resp.status != 200:
            raise RuntimeError(f"warm-up request answered {resp.status}")


async def _open(session: aiohttp.ClientSession, url: str, body: bytes) -> aiohttp.ClientResponse:
    resp = await session.post(url, data=body, headers={"Content-Type": "application/json"})
    if resp.status != 200:
        resp.release()
        raise RuntimeError(f"a held stream answered {resp.status}")
    if not await resp.content.readany():  # the first event: the stream is open end to end
        raise RuntimeError("a held stream ended before its first event")
    return resp


async def hold_streams(url: str, pid: int, streams: int) -> dict[str, Any]:
    """The gateway's RSS with 0, streams/2 and `streams` streams held open through it, and after closing them."""
    held_body = json.dumps({"model": MODEL, "stream": True, "hold": True, "messages": []}).encode()
    connector = aiohttp.TCPConnector(limit=0)
    readings: list[dict[str, Any]] = []

    def read(open_streams: int) -> None:
        usage = procstat.usage(pid)
        readings.append({"streams": open_streams, "rss_mb": usage.rss_bytes / MB, "fds": _fds(pid)})
        print(f"[gateway] memory: {open_streams} streams open, RSS {usage.rss_bytes / MB:.1f} MB", file=sys.stderr)

    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as session:
        for body in (b'{"model": "%s", "stream": true}' % MODEL.encode(), b'{"model": "%s"}' % MODEL.encode()):
            for _ in range(WARM_UP_REQUESTS):
                await _drain(session, url, body)
        await asyncio.sleep(SETTLE_SECONDS)
        read(0)
        held: list[aiohttp.ClientResponse] = []
        try:
            async with asyncio.timeout(HOLD_OPEN_TIMEOUT):
                for target in (streams // 2, streams):
                    held += await asyncio.gather(*(_open(session, url, held_body) for _ in range(target - len(held))))
                    await asyncio.sleep(SETTLE_SECONDS)
                    read(len(held))
        finally:
            for resp in held:
                resp.close()
        await asyncio.sleep(2 * SETTLE_SECONDS)  # the gateway sees the disconnects and ends the engine requests
        read(0)
    none, half, full, closed = readings
    return {"streams": streams, "readings": readings,
            "kib_per_stream": (full["rss_mb"] - none["rss_mb"]) * MB / KIB / streams,
            "kib_per_stream_second_half": (full["rss_mb"] - half["rss_mb"]) * MB / KIB / (streams - streams // 2),
            "rss_before_mb": none["rss_mb"], "rss_open_mb": full["rss_mb"], "rss_closed_mb": closed["rss_mb"],
            "fds_before": none["fds"], "fds_open": full["fds"]}  # fmt: skip


HELD_GAUGE = "llmaz_gateway_requests_held"
HELD_POLL_SECONDS = 0.2


def held_count(metrics_text: str, model: str) -> float:
    """The gateway's held-requests gauge of `model` in a `/metrics` page (0 when it has no series)."""
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name == HELD_GAUGE and sample.labels.get("model") == model:
                return float(sample.value)
    return 0.0


async def hold_requests(url: str, pid: int, requests: int, model: str, metrics: Callable[[], str]) -> dict[str, Any]:
    """The RSS of process `pid` (the picker) with 0, requests/2 and `requests` requests for `model` held in it (a
    model whose replica never becomes ready: each waits for an endpoint), counted by its held-requests gauge
    (`metrics()`: its `/metrics` page), then after their clients went away."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "held"}]}).encode()
    readings: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()

    async def until_held(count: int) -> None:
        async def reached() -> bool:
            return held_count(await loop.run_in_executor(None, metrics), model) == count

        await eventually(reached, HOLD_OPEN_TIMEOUT, f"{count} requests held", HELD_POLL_SECONDS)

    def read(held: int) -> None:
        usage = procstat.usage(pid)
        readings.append({"held": held, "rss_mb": usage.rss_bytes / MB})
        print(f"[gateway] memory: {held} requests held, RSS {usage.rss_bytes / MB:.1f} MB", file=sys.stderr)

    async def one(session: aiohttp.ClientSession) -> None:
        async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
            await resp.read()

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await asyncio.sleep(SETTLE_SECONDS)
        read(0)
        tasks: list[asyncio.Task[None]] = []
        try:
            for target in (requests // 2, requests):
                tasks += [asyncio.create_task(one(session)) for _ in range(target - len(tasks))]
                await until_held(target)
                await asyncio.sleep(SETTLE_SECONDS)
                read(target)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        await until_held(0)  # the picker saw the clients go and let the requests go
        await asyncio.sleep(SETTLE_SECONDS)
        read(0)
    none, _, full, gone = readings
    return {"requests": requests, "readings": readings,
            "kib_per_request": (full["rss_mb"] - none["rss_mb"]) * MB / KIB / requests,
            "rss_before_mb": none["rss_mb"], "rss_held_mb": full["rss_mb"], "rss_after_mb": gone["rss_mb"]}  # fmt: skip


PERCENTILES = (("p50", 499), ("p99", 989), ("p999", 998))  # indices into 999 cut points


def _pcts(values: list[int]) -> dict[str, float]:
    """p50, p99 and p99.9 in milliseconds of microsecond samples."""
    if len(values) < 2:
        only = values[0] / 1e3 if values else float("nan")
        return {name: only for name, _ in PERCENTILES}
    cuts = statistics.quantiles(values, n=1000)
    return {name: cuts[index] / 1e3 for name, index in PERCENTILES}


def _stream_percentiles(blocks: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    return {reading: _pcts([v for b in blocks for v in b[f"{reading}_us"]])
            for reading in ("ttfb", "total", "chunk_delay")}  # fmt: skip


def _stream_added(direct: dict[str, dict[str, float]], gateway: dict[str, dict[str, float]]) -> dict[str, Any]:
    return {reading: {p: gateway[reading][p] - direct[reading][p] for p in direct[reading]} for reading in direct}


def analyse_streams(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """Per subject, the percentiles of TTFB, total time per stream and chunk delay over every block; the added
    figures, also per ABBA pair; streams, errors, chunks a second and the load generator's own share of a core."""
    by_subject = {s: [b for b in blocks if b["subject"] == s] for s in SUBJECTS}
    result: dict[str, Any] = {s: _stream_percentiles(by_subject[s]) for s in SUBJECTS}
    result["added"] = _stream_added(result["direct"], result["gateway"])
    result["pairs"] = [_stream_added(_stream_percentiles([d]), _stream_percentiles([g]))
                       for d, g in zip(by_subject["direct"], by_subject["gateway"], strict=True)]  # fmt: skip
    for s in SUBJECTS:
        seconds = sum(b["seconds"] for b in by_subject[s])
        chunks = sum(len(b["chunk_delay_us"]) for b in by_subject[s])
        result.setdefault("streams", {})[s] = sum(b["streams"] for b in by_subject[s])
        result.setdefault("errors", {})[s] = sum(b["errors"] for b in by_subject[s])
        result.setdefault("chunks", {})[s] = chunks
        result.setdefault("block_seconds", {})[s] = seconds
        result.setdefault("chunks_per_second", {})[s] = chunks / seconds if seconds else 0.0
    loader_seconds = sum(b["seconds"] for b in blocks)
    result["loader_core"] = sum(b["cpu_seconds"] for b in blocks) / loader_seconds if loader_seconds else 0.0
    return result
