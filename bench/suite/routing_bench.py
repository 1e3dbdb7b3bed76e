"""Routing under real traffic: what each strategy makes the engines prefill again, on the real node.

`make bench-serving` (`BENCH_SCENARIOS=routing`, needs root and the node tier: `make node-bins image-build`):
one real node with llmaz installed by `make deploy`, 4 replicas of a prefill-heavy random llama
(`llmaz_dev.tinymodel.PREFILL_HEAVY`: context 4,096, so a 1,000-token prompt takes about a second to prefill
on this machine and a cached one a tenth of that), each llama.cpp server with 2 slots and its prompt cache on.

Caches are sized like a GPU's, per workload, so that one replica holds a set number of the workload's prefixes: a
slot keeps the KV of its last prompt, and `--cache-ram` (host memory for prompt states, 8 GiB by default) is
bounded (`Workload.cache_ram_mib`: the prefixes held x their tokens x the model's KV bytes per token, plus
CACHE_MARGIN). With unbounded caches every strategy would hit after a few rounds, and the bench would measure
nothing.

Strategies, each over the same prompts (the run's seed), each against cold engines (the model's pods are replaced
before each strategy, so none finds another's prefixes in the caches):
- `kube-proxy`: straight to the Playground's `<name>-lb` Service (kube-proxy picks a pod at random);
- `least-outstanding`: through llmaz-gateway, fewest requests in flight (the gateway's default);
- `prefix-aware`: through llmaz-gateway with the `llmaz.io/routing-strategy: prefix-aware` annotation;
- `prefix-aware x2`: the same behind two gateway replicas (the gateway Service spreads the connections);
- `envoy+epp`: Envoy on the node's host (one worker, the install variant's bootstrap, BUFFERED) asking
  llmaz-gateway's Endpoint Picker in the gateway's pod (`--epp-port` 9002), the Playground `prefix-aware`: the path
  a GIE gateway takes to our routing;
- `llm-d EPP`, the peer, only when its binary is there (`BENCH_LLMD_BINARY`, or `BENCH_LLMD_SRC` with the binary
  `make llm-d` built for `BENCH_LLMD_REF`/`BENCH_GIE_REF`, suite/llmd_epp.py): llm-d's Endpoint Picker as a process
  on the node's host, with file discovery of the model's Ready pods (their IPs and `http` port, read after each
  cold restart), its own default scorers and a llama.cpp metrics mapping, and Envoy in front on loopback; in the
  trace too.

Workloads: (a) `shared-prefix`: 8 groups of users, each group sharing a 1,000-token system prompt, asking unique
short questions; (b) `multi-turn`: 16 chats of 6 turns, each with its own 1,000-token system prompt (instructions
and documents), each turn resending the history with the engine's answers; (c) `unique`: unique 1,000-token
prompts only, the control; (d) `saturation`: (a)'s requests with 16 in flight, more than the 8 slots, for the
requests per second each strategy sustains; (e) `trace` (below), open loop.
For (a)-(d) a client keeps at most the workload's `in_flight` requests in flight; every client streams each answer
and reads the engine's own `usage.prompt_tokens_details.cached_tokens` and `timings.prompt_n` from its last chunk.

The ceiling. No router can reuse more than what an earlier request sent: each request's prompt, rendered by the
engine's chat template and tokenised by the engine (`/apply-template`, `/tokenize`), can at best reuse its longest
common token prefix with any prompt sent before it, less its last token (an engine computes at least one). The
ceiling is that sum over the prompts sent; the efficiency is the cached-token ratio over it.

Figures per strategy and workload, the median of `runs` runs: the cached-token ratio (prompt tokens the engine
reused / prompt tokens sent), the ceiling and the efficiency, and the prefill tokens computed, which the machine's
noise cannot move, and beside them TTFT p50/p90, end-to-end p50 and requests per second. Each run's requests are
kept in the log directory, `routing-<workload>-<strategy>-run<N>.json` (`request_records`): per request its
session, turn, send time, prompt, cached and at best reusable tokens and times, the engine's own time on the
prompt (TTFT less it is what the request waited before its prefill), and, where Envoy is in front, the engine that
served it (Envoy's access log, `llmd_peer.with_served_log`), to see which requests a strategy lost and why.

(e) The trace workload, shaped like the shared-prefix and multi-turn traces published for prefix-cache routing
benchmarks and scaled to this machine, and its knee. Sizes, and why:
- 16 shared documents of ~1,000 tokens (a system prompt and a document each), each asked many new 24-word
  questions, and chats (a quarter of the requests) with their own 700-word system prompt, up to 4 live at once,
  5 turns each, every turn resending the chat's history (its earlier questions and 16-word answers): a chat ends
  near 1,000 tokens, inside a slot's 2,048 (`-c 4096 -np 2`). The answers in the history are the trace's own, not
  the engine's, so every prompt is a function of the seed, the step and its rate alone, the same for every
  strategy, and a turn never waits on an answer.
- 20 live prefixes (16 documents, 4 chats) against 4 replicas holding 5 prompt states each (2 slots and a host
  cache of 3, `--cache-ram 4`): a router that keeps each prefix on one replica fits its quarter in every replica,
  one that does not makes each replica cycle through all 20 and miss most of them. 16 answer tokens keep the
  work prefill.
- Arrivals open loop: a Poisson process at the step's rate (seeded), each request sent at its time whatever is in
  flight, its TTFT counted from that time; each may take 30 s (TRACE_TIMEOUT) and a failed one counts as 30 s
  in its step's TTFT. A step is 40 s of arrivals (`BENCH_TRACE_STEP_SECONDS`) plus its last answers: at the
  1 request/s unloaded step 40 requests, at 16/s 640. (a)'s 1,000-token prompts ran at 8-11 requests/s with 4 to
  16 in flight, so the ladder (`BENCH_TRACE_RATES`, 2 3 4 6 8 11 16 requests/s) brackets the knees.
- Per strategy (kube-proxy, the prefix-blind baseline that picks at random like round robin, least-outstanding
  and prefix-aware), on cold engines: the unloaded step at 1 request/s (`BENCH_TRACE_UNLOADED_RATE`), then the
  ladder up, stopping after the first step whose TTFT p90 is over twice the strategy's own unloaded p90: at most
  8 steps, 4-6 minutes, and one trace run (seed 0), not `runs`, as its steps already hold hundreds of requests.
- The knee: the highest offered rate whose TTFT p90 is at most twice the unloaded TTFT p90, the ladder's step
  (not interpolated), up to the first step over (a later step within does not count). The unloaded figure is one
  for all strategies, the lowest of their unloaded p90s, so a strategy slow even unloaded gets no looser bound.
  The ladder's stop rule (its own unloaded p90, at least that) never stops before the knee. Goal: prefix-aware's
  knee at least twice kube-proxy's.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import random
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from llmaz.gateway import envoy
from llmaz_dev.envtest.images import find_images
from llmaz_dev.envtest.node import NodeCluster
from llmaz_dev.envtest.node.install import GATEWAY, NAMESPACE, install_llmaz
from llmaz_dev.envtest.objectstore import ACCESS_KEY_ID, SECRET_ACCESS_KEY, ObjectStore, tiny_model
from llmaz_dev.tinymodel import PREFILL_HEAVY
from suite import llmd_epp
from suite.llmd_peer import REQUEST_HEADER, SERVED_LOG, envoy_front, free_port, peer, served_by
from suite.settings import REPO, ROUTING_WORKLOADS

MODEL = "bench-llama"
REPLICAS = 4
SLOTS = 2
CONTEXT = 4096
IN_FLIGHT = 4
SATURATING = 16
# The prefill-heavy model's KV cache per token: K and V, F16, over its layers and KV width.
KV_BYTES_PER_TOKEN = (
    2
    * PREFILL_HEAVY.block_count
    * 2
    * (PREFILL_HEAVY.embedding_length // PREFILL_HEAVY.head_count * PREFILL_HEAVY.head_count_kv)
)
# A prompt state in the host cache holds more than its KV (the tokens, the sampling state): room for it.
CACHE_MARGIN = 0.25
MIB = 1 << 20
REQUEST_TIMEOUT = 180.0
READY_TIMEOUT = 300.0
STRATEGIES = ("kube-proxy", "least-outstanding", "prefix-aware", "prefix-aware x2")
# The peer, run only when its binary is there (suite.llmd_epp.llmd_binary): llm-d's EPP on the node's host, with
# file discovery of the model's pods and Envoy in front.
LLMD_STRATEGY = llmd_epp.STRATEGY
# llmaz's own Endpoint Picker behind Envoy on the node's host: the GIE path to the prefix-aware picker.
EPP_STRATEGY = "envoy+epp"
GATEWAY_SELECTOR = "app.kubernetes.io/name=llmaz,app.kubernetes.io/component=gateway"
ROUTING_ANNOTATION = "llmaz.io/routing-strategy"
# For the node scenarios that measure something else than routing with one short prompt for every request
# (autoscaling, tenancy): least outstanding, so no request waits behind another of the same prompt.
LEAST_OUTSTANDING_ROUTING = {ROUTING_ANNOTATION: "least-outstanding"}
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
# Common English words: the SPM vocabulary has a token for each, so a prompt of N words is about N tokens.
_WORD_TEXT = (
    "the of and to in is you that it he was for on are as with his they at be this have from or one had by word but "
    "not what all were we when your can said there use an each which she do how their if will up other about out "
    "many then them these so some her would make like him into time has look two more write go see number no way "
    "could people my than first water been call who oil its now find long down day did get come made may part over "
    "new sound take only little work know place year live me back give most very after thing our just name good "
    "sentence man think say great where help through much before line right too mean old any same tell boy follow "
    "came want show also around form three small set put end does another well large must big even such because "
    "turn here why ask went men read need land different home us move try kind hand picture again change off play "
    "spell air away animal house point page letter mother answer found study still learn should world high every "
    "near add food between own below country plant last school father keep tree never start city earth eye light"
)
_WORDS = tuple(_WORD_TEXT.split())
_PROMPT_WORDS = 960  # about 1,000 tokens with the chat template
_QUESTION_WORDS = 12
_CHAT_SYSTEM_WORDS = 960  # about 1,000 tokens: each chat's own instructions and documents


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    title: str
    kind: str
    """Which sessions it sends (`sessions`)."""
    held_prefixes: int
    """How many of its prefixes one replica's host prompt cache holds."""
    prefix_tokens: int
    """The tokens of its longest prefix kept (a system prompt, or a chat's last turn)."""
    max_tokens: int
    in_flight: int = IN_FLIGHT

    @property
    def cache_ram_mib(self) -> int:
        """The host prompt cache per replica, in MiB (llama.cpp's `--cache-ram`): the prefixes held, with room."""
        held = self.held_prefixes * self.prefix_tokens * KV_BYTES_PER_TOKEN * (1 + CACHE_MARGIN)
        return max(1, math.ceil(held / MIB))


