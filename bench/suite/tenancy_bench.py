"""Tenancy under real traffic: flow control's priority bands, fairness between tenants and token budgets, on the
real node.

`make bench-tenancy` (`BENCH_SCENARIOS=tenancy`, needs root and the node tier: `make node-bins image-build`): one
real node with llmaz installed by `make deploy`, the gateway patched to `--flow-control=true`,
`--api-key-secrets=true` and `--flow-reserved-slots=1` (a slot kept for bands 6 and above while they send), API
keys as Secrets (`KEYS`), and one replica of the prefill-heavy random llama whose llama.cpp server has 2 slots
(`-np 2 -t 1`): a few concurrent streams saturate it.

Three parts, each bounded in time and in requests, every request with a timeout; a status other than 200 is
counted (429 and 503 as shed, anything else or a broken stream as failed):
1. **priority**: the interactive key (`priority` 7) alone at `rate` requests per second for `seconds` (its
   unloaded TTFT), then the same beside the batch key (`priority` 2) holding `batch_streams` streams. Figures: the
   interactive TTFT p90 loaded over unloaded, and its shed count. Goals: at most 1.5x, none shed.
2. **fairness**: two keys of equal priority holding streams in the ratio `fair_streams` (4:1) for `seconds`.
   Figure: Jain's index of the tokens each was served (the engine's `usage`) by the answers that ended within
   the saturated window (the part after `warmup` seconds, and before the streams stop). Goal: at least 0.95.
3. **budget**: a key with `tokens-per-minute` `tpm` holding `budget_streams` streams for `seconds`, each request
   asking `max_tokens` (a refused one waits its `Retry-After`). Figure: the tokens served (the engine's `usage`,
   prompt and completion) beyond what the budget allows over the window from the first request to the last one
   admitted (a full bucket at the start plus its refill). Goal: at most one request's `max_tokens`; a run whose
   engine reported no usage does not pass.

The pure parts (schedules, windows, Jain's index, the overshoot, the goals, the report) are unit-tested in
test/unit/bench/test_tenancy_bench.py.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from llmaz_dev.envtest.node.install import GATEWAY, NAMESPACE
from llmaz_dev.testing.waiting import eventually_sync
from suite.autoscale_bench import percentile
from suite.routing_bench import LEAST_OUTSTANDING_ROUTING, model_node, ready_count, served_model

MODEL = "bench-tenancy"
PLAYGROUND_NAMESPACE = "default"
SLOTS = 2
# One of the two kept for the interactive key's band while it sends (the gateway's --flow-reserved-slots).
RESERVED_SLOTS = 1
CONTEXT = 4096
MAX_TOKENS = 32
REQUEST_TIMEOUT = 90.0  # past the queue's TTL (60 s): a request that waits it out is shed (429), not timed out
READY_TIMEOUT = 300.0
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
PROMPT = "Tell me a long story about the sea, the wind and a small boat."
PRIORITY_GOAL = 1.5
FAIRNESS_GOAL = 0.95
SHED_STATUSES = frozenset({429, 503})
GATEWAY_FLAGS = ("--flow-control=true", "--api-key-secrets=true", f"--flow-reserved-slots={RESERVED_SLOTS}")


@dataclass(frozen=True, slots=True)
class Key:
    name: str
    tenant: str
    priority: int
    tokens_per_minute: int | None = None

    @property
    def token(self) -> str:
        return f"sk-bench-{self.name}"


BATCH = Key("batch", "batch", 2)
INTERACTIVE = Key("interactive", "interactive", 7)
TEAM_A = Key("team-a", "team-a", 5)
TEAM_B = Key("team-b", "team-b", 5)


def budget_key(tpm: int) -> Key:
    return Key("budget", "budgeted", 5, tokens_per_minute=tpm)


@dataclass(frozen=True, slots=True)
class Plan:
    """The knobs (bench/README.md, `BENCH_TENANCY_*`)."""

    seconds: float = 60.0
    """Seconds of load of each part (and of the unloaded interactive run)."""
    rate: float = 1.0
    """Interactive requests per second."""
    batch_streams: int = 32
    fair_streams: tuple[int, int] = (16, 4)
    """Streams of the two equal tenants: offered load 4:1."""
    warmup: float = 10.0
    """Seconds at the start of the fairness part left out of its window (the queue filling)."""
    tpm: int = 1200
    budget_streams: int = 4
    max_tokens: int = MAX_TOKENS

    def __post_init__(self) -> None:
        if not self.seconds > 0 or not self.rate > 0:
            raise ValueError(f"seconds and rate must be positive, got {self.seconds} and {self.rate}")
        if self.batch_streams < 1 or self.budget_streams < 1 or min(self.fair_streams) < 1:
            raise ValueError("every part needs at least one stream per tenant")
        if not 0 <= self.warmup < self.seconds:
            raise ValueError(f"warmup must be at least 0 and below seconds ({self.seconds}), got {self.warmup}")
        if self.tpm < 1 or self.max_tokens < 1:
            raise ValueError(f"tpm and max_tokens must be positive, got {self.tpm} and {self.max_tokens}")


# Pure parts


@dataclass(frozen=True, slots=True)
class Answer:
    tenant: str
    started: float
    ended: float
    status: int
    ttft: float | None = None
    tokens: int = 0
    """The engine's `usage.total_tokens` (prompt and completion); 0 when it reported none."""
    ok: bool = False
    error: str = ""
    retry_after: float = 0.0
    """The `Retry-After` of a refusal, in seconds (0 without one)."""

    @property
    def shed(self) -> bool:
        return self.status in SHED_STATUSES

    @property
    def failed(self) -> bool:
        return not self.ok and not self.shed


