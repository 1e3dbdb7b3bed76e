"""The gateway's autoscaler under a staircase of real traffic, on the real node.

`make bench-autoscale` (`BENCH_SCENARIOS=autoscale`, needs root and the node tier: `make node-bins image-build`):
one real node with llmaz installed by `make deploy` (llmaz-gateway's autoscaler on, engine signals every 0.25 s,
the defaults), the prefill-heavy random llama (`llmaz_dev.tinymodel.PREFILL_HEAVY`, about 10 ms per decoded
token here) served by one Playground whose llama.cpp servers have 2 slots each (`-np 2 -t 1`), scaled by the
autoscaler:

    elasticConfig: {minReplicas: 1, maxReplicas: 4,
                    scaleTrigger: {requests: {targetPerReplica: 2, stableWindow: 30s, panicWindow: 6s,
                                              scaleDownDelay: 60s}}}

The windows are shorter than the defaults (60s, 6s, 5m) so that a run is bounded (~10 min with the node's start).

The staircase, through the gateway's Service: `warm` seconds of 1 stream, then `step` seconds of `streams`
concurrent streams (8: 4 replicas' worth at 2 per replica), then none until the Playground is back to
minReplicas or `idle` seconds pass. Each stream loops: a streamed chat of `MAX_TOKENS` tokens, its status, time
to first token and end recorded; a status other than 200 or a stream without its `[DONE]` is a failure. A sampler
thread reads every second the Playground's `spec.replicas`, its Ready pods, and the requests the client has in
flight; at the end the Playground's Events (the autoscaler's `ScaledUp` and `ScaledDown`) are read.

Figures (`scale_figures`, pure, unit-tested): from the step up (the 8 streams start) until `spec.replicas` first
reaches the target (ceil(streams / targetPerReplica), within maxReplicas) and its peak, and until that many pods
are Ready; from the load stopping (the step's last answer ended) until `spec.replicas` is back to minReplicas;
the replica changes during the steady streams after the peak was first reached. Goals (`goals`): replicas reach
the target within 30 s, at most 1 change at steady load (the issue's "at most 1 per 5 min"), back to minReplicas
within scaleDownDelay + 30 s, never above maxReplicas, no failed request.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from llmaz_dev.envtest._rest import RestClient
from llmaz_dev.envtest.node.install import GATEWAY, NAMESPACE
from llmaz_dev.testing.waiting import eventually_sync
from suite.routing_bench import LEAST_OUTSTANDING_ROUTING, model_node, ready_count, served_model

MODEL = "bench-autoscale"
PLAYGROUND_NAMESPACE = "default"
SLOTS = 2
CONTEXT = 4096
MAX_TOKENS = 64
REQUEST_TIMEOUT = 120.0
READY_TIMEOUT = 300.0
SAMPLE_EVERY = 1.0
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
AUTOSCALER_REASONS = ("ScaledUp", "ScaledDown")
SCALE_UP_GOAL = 30.0
STEADY_CHANGES_GOAL = 1
SCALE_DOWN_SLACK = 30.0
PROMPT = "Tell me a long story about the sea, the wind and a small boat."


@dataclass(frozen=True, slots=True)
class Policy:
    """The Playground's `elasticConfig` (seconds for the durations)."""

    min_replicas: int = 1
    max_replicas: int = 4
    target_per_replica: float = 2.0
    stable_window: float = 30.0
    panic_window: float = 6.0
    scale_down_delay: float = 60.0

    def elastic_config(self) -> dict[str, Any]:
        requests = {
            "targetPerReplica": self.target_per_replica,
            "stableWindow": f"{self.stable_window:g}s",
            "panicWindow": f"{self.panic_window:g}s",
            "scaleDownDelay": f"{self.scale_down_delay:g}s",
        }
        return {"minReplicas": self.min_replicas, "maxReplicas": self.max_replicas,
                "scaleTrigger": {"requests": requests}}  # fmt: skip

    def target(self, streams: int) -> int:
        """Replicas `streams` concurrent streams need at the target, within the bounds."""
        wanted = math.ceil(streams / self.target_per_replica)
        return min(max(wanted, self.min_replicas), self.max_replicas)