WORKLOADS = (
    # 8 prefixes of ~1,030 tokens; the host cache holds 2 of them, a quarter. A slot serves one request at a time,
    # so two requests of one prefix at once need the host cache: the second restores the prefix from it into the
    # other slot.
    Workload("shared-prefix", "(a) 8 groups sharing a 1,000-token system prompt", "shared-prefix", 2, 1030, 16),
    # 16 chats growing to ~1,500 tokens: 2 in the slots and 4 in the host cache, 6 of 16. Each chat comes back
    # after the others' turns, so an engine whose cache holds fewer chats than it serves evicts each one just before
    # its next turn (least recently used, in a cycle): with 16 chats on every engine none is ever found, with its
    # 3 to 6 all are.
    Workload("multi-turn", "(b) 16 chats of 6 turns", "multi-turn", 4, 1500, 48),
    Workload("unique", "(c) unique 1,000-token prompts (control)", "unique", 2, 1030, 16),
    Workload("saturation", "(d) (a)'s requests, 16 in flight", "shared-prefix", 2, 1030, 16, in_flight=SATURATING),
)
GROUPS, QUESTIONS_PER_GROUP = 8, 8
CHATS, TURNS = 16, 6
UNIQUE_PROMPTS = 48


@dataclass(slots=True)
class Session:
    """One user's requests, sent one after the other: a system prompt and the user turns, in order."""

    system: str
    turns: list[str]


@dataclass(slots=True)
class Sample:
    ok: bool
    messages: list[dict[str, str]] = field(default_factory=list)
    """What was sent, in the order the requests were sent."""
    ttft: float = 0.0
    total: float = 0.0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    prefill_tokens: int = 0
    prompt_ms: float | None = None
    """The engine's own time on the prompt (`timings.prompt_ms`), when it says: TTFT less it is the wait before."""
    endpoint: str | None = None
    """The engine that served it (ip:port), when Envoy fronts the strategy and logged it (`Front.served`)."""
    error: str = ""
    session: int = -1
    """Which of the workload's sessions sent it (-1: none, the trace's documents)."""
    sent_at: float = 0.0
    """When it was sent, in seconds from the run's start."""


@dataclass(slots=True)
class Outcome:
    samples: list[Sample] = field(default_factory=list)
    seconds: float = 0.0


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def sessions(workload: str, seed: int) -> list[Session]:
    """The sessions of `workload`, a function of the seed alone, in the order they start."""
    rng = random.Random(f"{workload}/{seed}")
    if workload == "shared-prefix":
        prompts = [_text(rng, _PROMPT_WORDS) for _ in range(GROUPS)]
        found = [Session(p, [_text(rng, _QUESTION_WORDS)]) for p in prompts for _ in range(QUESTIONS_PER_GROUP)]
    elif workload == "multi-turn":
        found = [Session(_text(rng, _CHAT_SYSTEM_WORDS), [_text(rng, _QUESTION_WORDS) for _ in range(TURNS)])
                 for _ in range(CHATS)]  # fmt: skip
    elif workload == "unique":
        found = [Session(_text(rng, _PROMPT_WORDS), [_text(rng, _QUESTION_WORDS)]) for _ in range(UNIQUE_PROMPTS)]
    else:
        raise ValueError(f"unknown workload {workload!r}")
    rng.shuffle(found)
    return found