def schedule(rate: float, seconds: float) -> list[float]:
    """Send times, from 0, of requests paced at `rate` per second for `seconds` (the last before `seconds`)."""
    count = math.ceil(rate * seconds - 1e-9)
    return [i / rate for i in range(count)]


def jain(values: Sequence[float]) -> float | None:
    """Jain's fairness index: 1 when every value is equal, 1/n when one has everything; None without any."""
    if not values:
        return None
    squares = sum(v * v for v in values)
    if squares == 0:
        return 1.0
    return sum(values) ** 2 / (len(values) * squares)


def served_in(answers: Iterable[Answer], start: float, end: float) -> dict[str, int]:
    """Tokens served per tenant by the answers that ended within [start, end)."""
    served: dict[str, int] = {}
    for answer in answers:
        if answer.ok and start <= answer.ended < end:
            served[answer.tenant] = served.get(answer.tenant, 0) + answer.tokens
    return served


def allowed(tpm: int, seconds: float) -> float:
    """The tokens a budget of `tpm` per minute admits over `seconds`: its full bucket, plus its refill."""
    return tpm + tpm * seconds / 60.0


def overshoot(served: int, tpm: int, seconds: float) -> float:
    """Tokens served beyond what the budget allows over `seconds` (0 when within it)."""
    return max(0.0, served - allowed(tpm, seconds))


def pause_after(answer: Answer, remaining: float) -> float:
    """Seconds a looping client waits before its next request: a refused one's `Retry-After` (1 s without one), so
    that refusals do not turn into a busy loop, never past the part's end; none after an answer."""
    if answer.ok or not answer.shed:
        return 0.0
    return max(0.0, min(answer.retry_after or 1.0, remaining))


def retry_after(header: str | None) -> float:
    """A `Retry-After` in whole seconds as a number; 0 when absent or not a number."""
    try:
        return max(0.0, float(header)) if header is not None else 0.0
    except ValueError:
        return 0.0


def counts(answers: Iterable[Answer]) -> dict[str, int]:
    found = list(answers)
    return {
        "requests": len(found),
        "ok": sum(a.ok for a in found),
        "shed": sum(a.shed for a in found),
        "failed": sum(a.failed for a in found),
    }


def ttft_p90(answers: Iterable[Answer]) -> float | None:
    return percentile([a.ttft for a in answers if a.ok and a.ttft is not None], 0.9)