POLICY = Policy()


@dataclass(frozen=True, slots=True)
class Point:
    """One reading of the sampler."""

    at: float
    """Seconds since the run's start."""
    replicas: int
    """The Playground's spec.replicas."""
    ready: int
    """Its Ready pods (not being deleted)."""
    in_flight: int
    """Requests the client had in flight."""


@dataclass(frozen=True, slots=True)
class Answer:
    phase: str
    started: float
    """Seconds since the run's start."""
    ended: float
    ttft: float | None
    """Seconds from sending to the first event of the stream; None when none came."""
    status: int
    ok: bool
    error: str = ""


# The figures, pure


def first_at(points: Iterable[Point], since: float, holds: Callable[[Point], bool]) -> float | None:
    """When `holds` first held at or after `since`; None if it never did."""
    return next((p.at for p in points if p.at >= since and holds(p)), None)


def changes(points: Iterable[Point], start: float, end: float) -> int:
    """How often spec.replicas changed between consecutive readings taken from `start` to `end`."""
    counts = [p.replicas for p in points if start <= p.at <= end]
    return sum(1 for before, after in pairwise(counts) if before != after)


def scale_figures(
    points: Sequence[Point], step_up: float, load_stopped: float, target: int, min_replicas: int
) -> dict[str, Any]:
    """The scaling figures of a staircase run (see the module docstring); a figure is None when what it times never
    happened while the sampler ran."""

    def since_step(at: float | None) -> float | None:
        return None if at is None else at - step_up

    loaded = [p for p in points if step_up <= p.at <= load_stopped]
    peak = max((p.replicas for p in loaded), default=None)
    peak_at = None if peak is None else first_at(loaded, step_up, lambda p: p.replicas == peak)
    back_at = first_at(points, load_stopped, lambda p: p.replicas <= min_replicas)
    return {
        "target": target,
        "peak": peak,
        "to_target_seconds": since_step(first_at(loaded, step_up, lambda p: p.replicas >= target)),
        "to_target_ready_seconds": since_step(first_at(loaded, step_up, lambda p: p.ready >= target)),
        "to_peak_seconds": since_step(peak_at),
        "to_peak_ready_seconds": (
            None if peak is None else since_step(first_at(loaded, step_up, lambda p: p.ready >= peak))
        ),
        "steady_changes": None if peak_at is None else changes(points, peak_at, load_stopped),
        "steady_seconds": None if peak_at is None else load_stopped - peak_at,
        "scale_down_seconds": None if back_at is None else back_at - load_stopped,
        "max_replicas_seen": max((p.replicas for p in points), default=None),
    }


def percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def answer_figures(answers: Sequence[Answer]) -> dict[str, Any]:
    """Per phase and in all: requests, failures (and their first distinct errors), TTFT p50/p90."""

    def of(group: Sequence[Answer]) -> dict[str, Any]:
        ttfts = [a.ttft for a in group if a.ok and a.ttft is not None]
        return {
            "requests": len(group),
            "failed": sum(1 for a in group if not a.ok),
            "errors": sorted({a.error for a in group if a.error})[:5],
            "ttft_p50": percentile(ttfts, 0.5),
            "ttft_p90": percentile(ttfts, 0.9),
        }

    phases = list(dict.fromkeys(a.phase for a in answers))
    return {"all": of(answers), **{phase: of([a for a in answers if a.phase == phase]) for phase in phases}}