async def _stream(
    http: aiohttp.ClientSession,
    url: str,
    messages: list[dict[str, str]],
    max_tokens: int,
    started: float | None = None,
    name: str | None = None,
) -> tuple[Sample, str]:
    """One streamed chat; its times count from `started` (a monotonic time, default now); `name`: the request's, sent
    as REQUEST_HEADER, for `Front.served`."""
    body = {
        "model": MODEL,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started = time.monotonic() if started is None else started
    sample = Sample(ok=False, messages=[dict(m) for m in messages])
    answer: list[str] = []
    try:
        headers = {} if name is None else {REQUEST_HEADER: name}
        async with http.post(f"{url}/v1/chat/completions", json=body, headers=headers) as resp:
            if resp.status != 200:
                sample.error = f"HTTP {resp.status}: {(await resp.text())[:200]}"
                return sample, ""
            async for raw in resp.content:
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                if not sample.ttft:
                    sample.ttft = time.monotonic() - started
                data = line[5:].strip()
                if data == b"[DONE]":
                    sample.ok = True
                    break
                chunk = json.loads(data)
                for choice in chunk.get("choices") or []:
                    answer.append((choice.get("delta") or {}).get("content") or "")
                usage = chunk.get("usage")
                if usage:
                    sample.prompt_tokens = int(usage.get("prompt_tokens") or 0)
                    details = usage.get("prompt_tokens_details") or {}
                    sample.cached_tokens = int(details.get("cached_tokens") or 0)
                    timings = chunk.get("timings") or {}
                    prompt_n = timings.get("prompt_n")
                    prompt_ms = timings.get("prompt_ms")
                    sample.prompt_ms = float(prompt_ms) if isinstance(prompt_ms, int | float) else None
                    sample.prefill_tokens = (
                        int(prompt_n) if isinstance(prompt_n, int) else sample.prompt_tokens - sample.cached_tokens
                    )
    except (aiohttp.ClientError, TimeoutError, ValueError) as err:
        sample.error = f"{type(err).__name__}: {err}"[:300]
    sample.total = time.monotonic() - started
    if sample.ok and not sample.prompt_tokens:
        sample.ok, sample.error = False, "no usage in the answer"
    return sample, "".join(answer)


async def drive(url: str, workload: Workload, seed: int) -> Outcome:
    """Send every session of the workload to `url`, at most the workload's `in_flight` requests at once; the
    samples in the order the requests were sent."""
    outcome = Outcome()
    gate = asyncio.Semaphore(workload.in_flight)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
    # A connection per request: through the gateway Service, kube-proxy then spreads requests, not connections.
    connector = aiohttp.TCPConnector(force_close=True, limit=0)

    async def run(http: aiohttp.ClientSession, number: int, session: Session) -> None:
        messages = [{"role": "system", "content": session.system}]
        for turn in session.turns:
            messages.append({"role": "user", "content": turn})
            async with gate:
                sending = len(outcome.samples)
                outcome.samples.append(Sample(ok=False))  # its place in the sending order
                sent = time.monotonic()
                sample, answer = await _stream(http, url, messages, workload.max_tokens, sent, str(sending))
                sample.session, sample.sent_at = number, sent - started
                outcome.samples[sending] = sample
            if not sample.ok:
                return
            messages.append({"role": "assistant", "content": answer})

    started = time.monotonic()
    async with aiohttp.ClientSession(timeout=timeout, connector=connector, trust_env=False) as http:
        await asyncio.gather(*(run(http, i, s) for i, s in enumerate(sessions(workload.kind, seed))))
    outcome.seconds = time.monotonic() - started
    return outcome


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def reusable_each(prompts: list[list[int]]) -> list[int]:
    """Of the token lists in the order they were sent: the tokens each could at best reuse, its longest common
    prefix with any earlier one, less its last token."""
    found = []
    for i, tokens in enumerate(prompts):
        best = 0
        for earlier in prompts[:i]:
            shared = 0
            for a, b in zip(tokens, earlier, strict=False):
                if a != b:
                    break
                shared += 1
            best = max(best, shared)
        found.append(min(best, max(len(tokens) - 1, 0)))
    return found


def reusable_tokens(prompts: list[list[int]]) -> tuple[int, int]:
    """The tokens the prompts could at best reuse (`reusable_each`), and all their tokens."""
    return sum(reusable_each(prompts)), sum(len(tokens) for tokens in prompts)


def _slug(name: str) -> str:
    """A strategy's name as a file name's part: "prefix-aware x2" -> "prefix-aware-x2"."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def request_records(outcome: Outcome, reusable: list[int]) -> list[dict[str, Any]]:
    """Each request of a run in the order sent, for a look at where a strategy lost what it could have reused:
    its session and turn, when it was sent, its tokens (prompt, cached, at best reusable) and times (the engine's
    own time on the prompt among them)."""
    records = []
    for sample, best in zip(outcome.samples, reusable, strict=True):
        records.append({
            "session": sample.session, "turn": sum(1 for m in sample.messages if m["role"] == "user"),
            "sent_at": round(sample.sent_at, 3), "ok": sample.ok, "prompt_tokens": sample.prompt_tokens,
            "cached_tokens": sample.cached_tokens, "reusable_tokens": best,
            "ttft": round(sample.ttft, 4), "total": round(sample.total, 4),
            "prompt_ms": None if sample.prompt_ms is None else round(sample.prompt_ms, 1), "endpoint": sample.endpoint,
        })  # fmt: skip
    return records


async def tokenised(url: str, samples: list[Sample]) -> list[list[int]]:
    """Each sample's prompt as the engine at `url` renders (its chat template) and tokenises it."""
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
    found: list[list[int]] = []
    async with aiohttp.ClientSession(timeout=timeout, trust_env=False) as http:
        for sample in samples:
            async with http.post(f"{url}/apply-template", json={"messages": sample.messages}) as resp:
                resp.raise_for_status()
                prompt = (await resp.json())["prompt"]
            async with http.post(f"{url}/tokenize", json={"content": prompt, "add_special": True}) as resp:
                resp.raise_for_status()
                found.append([int(t) for t in (await resp.json())["tokens"]])
    return found


def figures(outcome: Outcome, ceiling: float | None = None) -> dict[str, Any]:
    """One run's figures; `ceiling`: the share of the prompt tokens sent that any router could have reused."""
    ok = [s for s in outcome.samples if s.ok]
    sent = sum(s.prompt_tokens for s in ok)
    ratio = sum(s.cached_tokens for s in ok) / sent if sent else None
    return {
        "requests": len(outcome.samples),
        "failed": len(outcome.samples) - len(ok),
        "errors": sorted({s.error for s in outcome.samples if s.error})[:5],
        "prompt_tokens": sent,
        "cached_tokens": sum(s.cached_tokens for s in ok),
        "prefill_tokens": sum(s.prefill_tokens for s in ok),
        "cached_ratio": ratio,
        "ceiling": ceiling,
        "efficiency": ratio / ceiling if ratio is not None and ceiling else None,
        "ttft_p50": _percentile([s.ttft for s in ok], 0.5),
        "ttft_p90": _percentile([s.ttft for s in ok], 0.9),
        "total_p50": _percentile([s.total for s in ok], 0.5),
        "requests_per_second": len(ok) / outcome.seconds if outcome.seconds else None,
        "seconds": outcome.seconds,
    }


# Figures over several runs: the median of each, the failures of all.
_SUMMED = ("requests", "failed")


def median_figures(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over `runs` (None when no run has it), requests and failures summed, the errors of all."""
    found: dict[str, Any] = {"runs": len(runs)}
    for key in runs[0]:
        if key in _SUMMED:
            found[key] = sum(r[key] for r in runs)
        elif key == "errors":
            found[key] = sorted({e for r in runs for e in r[key]})[:5]
        else:
            values = [r[key] for r in runs if isinstance(r.get(key), int | float)]
            found[key] = statistics.median(values) if values else None
    return found


# The cluster side


def model_source(name: str, uri: str, namespace: str = "default") -> list[dict[str, Any]]:
    """The object store's credentials (the Secret the loader reads in `namespace`) and the OpenModel `name` at
    `uri`; shared by the node scenarios."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "aws-access-secret", "namespace": namespace},
            "stringData": {"AWS_ACCESS_KEY_ID": ACCESS_KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY},
        },
        {
            "apiVersion": "llmaz.io/v1alpha1",
            "kind": "OpenModel",
            "metadata": {"name": name},
            "spec": {"familyName": "llama", "source": {"uri": uri}},
        },
    ]