def priority_figures(unloaded: Sequence[Answer], loaded: Sequence[Answer]) -> dict[str, Any]:
    """The interactive tenant's TTFT p90 alone and beside the batch, their ratio, and what it had shed or failed."""
    interactive = [a for a in loaded if a.tenant == INTERACTIVE.tenant]
    alone, beside = ttft_p90(unloaded), ttft_p90(interactive)
    ratio = None if alone is None or beside is None or alone <= 0 else beside / alone
    return {
        "unloaded_p90": alone,
        "loaded_p90": beside,
        "ratio": ratio,
        "interactive": counts(interactive),
        "unloaded": counts(unloaded),
        "batch": counts(a for a in loaded if a.tenant == BATCH.tenant),
    }


def fairness_figures(answers: Sequence[Answer], start: float, end: float) -> dict[str, Any]:
    served = served_in(answers, start, end)
    tenants = (TEAM_A.tenant, TEAM_B.tenant)
    values = [float(served.get(t, 0)) for t in tenants]
    return {
        "window": [start, end],
        "served": {t: served.get(t, 0) for t in tenants},
        "jain": jain(values),
        "requests": {t: counts(a for a in answers if a.tenant == t) for t in tenants},
    }


def admitted_until(answers: Iterable[Answer], start: float) -> float:
    """When the last request the budget admitted was sent (`start` when none was): the budget's window ends there,
    since a request is admitted against what the bucket holds when it arrives."""
    return max((a.started for a in answers if a.ok), default=start)


def budget_figures(answers: Sequence[Answer], tpm: int, start: float, end: float) -> dict[str, Any]:
    """Every token served to the budgeted key, against what its budget admits from `start` (its first request)
    to `end` (`admitted_until`)."""
    served = sum(a.tokens for a in answers if a.ok)
    seconds = max(0.0, end - start)
    return {
        "tpm": tpm,
        "seconds": seconds,
        "served": served,
        "allowed": allowed(tpm, seconds),
        "overshoot": overshoot(served, tpm, seconds),
        "requests": counts(answers),
        "without_usage": sum(1 for a in answers if a.ok and a.tokens == 0),
    }


def goals(figures: dict[str, Any], max_tokens: int) -> list[dict[str, Any]]:
    """Each goal with its figure and PASS/FAIL; a figure that was never measured fails."""
    priority, fairness, budget = figures["priority"], figures["fairness"], figures["budget"]
    ratio, jain_index = priority["ratio"], fairness["jain"]
    return [
        {"goal": f"interactive TTFT p90 loaded <= {PRIORITY_GOAL:g}x unloaded", "value": ratio,
         "pass": ratio is not None and ratio <= PRIORITY_GOAL},
        {"goal": "interactive requests shed under batch load: 0", "value": priority["interactive"]["shed"],
         "pass": priority["interactive"]["shed"] == 0 and priority["interactive"]["ok"] > 0},
        {"goal": f"Jain's index of served tokens, 4:1 offered >= {FAIRNESS_GOAL:g}", "value": jain_index,
         "pass": jain_index is not None and jain_index >= FAIRNESS_GOAL},
        {"goal": f"budget overshoot <= one request's max_tokens ({max_tokens})", "value": budget["overshoot"],
         "pass": budget["requests"]["ok"] > 0 and budget["without_usage"] == 0
         and budget["overshoot"] <= max_tokens},
        {"goal": "no failed request (shed ones apart)", "value": figures["failed"], "pass": figures["failed"] == 0},
    ]  # fmt: skip


def _fmt(value: Any, spec: str = ".2f") -> str:
    return "not measured" if value is None else format(value, spec)


def report(result: dict[str, Any]) -> str:
    f = result["figures"]
    p, fa, b = f["priority"], f["fairness"], f["budget"]
    lines = [
        f"priority: interactive TTFT p90 {_fmt(p['unloaded_p90'])} s alone, {_fmt(p['loaded_p90'])} s beside "
        f"{result['plan']['batch_streams']} batch streams (x{_fmt(p['ratio'])}); shed {p['interactive']['shed']}",
        f"fairness: served {fa['served']}, Jain {_fmt(fa['jain'], '.3f')}",
        f"budget: served {b['served']} of {b['allowed']:.0f} allowed over {b['seconds']:.0f} s "
        f"(tpm {b['tpm']}), overshoot {b['overshoot']:.0f}",
        "",
        "| goal | value | result |",
        "|---|---|---|",
    ]
    for goal in result["goals"]:
        value = goal["value"]
        shown = _fmt(value, ".3g") if isinstance(value, float) or value is None else str(value)
        lines.append(f"| {goal['goal']} | {shown} | {'PASS' if goal['pass'] else 'FAIL'} |")
    return "\n".join(lines)