def goals(figures: dict[str, Any], failed: int, policy: Policy) -> list[dict[str, Any]]:
    """Each goal with what was measured and PASS or FAIL; a time that never came (None) fails."""

    def row(goal: str, measured: float | None, passes: Callable[[float], bool]) -> dict[str, Any]:
        return {"goal": goal, "measured": measured, "pass": measured is not None and passes(measured)}

    down_goal = policy.scale_down_delay + SCALE_DOWN_SLACK
    return [
        row(f"scale up: spec.replicas reaches the target ({figures['target']}) within {SCALE_UP_GOAL:g} s",
            figures["to_target_seconds"], lambda v: v <= SCALE_UP_GOAL),
        row(f"steady load: replica changes after the peak <= {STEADY_CHANGES_GOAL}", figures["steady_changes"],
            lambda v: v <= STEADY_CHANGES_GOAL),
        row(f"scale down: back to minReplicas ({policy.min_replicas}) within scaleDownDelay + "
            f"{SCALE_DOWN_SLACK:g} s ({down_goal:g} s) of the load stopping", figures["scale_down_seconds"],
            lambda v: v <= down_goal),
        row(f"never above maxReplicas ({policy.max_replicas})", figures["max_replicas_seen"],
            lambda v: v <= policy.max_replicas),
        row("failed requests = 0", failed, lambda v: v == 0),
    ]  # fmt: skip


def event_at(event: dict[str, Any], wall_zero: float) -> float | None:
    """When an Event (core/v1 view) happened, in seconds since the run's start (wall clock `wall_zero`)."""
    stamp = event.get("eventTime") or event.get("lastTimestamp") or event.get("firstTimestamp")
    stamp = stamp or event.get("metadata", {}).get("creationTimestamp")
    if not isinstance(stamp, str):
        return None
    return datetime.fromisoformat(stamp).timestamp() - wall_zero


# The client


@dataclass(slots=True)
class Traffic:
    """What the client did: its answers and its requests in flight now (read by the sampler's thread)."""

    zero: float
    """time.monotonic() at the run's start."""
    answers: list[Answer] = field(default_factory=list)
    in_flight: int = 0

    def now(self) -> float:
        return time.monotonic() - self.zero


async def one_stream(http: aiohttp.ClientSession, url: str, traffic: Traffic, phase: str) -> Answer:
    """One streamed chat through `url`, read to its end."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": MAX_TOKENS,
            "temperature": 0, "stream": True}  # fmt: skip
    started, ttft, status, done, error = traffic.now(), None, 0, False, ""
    traffic.in_flight += 1
    try:
        async with http.post(f"{url}/v1/chat/completions", json=body) as resp:
            status = resp.status
            if status != 200:
                error = f"HTTP {status}: {(await resp.text())[:200]}"
            else:
                async for raw in resp.content:
                    line = raw.strip()
                    if not line.startswith(b"data:"):
                        continue
                    if ttft is None:
                        ttft = traffic.now() - started
                    if line[5:].strip() == b"[DONE]":
                        done = True
                        break
                if not done:
                    error = "the stream ended without [DONE]"
    except (aiohttp.ClientError, TimeoutError) as err:
        error = f"{type(err).__name__}: {err}"[:300]
    finally:
        traffic.in_flight -= 1
    return Answer(phase, started, traffic.now(), ttft, status, ok=done, error=error)


async def hold_streams(url: str, traffic: Traffic, phase: str, streams: int, seconds: float) -> None:
    """`streams` clients, each sending one stream after the other until `seconds` have passed (the last ones end
    after that)."""
    until = traffic.now() + seconds
    # A connection per request: through the gateway Service, kube-proxy then spreads requests, not connections.
    connector = aiohttp.TCPConnector(force_close=True, limit=0)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)

    async def client(http: aiohttp.ClientSession) -> None:
        while traffic.now() < until:
            traffic.answers.append(await one_stream(http, url, traffic, phase))

    async with aiohttp.ClientSession(connector=connector, timeout=timeout, trust_env=False) as http:
        await asyncio.gather(*(client(http) for _ in range(streams)))


# The cluster side


def model_objects(uri: str, endpoint_url: str, policy: Policy) -> list[dict[str, Any]]:
    """The model and its Playground, starting at the policy's floor and scaled by it."""
    return served_model(
        MODEL,
        uri,
        endpoint_url,
        namespace=PLAYGROUND_NAMESPACE,
        replicas=policy.min_replicas,
        context=CONTEXT,
        slots=SLOTS,
        elastic_config=policy.elastic_config(),
        annotations=LEAST_OUTSTANDING_ROUTING,
    )


