"""Scenario 10: the prefix-aware picker's cost per request and its memory, in process (no cluster, no network).

Traffic: chat conversations under 8 tenants' system prompts of about 1,000 tokens each (4,000 characters), each
request a conversation's next turn (its whole history: the system prompt, then 1-8 user and assistant turns), from
`conversations` conversations, some with an `x-session-id`. Requests arrive paced at `rate` per second for
`seconds`; each holds its endpoint (one of 8) for an exponentially distributed time (mean 2 s, an LLM answer), so
the loads the picker sees move as they would. Timed per request: the routing key from the parsed body plus the
pick and the in-flight count (what the gateway adds per request with `--routing-strategy=prefix-aware`).

Worst inputs: the routing key of the largest bodies the gateway takes (a 10 MB prompt, a million messages, a
million content parts, three million token ids), each of which must be read only up to its bound, and the scan of a
1 MiB vLLM metrics page (1,300 engines' gauges and histograms), timed once each.

Memory: a fresh picker is fed `prompts` distinct prompts (a distinct first question under one of the system
prompts), and the prefix index's footprint is read (`PrefixIndex.footprint`), with the blocks it holds.
"""

from __future__ import annotations

import heapq
import random
import statistics
import time
from typing import Any

from llmaz.gateway.routing.inflight import InFlight
from llmaz.gateway.routing.picker import PrefixAware
from llmaz.gateway.routing.prefix import routing_key
from llmaz.gateway.routing.routes import Endpoint
from llmaz.gateway.routing.signals import read_page

ENDPOINTS = [Endpoint(f"10.0.0.{i}", 8000) for i in range(1, 9)]
TENANTS = 8
SYSTEM_CHARS = 4000
MEAN_HOLD_SECONDS = 2.0
WORDS = ("policy", "refund", "account", "invoice", "shipping", "order", "warranty", "return", "customer", "support",
         "delivery", "payment", "product", "service", "contract", "billing", "address", "discount")  # fmt: skip


def _sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)) + "."


def _text(rng: random.Random, chars: int) -> str:
    parts: list[str] = []
    size = 0
    while size < chars:
        parts.append(_sentence(rng, rng.randint(6, 16)))
        size += len(parts[-1]) + 1
    return " ".join(parts)[:chars]


class Conversations:
    """Chat histories that grow a turn per request."""

    def __init__(self, rng: random.Random, count: int) -> None:
        self._rng = rng
        self.systems = [f"Tenant {t}. " + _text(rng, SYSTEM_CHARS) for t in range(TENANTS)]
        self._histories: list[list[dict[str, str]]] = []
        self._sessions: list[str | None] = []
        for i in range(count):
            self._histories.append([{"role": "system", "content": rng.choice(self.systems)}])
            self._sessions.append(f"session-{i}" if i % 3 == 0 else None)

    def next_request(self) -> tuple[dict[str, Any], str | None]:
        """A random conversation's next request (restarted after 8 turns), and its session header."""
        rng = self._rng
        i = rng.randrange(len(self._histories))
        history = self._histories[i]
        if len(history) > 16:
            del history[1:]
        if len(history) > 1:
            history.append({"role": "assistant", "content": _text(rng, rng.randint(200, 1200))})
        history.append({"role": "user", "content": _text(rng, rng.randint(40, 400))})
        return {"model": "m", "messages": list(history), "stream": True}, self._sessions[i]


def _percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(pct / 100 * len(ordered)))]