# The cluster side


def key_secrets(keys: Iterable[Key]) -> list[dict[str, Any]]:
    """One API key Secret per key, in the gateway's namespace (docs/tenancy.md)."""
    secrets = []
    for key in keys:
        data = {"key": key.token, "tenant": key.tenant, "priority": str(key.priority)}
        if key.tokens_per_minute is not None:
            data["tokens-per-minute"] = str(key.tokens_per_minute)
        secrets.append({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": f"bench-key-{key.name}", "namespace": NAMESPACE,
                         "labels": {"llmaz.io/api-key": "true"}},
            "stringData": data,
        })  # fmt: skip
    return secrets


def gateway_patch(flags: Sequence[str] = GATEWAY_FLAGS) -> list[dict[str, Any]]:
    """A JSON patch adding `flags` to the gateway container's arguments."""
    return [{"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": flag} for flag in flags]


def model_objects(uri: str, endpoint_url: str) -> list[dict[str, Any]]:
    """The model and its one-replica Playground."""
    return served_model(
        MODEL,
        uri,
        endpoint_url,
        namespace=PLAYGROUND_NAMESPACE,
        context=CONTEXT,
        slots=SLOTS,
        annotations=LEAST_OUTSTANDING_ROUTING,
    )


# The client


@dataclass(slots=True)
class Client:
    url: str
    max_tokens: int
    zero: float = field(default_factory=time.monotonic)
    answers: list[Answer] = field(default_factory=list)

    def now(self) -> float:
        return time.monotonic() - self.zero

    async def one(self, http: aiohttp.ClientSession, key: Key) -> Answer:
        """One streamed chat with `key`, read to its end; its TTFT and the tokens the engine says it used."""
        body = {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": self.max_tokens,
                "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
        headers = {"Authorization": f"Bearer {key.token}"}
        started, ttft, status, done, tokens, error, wait = self.now(), None, 0, False, 0, "", 0.0
        try:
            async with http.post(f"{self.url}/v1/chat/completions", json=body, headers=headers) as resp:
                status = resp.status
                wait = retry_after(resp.headers.get("Retry-After"))
                if status != 200:
                    error = f"HTTP {status}: {(await resp.text())[:200]}"
                else:
                    async for raw in resp.content:
                        line = raw.strip()
                        if not line.startswith(b"data:"):
                            continue
                        payload = line[5:].strip()
                        if payload == b"[DONE]":
                            done = True
                            break
                        if ttft is None:
                            ttft = self.now() - started
                        usage = json.loads(payload).get("usage")
                        if isinstance(usage, dict) and isinstance(usage.get("total_tokens"), int):
                            tokens = usage["total_tokens"]
                    if not done:
                        error = "the stream ended without [DONE]"
        except (aiohttp.ClientError, TimeoutError, ValueError) as err:
            error = f"{type(err).__name__}: {err}"[:300]
        answer = Answer(key.tenant, started, self.now(), status, ttft, tokens, ok=done, error=error, retry_after=wait)
        self.answers.append(answer)
        return answer

    def session(self) -> aiohttp.ClientSession:
        # A connection per request: through the gateway Service, kube-proxy spreads requests, not connections.
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(force_close=True, limit=0),
            timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT),
            trust_env=False,
        )

    async def streams(self, key: Key, count: int, seconds: float) -> list[Answer]:
        """`count` clients of `key`, each sending one request after the other until `seconds` have passed."""
        until, mine = self.now() + seconds, []

        async def loop(http: aiohttp.ClientSession) -> None:
            while self.now() < until:
                answer = await self.one(http, key)
                mine.append(answer)
                await asyncio.sleep(pause_after(answer, until - self.now()))

        async with self.session() as http:
            await asyncio.gather(*(loop(http) for _ in range(count)))
        return mine

    async def paced(self, key: Key, rate: float, seconds: float) -> list[Answer]:
        """Requests of `key` sent on `schedule(rate, seconds)`, whatever the earlier ones are doing."""
        start = self.now()

        async def at(offset: float, http: aiohttp.ClientSession) -> Answer:
            await asyncio.sleep(max(0.0, start + offset - self.now()))
            return await self.one(http, key)

        async with self.session() as http:
            return list(await asyncio.gather(*(at(t, http) for t in schedule(rate, seconds))))