def _spec_replicas(api: RestClient) -> int:
    path = f"/apis/inference.llmaz.io/v1alpha1/namespaces/{PLAYGROUND_NAMESPACE}/playgrounds/{MODEL}"
    return int(api.request("GET", path)["spec"].get("replicas", 0))


def _ready_pods(api: RestClient) -> int:
    pods = api.request("GET", f"/api/v1/namespaces/{PLAYGROUND_NAMESPACE}/pods",
                       query={"labelSelector": f"{LWS_NAME_LABEL}={MODEL}"})["items"]  # fmt: skip
    return ready_count(pods)


class Sampler:
    """Reads spec.replicas, the Ready pods and the client's requests in flight every SAMPLE_EVERY seconds, on its
    own thread; a reading that fails is skipped and counted."""

    def __init__(self, api: RestClient, traffic: Traffic) -> None:
        self._api = api
        self._traffic = traffic
        self.points: list[Point] = []
        self.missed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="autoscale-sampler", daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def latest(self) -> Point | None:
        return self.points[-1] if self.points else None

    def _run(self) -> None:
        ticks = 0
        while not self._stop.is_set():
            at = self._traffic.now()
            try:
                replicas, ready = _spec_replicas(self._api), _ready_pods(self._api)
            except (OSError, RuntimeError, KeyError, ValueError):
                self.missed += 1
            else:
                self.points.append(Point(round(at, 2), replicas, ready, self._traffic.in_flight))
            ticks += 1
            self._stop.wait(max(0.0, ticks * SAMPLE_EVERY - self._traffic.now()))


def _playground_events(api: RestClient, wall_zero: float) -> list[dict[str, Any]]:
    events = api.request("GET", f"/api/v1/namespaces/{PLAYGROUND_NAMESPACE}/events")["items"]
    found = [
        {"at": event_at(e, wall_zero), "type": e.get("type"), "reason": e.get("reason"), "message": e.get("message"),
         "count": (e.get("series") or {}).get("count", e.get("count") or 1)}
        for e in events
        if (e.get("involvedObject") or {}).get("kind") == "Playground"
        and (e.get("involvedObject") or {}).get("name") == MODEL
    ]  # fmt: skip
    return sorted(found, key=lambda e: e["at"] if e["at"] is not None else math.inf)


def _wait_answering(url: str, traffic: Traffic) -> None:
    """One stream through `url`, retried until it is answered (the gateway follows the endpoints by a moment)."""

    async def once() -> bool:
        async with aiohttp.ClientSession(trust_env=False, timeout=aiohttp.ClientTimeout(total=30)) as http:
            return (await one_stream(http, url, traffic, "probe")).ok

    eventually_sync(lambda: asyncio.run(once()), within=120.0, what=f"an answer from {url}", interval=0.5)


@dataclass(frozen=True, slots=True)
class Staircase:
    streams: int
    """Concurrent streams of the step."""
    warm: float
    """Seconds of 1 stream before the step."""
    step: float
    """Seconds the step's streams are held."""
    idle: float
    """Longest wait after the step for the Playground to be back to minReplicas."""