def paced(rate: float, seconds: float, conversations: int, seed: int = 1) -> dict[str, Any]:
    rng = random.Random(seed)
    traffic = Conversations(rng, conversations)
    in_flight = InFlight()
    picker = PrefixAware(in_flight, rng=random.Random(seed))
    ends: list[tuple[float, int, Endpoint]] = []
    costs_ms: list[float] = []
    cpu_ms: list[float] = []
    blocks: list[int] = []
    picked: dict[Endpoint, int] = {}
    total = int(rate * seconds)
    started = time.perf_counter()
    for n in range(total):
        document, session = traffic.next_request()  # made before its slot: not part of the cost
        due = started + n / rate
        while (wait := due - time.perf_counter()) > 0:
            time.sleep(wait)
        now = time.perf_counter()
        while ends and ends[0][0] <= now:
            in_flight.release(heapq.heappop(ends)[2])
        t0, cpu0 = time.perf_counter(), time.thread_time()
        key = routing_key(document, session)
        endpoint = picker.pick(ENDPOINTS, (), key)
        assert endpoint is not None
        in_flight.acquire(endpoint)
        costs_ms.append((time.perf_counter() - t0) * 1000)
        cpu_ms.append((time.thread_time() - cpu0) * 1000)
        blocks.append(len(key.blocks) if key is not None else 0)
        picked[endpoint] = picked.get(endpoint, 0) + 1
        heapq.heappush(ends, (now + rng.expovariate(1 / MEAN_HOLD_SECONDS), n, endpoint))
    elapsed = time.perf_counter() - started
    shares = sorted(picked.values())
    return {
        "requests": total,
        "achieved_rate": total / elapsed,
        "pick_p50_ms": statistics.median(costs_ms),
        "pick_p99_ms": _percentile(costs_ms, 99),
        "pick_max_ms": max(costs_ms),
        "pick_cpu_p50_ms": statistics.median(cpu_ms),
        "pick_cpu_p99_ms": _percentile(cpu_ms, 99),
        "blocks_median": statistics.median(blocks),
        "busiest_over_idlest": shares[-1] / shares[0] if len(shares) == len(ENDPOINTS) else None,
        "index_blocks": picker.index.size(),
    }


def memory(prompts: int, seed: int = 2) -> dict[str, Any]:
    rng = random.Random(seed)
    systems = Conversations(rng, 0).systems
    picker = PrefixAware(InFlight(), rng=random.Random(seed))
    started = time.perf_counter()
    for i in range(prompts):
        question = f"Question {i}: " + _text(rng, 120)
        key = routing_key({"messages": [{"role": "system", "content": systems[i % TENANTS][:600]},
                                        {"role": "user", "content": question}]})  # fmt: skip
        picker.pick(ENDPOINTS, (), key)
    return {
        "prompts": prompts,
        "seconds": time.perf_counter() - started,
        "index_blocks": picker.index.size(),
        "index_mb": picker.index.footprint() / 2**20,
    }


def _timed_ms(work: Any) -> float:
    started = time.perf_counter()
    work()
    return (time.perf_counter() - started) * 1000


def _vllm_page(engines: int) -> str:
    """A vLLM /metrics page with `engines` label sets of the gauges the gateway reads and a histogram each."""
    lines: list[str] = []
    for e in range(engines):
        labels = f'engine="{e}",model_name="m"'
        lines += [f"vllm:num_requests_running{{{labels}}} 1.0", f"vllm:num_requests_waiting{{{labels}}} 0.0",
                  f"vllm:kv_cache_usage_perc{{{labels}}} 0.5"]  # fmt: skip
        lines += [f'vllm:time_to_first_token_seconds_bucket{{{labels},le="{le}"}} 3.0'
                  for le in ("0.01", "0.05", "0.1", "0.5", "1", "5", "10", "+Inf")]  # fmt: skip
    return "\n".join(lines) + "\n"


def worst_inputs() -> dict[str, float]:
    huge = "lorem ipsum dolor sit amet " * 400_000  # ~10 MB, the largest body the gateway takes
    page = _vllm_page(1300)  # about 1 MiB
    return {
        "key_huge_prompt_ms": _timed_ms(lambda: routing_key({"model": "m", "prompt": huge})),
        "key_many_messages_ms": _timed_ms(
            lambda: routing_key({"model": "m", "messages": [{"role": "user", "content": "hi"}] * 1_000_000})
        ),
        "key_many_parts_ms": _timed_ms(
            lambda: routing_key(
                {"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}] * 1_000_000}]}
            )
        ),
        "key_many_tokens_ms": _timed_ms(lambda: routing_key({"model": "m", "prompt": [[1] * 3_000_000]})),
        "metrics_page_mb": len(page.encode()) / 2**20,
        "metrics_page_ms": _timed_ms(lambda: read_page(page)),
    }


def run_once(rate: float, seconds: float, conversations: int, prompts: int) -> dict[str, Any]:
    return {"paced": paced(rate, seconds, conversations), "memory": memory(prompts), "worst": worst_inputs()}