async def measure(url: str, plan: Plan, say: Callable[[str], None]) -> dict[str, Any]:
    client = Client(url, plan.max_tokens)
    say(f"[tenancy] priority: interactive alone at {plan.rate:g}/s for {plan.seconds:g} s")
    unloaded = await client.paced(INTERACTIVE, plan.rate, plan.seconds)
    say(f"[tenancy] priority: beside {plan.batch_streams} batch streams")

    async def beside() -> list[Answer]:
        await asyncio.sleep(plan.warmup)  # the batch streams fill the queue first
        return await client.paced(INTERACTIVE, plan.rate, plan.seconds)

    batch, interactive = await asyncio.gather(
        client.streams(BATCH, plan.batch_streams, plan.seconds + plan.warmup), beside()
    )
    priority = priority_figures(unloaded, [*batch, *interactive])
    a_streams, b_streams = plan.fair_streams
    say(f"[tenancy] fairness: {a_streams}:{b_streams} streams for {plan.seconds:g} s")
    start = client.now()
    fair = await asyncio.gather(
        client.streams(TEAM_A, a_streams, plan.seconds), client.streams(TEAM_B, b_streams, plan.seconds)
    )
    fair_answers = [*fair[0], *fair[1]]
    fairness = fairness_figures(fair_answers, start + plan.warmup, start + plan.seconds)
    key = budget_key(plan.tpm)
    say(f"[tenancy] budget: {plan.budget_streams} streams against {plan.tpm} tokens per minute")
    start = client.now()
    spent = await client.streams(key, plan.budget_streams, plan.seconds)
    budget = budget_figures(spent, plan.tpm, start, admitted_until(spent, start))
    failed = sum(a.failed for a in client.answers)
    figures = {"priority": priority, "fairness": fairness, "budget": budget, "failed": failed}
    return {
        "plan": asdict(plan),
        "figures": figures,
        "goals": goals(figures, plan.max_tokens),
        "errors": sorted({a.error for a in client.answers if a.failed})[:20],
    }


def _ready_pods(cluster: Any) -> int:
    pods = json.loads(cluster.kubectl(
        "get", "pods", "-n", PLAYGROUND_NAMESPACE, "-l", f"{LWS_NAME_LABEL}={MODEL}", "-o", "json"
    ))["items"]  # fmt: skip
    return ready_count(pods)


def _wait_answering(url: str, key: Key) -> None:
    async def once() -> bool:
        client = Client(url, 1)
        async with client.session() as http:
            return (await client.one(http, key)).ok

    eventually_sync(lambda: asyncio.run(once()), within=120.0, what=f"an answer from {url}", interval=0.5)


def run_once(plan: Plan, log_dir: Path, say: Callable[[str], None] = print) -> dict[str, Any]:
    """The three parts on a fresh node (see the module docstring)."""
    with model_node("tenancy", MODEL, log_dir) as node:
        cluster = node.cluster
        keys = [BATCH, INTERACTIVE, TEAM_A, TEAM_B, budget_key(plan.tpm)]
        cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(key_secrets(keys)))
        cluster.kubectl("patch", "deployment", GATEWAY, "-n", NAMESPACE, "--type=json", "-p",
                        json.dumps(gateway_patch()))  # fmt: skip
        cluster.kubectl("rollout", "status", f"deployment/{GATEWAY}", "-n", NAMESPACE, "--timeout=300s")
        objects = model_objects(node.uri, node.endpoint_url)
        cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(objects))
        eventually_sync(lambda: _ready_pods(cluster) == 1, within=READY_TIMEOUT, what="1 Ready replica",
                        interval=0.5)  # fmt: skip
        service = json.loads(cluster.kubectl("get", "service", GATEWAY, "-n", NAMESPACE, "-o", "json"))
        url = f"http://{service['spec']['clusterIP']}"
        _wait_answering(url, TEAM_A)
        result = asyncio.run(measure(url, plan, say))
    say(f"[tenancy] {report(result).splitlines()[0]}")
    return result