def run_once(staircase: Staircase, log_dir: Path, say: Callable[[str], None] = print) -> dict[str, Any]:
    policy = POLICY
    with model_node("autoscale", MODEL, log_dir) as node:
        cluster, api = node.cluster, node.cluster.admin_client()
        objects = model_objects(node.uri, node.endpoint_url, policy)
        cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(objects))
        eventually_sync(lambda: _ready_pods(api) == policy.min_replicas, within=READY_TIMEOUT,
                        what=f"{policy.min_replicas} Ready replica", interval=0.5)  # fmt: skip
        service = json.loads(cluster.kubectl("get", "service", GATEWAY, "-n", NAMESPACE, "-o", "json"))
        url = f"http://{service['spec']['clusterIP']}"
        _wait_answering(url, Traffic(time.monotonic()))
        result = _staircase(api, url, staircase, policy, say)
        cluster.kubectl("delete", "playground", MODEL, "-n", PLAYGROUND_NAMESPACE, "--wait=true")
    return result


def _staircase(
    api: RestClient, url: str, staircase: Staircase, policy: Policy, say: Callable[[str], None]
) -> dict[str, Any]:
    wall_zero, traffic = time.time(), Traffic(time.monotonic())
    with Sampler(api, traffic) as sampler:
        say(f"[autoscale] 1 stream for {staircase.warm:g} s")
        asyncio.run(hold_streams(url, traffic, "warm", 1, staircase.warm))
        step_up = traffic.now()
        say(f"[autoscale] {staircase.streams} streams for {staircase.step:g} s")
        asyncio.run(hold_streams(url, traffic, "step", staircase.streams, staircase.step))
        load_stopped = max((a.ended for a in traffic.answers if a.phase == "step"), default=traffic.now())
        say(f"[autoscale] idle until minReplicas ({policy.min_replicas}), at most {staircase.idle:g} s")

        def back_to_min() -> bool:
            latest = sampler.latest()
            return latest is not None and latest.at > load_stopped and latest.replicas <= policy.min_replicas

        try:
            eventually_sync(back_to_min, within=staircase.idle, what="the Playground back to minReplicas",
                            interval=SAMPLE_EVERY)  # fmt: skip
        except AssertionError as err:  # recorded as a figure that never came: the goal fails
            say(f"[autoscale] {err}")
        points = list(sampler.points)
    events = _playground_events(api, wall_zero)
    figures = scale_figures(points, step_up, load_stopped, policy.target(staircase.streams), policy.min_replicas)
    requests = answer_figures(traffic.answers)
    result = {
        "policy": asdict(policy), "staircase": asdict(staircase), "slots": SLOTS, "max_tokens": MAX_TOKENS,
        "step_up": step_up, "load_stopped": load_stopped, "missed_samples": sampler.missed,
        "timeline": {name: [getattr(p, name) for p in points] for name in ("at", "replicas", "ready", "in_flight")},
        "events": events, "figures": figures, "requests": requests,
        "goals": goals(figures, requests["all"]["failed"], policy),
    }  # fmt: skip
    say(f"[autoscale] {_line(figures)}; failed {requests['all']['failed']} of {requests['all']['requests']}")
    return result


def _fmt(value: Any, spec: str = ".1f", unit: str = "") -> str:
    return "never" if value is None else f"{format(value, spec)}{unit}"


def _line(f: dict[str, Any]) -> str:
    return (
        f"peak {f['peak']} (target {f['target']}): spec {_fmt(f['to_target_seconds'], unit=' s')}, "
        f"Ready {_fmt(f['to_target_ready_seconds'], unit=' s')} after the step; "
        f"{f['steady_changes']} changes at steady load; back to min {_fmt(f['scale_down_seconds'], unit=' s')} "
        f"after the load stopped"
    )