def served_model(
    name: str,
    uri: str,
    endpoint_url: str,
    *,
    namespace: str = "default",
    replicas: int = 1,
    context: int,
    slots: int,
    engine_args: Sequence[str] = (),
    elastic_config: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """`model_source`'s objects, then the Playground `name` in `namespace` serving it with llama.cpp: `replicas`
    replicas of `context` tokens over `slots` slots on one thread, `engine_args` added before the thread count, the
    object store at `endpoint_url`, and `elastic_config` and `annotations` when given. Shared by the node
    scenarios."""
    args = ["--alias", name, "-c", str(context), "-np", str(slots), *engine_args, "-t", "1"]
    spec: dict[str, Any] = {
        "replicas": replicas,
        "modelClaim": {"modelName": name},
        "backendRuntimeConfig": {
            "backendName": "llamacpp",
            "args": args,
            "envs": [{"name": "AWS_ENDPOINT_URL", "value": endpoint_url}],
        },
    }
    if elastic_config is not None:
        spec["elasticConfig"] = elastic_config
    playground: dict[str, Any] = {
        "apiVersion": "inference.llmaz.io/v1alpha1",
        "kind": "Playground",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    if annotations:
        playground["metadata"]["annotations"] = dict(annotations)
    return [*model_source(name, uri, namespace), playground]


def ready_count(pods: Iterable[dict[str, Any]]) -> int:
    """The pods that are Ready and not being deleted."""
    ready = 0
    for pod in pods:
        conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions") or []}
        if not pod["metadata"].get("deletionTimestamp") and conditions.get("Ready") == "True":
            ready += 1
    return ready


def _pods(cluster: NodeCluster) -> list[dict[str, Any]]:
    found = cluster.kubectl("get", "pods", "-n", "default", "-l", f"{LWS_NAME_LABEL}={MODEL}", "-o", "json")
    pods: list[dict[str, Any]] = json.loads(found)["items"]
    return pods


def cold_restart(cluster: NodeCluster) -> None:
    """Replace every engine pod of the model, so the next strategy starts with empty caches."""
    old = {pod["metadata"]["uid"] for pod in _pods(cluster)}
    cluster.kubectl("delete", "pods", "-n", "default", "-l", f"{LWS_NAME_LABEL}={MODEL}", "--wait=false")

    def replaced() -> bool:
        pods = _pods(cluster)
        return not old & {p["metadata"]["uid"] for p in pods} and ready_count(pods) == REPLICAS

    _wait(f"{REPLICAS} new Ready replicas", replaced)
    _wait(f"{REPLICAS} ready endpoints behind {MODEL}-lb", lambda: _ready_endpoints(cluster) == REPLICAS)


def _model_objects(uri: str, endpoint_url: str, workload: Workload) -> list[dict[str, Any]]:
    """The model and its Playground, with the workload's host prompt cache on every replica."""
    cache = ("--cache-ram", str(workload.cache_ram_mib))
    return served_model(MODEL, uri, endpoint_url, replicas=REPLICAS, context=CONTEXT, slots=SLOTS, engine_args=cache)


def _cluster_ip(cluster: NodeCluster, namespace: str, name: str) -> str:
    service = json.loads(cluster.kubectl("get", "service", name, "-n", namespace, "-o", "json"))
    return str(service["spec"]["clusterIP"])


def _ready_pods(cluster: NodeCluster) -> int:
    return ready_count(_pods(cluster))


def _ready_endpoints(cluster: NodeCluster) -> int:
    slices = json.loads(cluster.kubectl(
        "get", "endpointslices", "-n", "default", "-l", f"kubernetes.io/service-name={MODEL}-lb", "-o", "json"
    ))  # fmt: skip
    return sum(
        1
        for s in slices["items"]
        for e in s.get("endpoints") or []
        if (e.get("conditions") or {}).get("ready") is not False
    )


def _wait(what: str, check: Callable[[], bool], timeout: float = READY_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached within {timeout:.0f}s")
        time.sleep(0.5)


def serve(cluster: NodeCluster, uri: str, endpoint_url: str, workload: Workload) -> None:
    """(Re)create the Playground with the workload's cache sizes and wait for its replicas behind `-lb`."""
    cluster.kubectl("delete", "playground", MODEL, "-n", "default", "--ignore-not-found", "--wait=true")
    _wait("the old replicas gone", lambda: not cluster.kubectl(
        "get", "pods", "-n", "default", "-l", f"{LWS_NAME_LABEL}={MODEL}", "-o", "name").strip())  # fmt: skip
    objects = _model_objects(uri, endpoint_url, workload)
    cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(objects))
    _wait(f"{REPLICAS} Ready replicas", lambda: _ready_pods(cluster) == REPLICAS)
    _wait(f"{REPLICAS} ready endpoints behind {MODEL}-lb", lambda: _ready_endpoints(cluster) == REPLICAS)


def use_strategy(cluster: NodeCluster, strategy: str) -> str:
    """Point the Playground and the gateway at `strategy`; the URL the client sends to."""
    gateways = 2 if strategy.endswith("x2") else 1
    cluster.kubectl("scale", f"deployment/{GATEWAY}", "-n", NAMESPACE, f"--replicas={gateways}")
    cluster.kubectl("rollout", "status", f"deployment/{GATEWAY}", "-n", NAMESPACE, f"--timeout={READY_TIMEOUT:.0f}s")
    if strategy == "kube-proxy":
        return f"http://{_cluster_ip(cluster, 'default', f'{MODEL}-lb')}:8080"
    name = strategy.removesuffix(" x2")
    cluster.kubectl("annotate", "playground", MODEL, "-n", "default", f"{ROUTING_ANNOTATION}={name}", "--overwrite")
    return f"http://{_cluster_ip(cluster, NAMESPACE, GATEWAY)}"


def with_peer(base: tuple[str, ...], llmd: Path | None) -> tuple[str, ...]:
    """`base`, then llm-d's EPP when its binary is given."""
    return (*base, LLMD_STRATEGY) if llmd is not None else base


def select_strategies(available: tuple[str, ...], wanted: Iterable[str] | None) -> tuple[str, ...]:
    """The strategies of `available` that are `wanted` (None: all), in `available`'s order; ValueError naming any
    that cannot run."""
    if wanted is None:
        return available
    wanted = tuple(wanted)
    unknown = [name for name in wanted if name not in available]
    if unknown:
        raise ValueError(f"strategies {unknown} cannot run here; choose from {list(available)}")
    return tuple(name for name in available if name in wanted)


def pod_engines(pods: Iterable[dict[str, Any]]) -> list[llmd_epp.Engine]:
    """The model's Ready pods as the EPP's engines: name, pod IP, the port of the container port named `http`
    (llama.cpp's server); a Ready pod without an IP or that port is an error naming it."""
    engines = []
    for pod in sorted(pods, key=lambda p: str(p["metadata"]["name"])):
        if ready_count([pod]) != 1:
            continue
        name = str(pod["metadata"]["name"])
        ip = (pod.get("status") or {}).get("podIP")
        ports = [p for c in pod["spec"]["containers"] for p in c.get("ports") or [] if p.get("name") == "http"]
        if not ip or not ports:
            raise ValueError(f"pod {name}: no status.podIP or no container port named http, the EPP cannot name it")
        engines.append(llmd_epp.Engine(name, str(ip), int(ports[0]["containerPort"])))
    return engines


@dataclass(frozen=True, slots=True)
class Front:
    """Where a strategy's clients send, and, when Envoy is in front, its log of the engine each request went to."""

    url: str
    served_log: Path | None = None

    def served(self) -> dict[str, str]:
        """The engine (ip:port) of each request by the name its client gave it (`_stream`); empty without Envoy.
        Complete once Envoy has stopped (it writes its log as it goes, and the rest when it exits)."""
        return {} if self.served_log is None else served_by(self.served_log)


@contextmanager
def strategy_front(cluster: NodeCluster, strategy: str, llmd: Path | None, log_dir: Path) -> Iterator[Front]:
    """`use_strategy`, or for llm-d's EPP: the gateway at one replica, the EPP and Envoy on this host in front of
    the model's Ready pods, stopped on exit (their files and logs under `log_dir`)."""
    if strategy == EPP_STRATEGY:
        use_strategy(cluster, "prefix-aware")
        work = Path(tempfile.mkdtemp(prefix="routing-envoy-epp-", dir=log_dir))
        with epp_front(cluster, work) as url:
            yield Front(url, work / SERVED_LOG)
        return
    if strategy != LLMD_STRATEGY:
        yield Front(use_strategy(cluster, strategy))
        return
    if llmd is None:
        raise ValueError(f"strategy {strategy!r} needs llm-d's EPP binary: set BENCH_LLMD_BINARY or BENCH_LLMD_SRC")
    use_strategy(cluster, "kube-proxy")  # one gateway replica, as for the other strategies' baseline
    work = Path(tempfile.mkdtemp(prefix="routing-llmd-", dir=log_dir))
    with peer(llmd, pod_engines(_pods(cluster)), work, model=MODEL) as running:
        yield Front(running.url, work / SERVED_LOG)


@contextmanager
def epp_front(cluster: NodeCluster, work: Path) -> Iterator[str]:
    """Envoy on this host with the install variant's bootstrap, asking the Endpoint Picker of the one Ready gateway
    pod; stopped on exit. Yields the URL clients send to."""
    gateways = json.loads(cluster.kubectl("get", "pods", "-n", NAMESPACE, "-l", GATEWAY_SELECTOR, "-o", "json"))
    ready = [pod for pod in gateways["items"] if ready_count([pod]) == 1 and (pod.get("status") or {}).get("podIP")]
    if len(ready) != 1:
        raise RuntimeError(f"expected one Ready gateway pod for Envoy's picker, found {len(ready)}")
    api, admin = free_port(), free_port()
    loopback = envoy.loopback(api, admin, envoy.EPP_PORT)
    picker = envoy.Address(str(ready[0]["status"]["podIP"]), envoy.EPP_PORT)  # the gateway's --epp-port
    bootstrap = envoy.bootstrap(envoy.Addresses(loopback.api, loopback.admin, picker))
    with envoy_front(bootstrap, api, admin, work, model=MODEL) as url:
        yield url


def _wait_answering(url: str) -> None:
    """One tiny request through `url`, retried until it is answered (the gateway follows the endpoints by a
    moment); its prompt shares nothing with any workload's."""

    async def once() -> bool:
        async with aiohttp.ClientSession(trust_env=False, timeout=aiohttp.ClientTimeout(total=30)) as http:
            sample, _ = await _stream(http, url, [{"role": "user", "content": "ping"}], 1)
            return sample.ok

    _wait(f"an answer from {url}", lambda: asyncio.run(once()), timeout=120.0)


@dataclass(frozen=True, slots=True)
class ModelNode:
    """A real node with llmaz installed and the prefill-heavy model in its object store."""

    cluster: NodeCluster
    uri: str
    """The model in the object store (`s3://models/<name>/<name>.gguf`)."""
    endpoint_url: str
    """The object store, for the loader's AWS_ENDPOINT_URL."""


@contextmanager
def model_node(scenario: str, model: str, log_dir: Path) -> Iterator[ModelNode]:
    """One real node with llmaz installed by `make deploy` and the prefill-heavy model uploaded as `model`; all of
    it stopped and removed on exit. Shared by the node scenarios."""
    images = find_images(["pause", "manager", "loader", "llama-server"])
    with tempfile.TemporaryDirectory(prefix=f"llmaz-bench-{scenario}-") as scratch:
        cluster = NodeCluster(
            sandbox_image=images["pause"],
            images=list(images.values()),
            crd_paths=[REPO / "config" / "crd" / "bases"],
            work_dir=Path(scratch) / "cluster",
        )
        with cluster:
            install_llmaz(cluster, images["manager"].image)
            layout = cluster.layout
            with ObjectStore(layout.host_ip, layout.ports.object_store, log_dir / f"{scenario}-s3.log") as store:
                uri = store.upload("models", f"{model}/{model}.gguf", tiny_model("prefill-heavy"))
                yield ModelNode(cluster, uri, f"http://{layout.host_ip}:{layout.ports.object_store}")


# The trace workload (e): open-loop arrivals over shared documents and growing chats, and its knee

TRACE = Workload(
    "trace",
    "(e) trace: 16 shared documents with many questions each, and chats growing their history, open-loop arrivals",
    "trace",
    # 3 prompt states in the host cache, 2 in the slots: a replica holds its quarter of the documents and a chat
    # when a router keeps each prefix on one replica, and under a third of the 20 prefixes live when it does not.
    3,
    1030,
    16,
)
TRACE_STRATEGIES = ("kube-proxy", "least-outstanding", "prefix-aware")
TRACE_BASELINE = "kube-proxy"
"""The prefix-blind baseline of the trace's goal: kube-proxy picks a pod at random, round robin's equal here."""
TRACE_DOCUMENTS = 16
TRACE_DOCUMENT_WORDS = 960  # about 1,000 tokens with the chat template and a question
TRACE_QUESTION_WORDS = 24
TRACE_CHAT_SHARE = 0.25
TRACE_LIVE_CHATS = 4
TRACE_TURNS = 5
TRACE_CHAT_SYSTEM_WORDS = 700  # a chat's last turn: 700 + 5 questions + 4 answers + the template, about 1,000 tokens
TRACE_ANSWER_WORDS = 16
TRACE_TIMEOUT = 30.0
"""Seconds a trace request may take; a failed request counts as this in its step's TTFT."""
KNEE_FACTOR = 2.0
"""A step is within the knee while its TTFT p90 is at most this times the unloaded TTFT p90."""
# Two strategies whose cached-token ratios are this close reuse the same: an engine's own accounting moves its cached
# tokens by a token or two a run (which token of a restored prompt it computes again), about a token a request of
# ~1,000, not the router.
SAME_REUSE = 0.001


@dataclass(frozen=True, slots=True)
class Ladder:
    """The trace's offered rates: an unloaded step, then the ladder, each `step_seconds` of arrivals."""

    unloaded_rate: float = 1.0
    rates: tuple[float, ...] = (2.0, 3.0, 4.0, 6.0, 8.0, 11.0, 16.0)
    step_seconds: float = 40.0


@dataclass(frozen=True, slots=True)
class TraceRequest:
    at: float
    """Seconds from the step's start at which it is sent."""
    kind: str
    """`document` (a question under a shared document) or `chat` (a turn of a chat)."""
    session: str
    """Which document or chat it belongs to."""
    messages: list[dict[str, str]]


def arrivals(rng: random.Random, rate: float, seconds: float) -> list[float]:
    """A Poisson process of `rate` per second over [0, seconds): exponential gaps drawn from `rng`."""
    times: list[float] = []
    at = rng.expovariate(rate)
    while at < seconds:
        times.append(at)
        at += rng.expovariate(rate)
    return times


def trace_documents(seed: int) -> list[str]:
    """The shared prefixes of a seed's trace (a system prompt and a document each), the same at every step."""
    rng = random.Random(f"trace/documents/{seed}")
    return [_text(rng, TRACE_DOCUMENT_WORDS) for _ in range(TRACE_DOCUMENTS)]


@dataclass(slots=True)
class _Chat:
    name: str
    messages: list[dict[str, str]]
    turns: int = 0


def trace_requests(seed: int, step: int, rate: float, seconds: float) -> list[TraceRequest]:
    """The requests of one step of a seed's trace, in the order they are sent: a function of its arguments alone.

    Each arrival is a chat turn with probability TRACE_CHAT_SHARE, otherwise a new question under one of the
    seed's documents. Up to TRACE_LIVE_CHATS chats are live at once: a chat turn starts a new chat while fewer
    are live, else continues a live one, which ends after TRACE_TURNS turns. A turn resends the chat's history,
    its earlier answers as written here (not the engine's), so the prompts never wait on an answer."""
    rng = random.Random(f"trace/{seed}/{step}/{rate!r}/{seconds!r}")
    documents = trace_documents(seed)
    live: list[_Chat] = []
    chats = 0
    found: list[TraceRequest] = []
    for at in arrivals(rng, rate, seconds):
        if rng.random() >= TRACE_CHAT_SHARE:
            doc = rng.randrange(TRACE_DOCUMENTS)
            messages = [{"role": "system", "content": documents[doc]},
                        {"role": "user", "content": _text(rng, TRACE_QUESTION_WORDS)}]  # fmt: skip
            found.append(TraceRequest(at, "document", f"document-{doc}", messages))
            continue
        if len(live) < TRACE_LIVE_CHATS:
            chat = _Chat(f"chat-{step}-{chats}", [{"role": "system", "content": _text(rng, TRACE_CHAT_SYSTEM_WORDS)}])
            chats += 1
            live.append(chat)
        else:
            chat = rng.choice(live)
            chat.messages.append({"role": "assistant", "content": _text(rng, TRACE_ANSWER_WORDS)})
        chat.messages.append({"role": "user", "content": _text(rng, TRACE_QUESTION_WORDS)})
        chat.turns += 1
        found.append(TraceRequest(at, "chat", chat.name, [dict(m) for m in chat.messages]))
        if chat.turns == TRACE_TURNS:
            live.remove(chat)
    return found


async def drive_trace(url: str, requests: list[TraceRequest], max_tokens: int, request_seconds: float) -> Outcome:
    """Send each request at its time from now whatever is still in flight (open loop); its TTFT counts from
    that time, so a client that falls behind shows as latency; each may take `request_seconds`. The samples in the
    order the requests were sent."""
    outcome = Outcome([Sample(ok=False) for _ in requests])
    connector = aiohttp.TCPConnector(force_close=True, limit=0)

    async def one(http: aiohttp.ClientSession, i: int, start: float) -> None:
        due = start + requests[i].at
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        try:
            sample, _ = await asyncio.wait_for(
                _stream(http, url, requests[i].messages, max_tokens, due), request_seconds
            )
        except TimeoutError:
            sample = Sample(ok=False, messages=requests[i].messages, error=f"no answer within {request_seconds:.0f}s")
        outcome.samples[i] = sample

    started = time.monotonic()
    async with aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=request_seconds), connector=connector, trust_env=False
    ) as http:
        await asyncio.gather(*(one(http, i, started) for i in range(len(requests))))
    outcome.seconds = time.monotonic() - started
    return outcome