def report(result: dict[str, Any]) -> str:
    """Markdown: the policy and staircase, the figures, the goals, the requests per phase and the Events."""
    p, s, f = result["policy"], result["staircase"], result["figures"]
    lines = [
        f"Policy: minReplicas {p['min_replicas']}, maxReplicas {p['max_replicas']}, targetPerReplica "
        f"{p['target_per_replica']:g}, stableWindow {p['stable_window']:g}s, panicWindow {p['panic_window']:g}s, "
        f"scaleDownDelay {p['scale_down_delay']:g}s; {result['slots']} slots per replica. Staircase: 1 stream "
        f"{s['warm']:g} s, {s['streams']} streams {s['step']:g} s, then idle (at most {s['idle']:g} s); "
        f"{result['max_tokens']} tokens per answer.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| peak spec.replicas (target) | {_fmt(f['peak'], 'd')} ({f['target']}) |",
        f"| step up -> spec.replicas at the target | {_fmt(f['to_target_seconds'], '.1f', ' s')} |",
        f"| step up -> target pods Ready | {_fmt(f['to_target_ready_seconds'], '.1f', ' s')} |",
        f"| step up -> spec.replicas at the peak | {_fmt(f['to_peak_seconds'], '.1f', ' s')} |",
        f"| step up -> peak pods Ready | {_fmt(f['to_peak_ready_seconds'], '.1f', ' s')} |",
        f"| replica changes at steady load (over) | {_fmt(f['steady_changes'], 'd')} "
        f"({_fmt(f['steady_seconds'], '.0f', ' s')}) |",
        f"| load stopped -> back to minReplicas | {_fmt(f['scale_down_seconds'], '.1f', ' s')} |",
        "",
        "| goal | measured | result |",
        "|---|---|---|",
        *(f"| {g['goal']} | {_fmt(g['measured'], 'g')} | {'PASS' if g['pass'] else 'FAIL'} |" for g in result["goals"]),
        "",
        "| phase | requests | failed | TTFT p50 | TTFT p90 |",
        "|---|---|---|---|---|",
    ]
    for phase, r in result["requests"].items():
        lines.append(f"| {phase} | {r['requests']} | {r['failed']} | {_fmt(r['ttft_p50'], '.2f', ' s')} | "
                     f"{_fmt(r['ttft_p90'], '.2f', ' s')} |")  # fmt: skip
    errors = result["requests"]["all"]["errors"]
    if errors:
        lines += ["", "Errors: " + "; ".join(errors)]
    scaled = [e for e in result["events"] if e["reason"] in AUTOSCALER_REASONS]
    lines += ["", "| at (s) | Event | message |", "|---|---|---|"]
    lines += [f"| {_fmt(e['at'])} | {e['reason']} | {e['message']} |" for e in scaled]
    return "\n".join(lines)


def plot(result: dict[str, Any], out: Path) -> Path:
    """spec.replicas, Ready pods and the client's requests in flight against time, the phases and the Events."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    timeline = result["timeline"]
    fig, ax = plt.subplots(figsize=(11, 4.5))
    ax.step(timeline["at"], timeline["in_flight"], where="post", color="tab:gray", alpha=0.6,
            label="client requests in flight")  # fmt: skip
    ax.step(timeline["at"], timeline["replicas"], where="post", color="tab:blue", linewidth=2, label="spec.replicas")
    ax.step(timeline["at"], timeline["ready"], where="post", color="tab:green", linestyle="--", label="Ready pods")
    ax.axvline(result["step_up"], color="tab:red", linestyle=":", label="step up / load stopped")
    ax.axvline(result["load_stopped"], color="tab:red", linestyle=":")
    for event in result["events"]:
        if event["reason"] in AUTOSCALER_REASONS and event["at"] is not None:
            ax.annotate("", (event["at"], 0), (event["at"], -0.6),
                        arrowprops={"arrowstyle": "-", "color": "tab:purple"}, annotation_clip=False)  # fmt: skip
    ax.set(xlabel="seconds since the start (purple ticks: ScaledUp/ScaledDown Events)", ylabel="count",
           title="Autoscaler: a staircase of streams through the gateway", ylim=(-0.6, None))  # fmt: skip
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    path = out / "autoscale_timeline.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