def step_figures(outcome: Outcome, rate: float, timeout: float) -> dict[str, Any]:
    """One step's figures at its offered `rate`; its TTFT percentiles count a failed request as `timeout`, so
    failures cannot make a step look faster."""
    found = figures(outcome)
    ttfts = [s.ttft if s.ok else timeout for s in outcome.samples]
    found.update(rate=rate, ttft_p50=_percentile(ttfts, 0.5), ttft_p90=_percentile(ttfts, 0.9))
    return found


def past_knee(step: dict[str, Any], own_unloaded_p90: float | None) -> bool:
    """Whether the ladder stops after `step`: its TTFT p90 is over KNEE_FACTOR x the strategy's own unloaded
    p90. The knee's bound (the lowest unloaded p90 of all strategies) is at most that, so a step past this is
    past the knee too."""
    p90 = step.get("ttft_p90")
    return own_unloaded_p90 is None or p90 is None or p90 > KNEE_FACTOR * own_unloaded_p90


def common_unloaded(p90s: dict[str, float | None]) -> float | None:
    """The unloaded TTFT p90 every strategy's knee is judged against: the lowest of the strategies' own, so a
    strategy slow even unloaded gets no looser bound than the fastest."""
    found = [p for p in p90s.values() if p is not None]
    return min(found) if found else None


def knee(steps: list[dict[str, Any]], unloaded_p90: float | None) -> dict[str, Any]:
    """The highest offered rate of the ladder (`steps`, increasing) whose TTFT p90 stays within KNEE_FACTOR x
    `unloaded_p90`: the step before the first one over, not interpolated; a step within after one over does not
    count. `knee` None: no step within; `censored`: no step over, the knee is at least the last step."""
    bound = KNEE_FACTOR * unloaded_p90 if unloaded_p90 is not None else None
    found: float | None = None
    first_over: float | None = None
    for step in steps:
        p90 = step.get("ttft_p90")
        if bound is None or p90 is None or p90 > bound:
            first_over = float(step["rate"])
            break
        found = float(step["rate"])
    return {"knee": found, "bound": bound, "first_over": first_over, "censored": first_over is None}


def knee_goal(prefix_aware: dict[str, Any] | None, baseline: dict[str, Any] | None) -> tuple[float | None, bool | None]:
    """Prefix-aware's knee over the baseline's and whether it is at least 2 (None: the ladder cannot tell)."""
    if not prefix_aware or not baseline or baseline.get("knee") is None:
        return None, None  # the baseline is over at the first step: lower BENCH_TRACE_RATES to measure it
    if prefix_aware.get("knee") is None:
        return 0.0, False
    ratio = float(prefix_aware["knee"]) / float(baseline["knee"])
    if ratio >= 2.0:
        return ratio, True
    return ratio, None if prefix_aware.get("censored") else False  # censored: raise BENCH_TRACE_RATES


def run_trace(
    node: ModelNode,
    ladder: Ladder,
    seed: int = 0,
    say: Callable[[str], None] = print,
    llmd: Path | None = None,
    log_dir: Path | None = None,
) -> dict[str, Any]:
    """The trace's ladder for every strategy on cold engines (llm-d's EPP too with `llmd`, its binary): the
    unloaded step, then each rate until a step is past the knee; then each strategy's knee against the common
    unloaded p90."""
    cluster = node.cluster
    say(f"[routing] {TRACE.title}: {REPLICAS} replicas, --cache-ram {TRACE.cache_ram_mib} MiB, unloaded "
        f"{ladder.unloaded_rate:g}/s, then {' '.join(f'{r:g}' for r in ladder.rates)}/s, "
        f"{ladder.step_seconds:g} s each")  # fmt: skip
    serve(cluster, node.uri, node.endpoint_url, TRACE)
    strategies: dict[str, dict[str, Any]] = {}
    for strategy in with_peer(TRACE_STRATEGIES, llmd):
        cold_restart(cluster)
        ran: dict[str, Any] = {"unloaded": None, "steps": []}
        strategies[strategy] = ran
        with strategy_front(cluster, strategy, llmd, log_dir or Path(tempfile.gettempdir())) as front:
            url = front.url
            _wait_answering(url)
            for step, rate in enumerate((ladder.unloaded_rate, *ladder.rates)):
                requests = trace_requests(seed, step, rate, ladder.step_seconds)
                outcome = asyncio.run(drive_trace(url, requests, TRACE.max_tokens, TRACE_TIMEOUT))
                found = step_figures(outcome, rate, TRACE_TIMEOUT)
                say(f"[routing]   {strategy:<18} {rate:>5g}/s {_trace_line(found)}")
                if step == 0:
                    ran["unloaded"] = found
                    continue
                ran["steps"].append(found)
                if past_knee(found, ran["unloaded"]["ttft_p90"]):
                    break
    unloaded = common_unloaded({s: r["unloaded"]["ttft_p90"] for s, r in strategies.items()})
    knees = {s: knee(r["steps"], unloaded) for s, r in strategies.items()}
    for strategy, found in knees.items():
        say(f"[routing]   knee {strategy:<18} {_knee_text(found)} requests/s")
    return {
        "title": TRACE.title, "seed": seed, "cache_ram_mib": TRACE.cache_ram_mib, "timeout": TRACE_TIMEOUT,
        **asdict(ladder), "unloaded_p90": unloaded, "knee_factor": KNEE_FACTOR, "strategies": strategies,
        "knees": knees,
    }  # fmt: skip


def _trace_line(f: dict[str, Any]) -> str:
    return (
        f"{f['requests']:>4} requests  TTFT p50 {_fmt(f['ttft_p50'], '.2f')}s p90 {_fmt(f['ttft_p90'], '.2f')}s  "
        f"cached {_fmt(f['cached_ratio'], '.2f')}  {_fmt(f['requests_per_second'], '.2f')} answered/s  "
        f"failed {f['failed']}"
    )


def _knee_text(found: dict[str, Any]) -> str:
    if found.get("knee") is None:
        return "below the ladder"
    return f"{'>= ' if found.get('censored') else ''}{found['knee']:g}"


def run_once(
    log_dir: Path,
    runs: int = 3,
    say: Callable[[str], None] = print,
    workloads: Iterable[str] = ROUTING_WORKLOADS,
    ladder: Ladder = Ladder(),
    llmd: Path | None = None,
    strategies: Iterable[str] | None = None,
) -> dict[str, Any]:
    """Every chosen workload and strategy: (a)-(d) `runs` times each over the same prompts per run, the trace once
    up its ladder; cold engines for each strategy. `llmd`: llm-d's EPP binary, run as one more strategy;
    `strategies`: those to run (None: every one)."""
    chosen_strategies = select_strategies(with_peer((*STRATEGIES, EPP_STRATEGY), llmd), strategies)
    chosen = set(workloads)
    selected = [w for w in WORKLOADS if w.name in chosen]
    results: dict[str, Any] = {
        "replicas": REPLICAS, "slots": SLOTS, "context": CONTEXT, "runs": runs,
        "kv_bytes_per_token": KV_BYTES_PER_TOKEN, "cache_margin": CACHE_MARGIN,
        "workloads": [{**asdict(w), "cache_ram_mib": w.cache_ram_mib} for w in selected],
        "strategies": list(chosen_strategies), "figures": {}, "per_run": {},
    }  # fmt: skip
    with model_node("routing", MODEL, log_dir) as node:
        cluster = node.cluster
        for workload in selected:
            say(f"[routing] {workload.title}: {REPLICAS} replicas, --cache-ram {workload.cache_ram_mib} MiB, "
                f"{workload.in_flight} in flight, {runs} runs")  # fmt: skip
            serve(cluster, node.uri, node.endpoint_url, workload)
            engine = f"http://{_cluster_ip(cluster, 'default', f'{MODEL}-lb')}:8080"
            per_run: dict[str, list[dict[str, Any]]] = {strategy: [] for strategy in chosen_strategies}
            for seed in range(runs):
                for strategy in chosen_strategies:
                    cold_restart(cluster)
                    with strategy_front(cluster, strategy, llmd, log_dir) as front:
                        _wait_answering(front.url)
                        outcome = asyncio.run(drive(front.url, workload, seed))
                    served = front.served()
                    for number, sample in enumerate(outcome.samples):
                        sample.endpoint = served.get(str(number))
                    prompts = asyncio.run(tokenised(engine, outcome.samples))
                    reusable, total = reusable_tokens(prompts)
                    found = figures(outcome, reusable / total if total else None)
                    records = log_dir / f"routing-{workload.name}-{_slug(strategy)}-run{seed + 1}.json"
                    records.write_text(json.dumps(request_records(outcome, reusable_each(prompts)), indent=0))
                    per_run[strategy].append(found)
                    say(f"[routing]   run {seed + 1}/{runs} {strategy:<18} {_line(found)}")
            results["per_run"][workload.name] = per_run
            results["figures"][workload.name] = {s: median_figures(f) for s, f in per_run.items()}
            for strategy, found in results["figures"][workload.name].items():
                say(f"[routing]   median  {strategy:<18} {_line(found)}")
        if TRACE.name in chosen:
            try:
                results["trace"] = run_trace(node, ladder, say=say, llmd=llmd, log_dir=log_dir)
            except Exception as err:  # the other workloads' figures stay; the trace's goal is then n/a
                results["trace_error"] = f"{type(err).__name__}: {err}"[:500]
                say(f"[routing] {TRACE.title}: failed: {results['trace_error']}")
        cluster.kubectl("delete", "playground", MODEL, "-n", "default", "--wait=true")
    results["goals"] = goals(results["figures"], results.get("trace"))
    return results


def _line(f: dict[str, Any]) -> str:
    def num(value: float | None, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    return (
        f"cached {num(f['cached_ratio'], '.2f')} of {num(f['ceiling'], '.2f')} (efficiency "
        f"{num(f['efficiency'], '.2f')})  prefill {num(f['prefill_tokens'], '>7.0f')}  "
        f"TTFT p50 {num(f['ttft_p50'], '.2f')}s p90 {num(f['ttft_p90'], '.2f')}s  "
        f"e2e p50 {num(f['total_p50'], '.2f')}s  {num(f['requests_per_second'], '.2f')} req/s  failed {f['failed']}"
    )


# Goals


def _at_least_or_the_same(ratio: float, ours: float | None, theirs: float | None) -> bool:
    """Our cached-token ratio at least theirs (`ratio`), or within SAME_REUSE of it."""
    return ratio >= 1.0 or (ours is not None and theirs is not None and ours >= theirs - SAME_REUSE)


def goals(figures_: dict[str, dict[str, dict[str, Any]]], trace: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The goals, each with what was measured and PASS or FAIL (None when a figure is missing); `trace`: the
    trace workload's ladders and knees (`run_trace`)."""

    def get(workload: str, strategy: str, key: str) -> float | None:
        value = figures_.get(workload, {}).get(strategy, {}).get(key)
        return float(value) if isinstance(value, int | float) else None

    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    rows: list[tuple[str, float | None, Callable[[float], bool]]] = [
        ("(a) efficiency, prefix-aware >= 0.90 of the ceiling", get("shared-prefix", "prefix-aware", "efficiency"),
         lambda v: v >= 0.90),
        ("(a) efficiency, prefix-aware x2 >= 0.85", get("shared-prefix", "prefix-aware x2", "efficiency"),
         lambda v: v >= 0.85),
        ("(a) prefill tokens, prefix-aware / least-outstanding <= 0.4",
         ratio(get("shared-prefix", "prefix-aware", "prefill_tokens"),
               get("shared-prefix", "least-outstanding", "prefill_tokens")), lambda v: v <= 0.4),
        ("(a) TTFT p50, prefix-aware / least-outstanding <= 0.6",
         ratio(get("shared-prefix", "prefix-aware", "ttft_p50"), get("shared-prefix", "least-outstanding", "ttft_p50")),
         lambda v: v <= 0.6),
        ("(a) TTFT p90, prefix-aware / least-outstanding <= 1.0",
         ratio(get("shared-prefix", "prefix-aware", "ttft_p90"), get("shared-prefix", "least-outstanding", "ttft_p90")),
         lambda v: v <= 1.0),
        ("(b) efficiency, prefix-aware >= 0.92 of the ceiling", get("multi-turn", "prefix-aware", "efficiency"),
         lambda v: v >= 0.92),
        ("(c) TTFT p50, prefix-aware / least-outstanding <= 1.05",
         ratio(get("unique", "prefix-aware", "ttft_p50"), get("unique", "least-outstanding", "ttft_p50")),
         lambda v: v <= 1.05),
        ("(d) requests/s at 16 in flight, prefix-aware / least-outstanding >= 0.95",
         ratio(get("saturation", "prefix-aware", "requests_per_second"),
               get("saturation", "least-outstanding", "requests_per_second")), lambda v: v >= 0.95),
    ]  # fmt: skip
    for workload in WORKLOADS:  # our EPP against llm-d's, when it ran: at least its cached tokens, its TTFT at most
        if workload.name == TRACE.name or get(workload.name, LLMD_STRATEGY, "cached_ratio") is None:
            continue
        ours, theirs = (
            get(workload.name, EPP_STRATEGY, "cached_ratio"),
            get(workload.name, LLMD_STRATEGY, "cached_ratio"),
        )
        rows.append((f"{workload.title.split()[0]} cached-token ratio, {EPP_STRATEGY} / {LLMD_STRATEGY} >= 1 "
                     f"(or within {SAME_REUSE:g} of it)", ratio(ours, theirs),
                     functools.partial(_at_least_or_the_same, ours=ours, theirs=theirs)))  # fmt: skip
        rows.append((f"{workload.title.split()[0]} TTFT p50, {EPP_STRATEGY} / {LLMD_STRATEGY} <= 1",
                     ratio(get(workload.name, EPP_STRATEGY, "ttft_p50"), get(workload.name, LLMD_STRATEGY, "ttft_p50")),
                     lambda v: v <= 1.0))  # fmt: skip
    failed = sum(get(w, s, "failed") or 0 for w, by_strategy in figures_.items() for s in by_strategy)
    found = [{"goal": goal, "measured": value, "pass": None if value is None else passes(value)}
             for goal, value, passes in rows]  # fmt: skip
    knees = (trace or {}).get("knees", {})
    measured, verdict = knee_goal(knees.get("prefix-aware"), knees.get(TRACE_BASELINE))
    found.append({"goal": f"(e) trace workload, knee, prefix-aware / {TRACE_BASELINE} >= 2", "measured": measured,
                  "pass": verdict})  # fmt: skip
    found.append({"goal": "failed requests, every strategy and workload = 0", "measured": failed, "pass": failed == 0})
    return found


def report(result: dict[str, Any]) -> str:
    """Markdown: a table per workload and the goals."""
    lines: list[str] = []
    for workload in result["workloads"]:
        by_strategy = result["figures"].get(workload["name"], {})
        if not by_strategy:
            continue
        lines += [
            f"**{workload['title']}** (`--cache-ram {workload['cache_ram_mib']}`, {result['slots']} slots per replica, "
            f"{workload.get('in_flight', IN_FLIGHT)} in flight; medians of {result.get('runs', 1)} runs)",
            "",
            "| strategy | cached-token ratio | ceiling | efficiency | prefill tokens | TTFT p50 | TTFT p90 | e2e p50 "
            "| requests/s | failed |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for strategy, f in by_strategy.items():
            cells = [
                _fmt(f["cached_ratio"], ".2f"), _fmt(f.get("ceiling"), ".3f"), _fmt(f.get("efficiency"), ".2f"),
                _fmt(f["prefill_tokens"], ".0f"), _fmt(f["ttft_p50"], ".2f", " s"),
                _fmt(f["ttft_p90"], ".2f", " s"), _fmt(f["total_p50"], ".2f", " s"),
                _fmt(f["requests_per_second"], ".2f"), str(f["failed"]),
            ]  # fmt: skip
            lines.append(f"| {strategy} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += _trace_report(result.get("trace"))
    if result.get("trace_error"):
        lines += [f"**{TRACE.title}**: failed, {result['trace_error']}", ""]
    lines += ["| goal | measured | result |", "|---|---|---|"]
    for row in result.get("goals", []):
        verdict = "n/a" if row["pass"] is None else ("PASS" if row["pass"] else "FAIL")
        lines.append(f"| {row['goal']} | {_fmt(row['measured'], '.2f')} | {verdict} |")
    return "\n".join(lines)


def _trace_report(trace: dict[str, Any] | None) -> list[str]:
    """The trace's ladder per strategy (its unloaded step first) and each strategy's knee."""
    if not trace:
        return []
    lines = [
        f"**{trace['title']}** (`--cache-ram {trace['cache_ram_mib']}`, {trace['step_seconds']:g} s of open-loop "
        f"arrivals per step; a failed request counts as the timeout in TTFT)",
        "",
        "| strategy | offered requests/s | requests | TTFT p50 | TTFT p90 | cached-token ratio | answered/s | failed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for strategy, ran in trace["strategies"].items():
        rows = [(f"{ran['unloaded']['rate']:g} (unloaded)", ran["unloaded"])] if ran.get("unloaded") else []
        rows += [(f"{step['rate']:g}", step) for step in ran["steps"]]
        for rate, f in rows:
            cells = [
                rate, str(f["requests"]), _fmt(f["ttft_p50"], ".2f", " s"), _fmt(f["ttft_p90"], ".2f", " s"),
                _fmt(f["cached_ratio"], ".2f"), _fmt(f["requests_per_second"], ".2f"), str(f["failed"]),
            ]  # fmt: skip
            lines.append(f"| {strategy} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Knee: the highest offered rate whose TTFT p90 is at most {KNEE_FACTOR:g} x the lowest unloaded TTFT p90 "
        f"of the strategies ({_fmt(trace.get('unloaded_p90'), '.2f', ' s')}), a step of the ladder, not interpolated.",
        "",
        "| strategy | knee (requests/s) | bound (TTFT p90) | first rate over |",
        "|---|---|---|---|",
    ]
    for strategy, found in trace["knees"].items():
        lines.append(f"| {strategy} | {_knee_text(found)} | {_fmt(found.get('bound'), '.2f', ' s')} | "
                     f"{_fmt(found.get('first_over'), 'g')} |")  # fmt: skip
    return [*lines, ""]


def _fmt(value: Any, spec: str, unit: str = "") -> str:
    return "-" if value is None else f"{format(value, spec)}{unit}"


def plot(result: dict[str, Any], out: Path) -> list[Path]:
    """A figure per workload: cached-token ratio and TTFT p50/p90 per strategy, side by side; for the trace,
    TTFT p90 against the offered rate per strategy with the knee's bound."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for workload in result["workloads"]:
        by_strategy = result["figures"].get(workload["name"], {})
        if not by_strategy:
            continue
        names = list(by_strategy)
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
        left.bar(names, [by_strategy[n]["cached_ratio"] or 0 for n in names], color="tab:blue")
        left.set(ylim=(0, 1), ylabel="cached-token ratio", title="prompt tokens reused by the engines")
        xs = range(len(names))
        right.bar([x - 0.2 for x in xs], [by_strategy[n]["ttft_p50"] or 0 for n in names], 0.4, label="p50")
        right.bar([x + 0.2 for x in xs], [by_strategy[n]["ttft_p90"] or 0 for n in names], 0.4, label="p90")
        right.set_xticks(list(xs), names)
        right.set(ylabel="seconds", title="time to first token")
        right.legend()
        for ax in (left, right):
            ax.tick_params(axis="x", labelsize=8)
        fig.suptitle(workload["title"])
        fig.tight_layout()
        path = out / f"routing_{workload['name']}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        paths.append(path)
    trace = result.get("trace")
    if trace:
        fig, ax = plt.subplots(figsize=(7, 4))
        for strategy, ran in trace["strategies"].items():
            steps = [s for s in ([ran["unloaded"]] if ran.get("unloaded") else []) + ran["steps"] if s["ttft_p90"]]
            ax.plot([s["rate"] for s in steps], [s["ttft_p90"] for s in steps], "o-", label=strategy)
        if trace.get("unloaded_p90"):
            ax.axhline(trace["knee_factor"] * trace["unloaded_p90"], color="grey", linestyle="--", label="knee bound")
        ax.set(xlabel="offered requests/s", ylabel="TTFT p90 (s)", yscale="log", title=trace["title"][:60])
        ax.legend()
        fig.tight_layout()
        path = out / "routing_trace.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        paths.append(path)
    return paths
