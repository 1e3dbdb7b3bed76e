"""Pure arithmetic of the gateway scenario's proxy comparison (phase 3 and the endpoint picker's phases): CPU per
chunk, Prometheus histogram deltas and their quantiles, and the goals, each a PASS or a FAIL with its figures.

The goals, at `GOAL_STREAMS` streams of `GOAL_TOKENS` tokens (the figures of one run, ratios within it):

- Envoy + EPP (request body BUFFERED): Envoy's and the EPP's CPU per chunk together <= `CPU_RATIO` x Envoy alone's;
- the chunk delay p99 through Envoy + EPP (BUFFERED) <= Envoy alone's + `CHUNK_P99_MARGIN_MS`;
- the EPP's decision time p99 <= `DECISION_P99_MS` at `DECISION_RATE` requests a second (exact from the histogram:
  at least 99 % of the decisions in the bucket that ends at the bound);
- full duplex: no stream failed and every chunk came (streams x tokens);
- no failed request on any path.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

GOAL_STREAMS = 100
GOAL_TOKENS = 256
CPU_RATIO = 1.3
CHUNK_P99_MARGIN_MS = 0.2
DECISION_P99_MS = 2.0
DECISION_RATE = 300.0
DECISION_QUANTILE = 0.99

# Phase 3's subjects, in the order they run and are reported.
DIRECT = "direct"
GATEWAY = "llmaz-gateway"
GATEWAY_X2 = "llmaz-gateway x2"
ENVOY = "envoy"
ENVOY_EPP = "envoy+epp buffered"
ENVOY_EPP_DUPLEX = "envoy+epp full duplex"
ENVOY2_EPP = "envoy 2 workers+epp"
SUBJECTS = (GATEWAY, ENVOY, ENVOY_EPP, ENVOY_EPP_DUPLEX, ENVOY2_EPP, GATEWAY_X2)


def cpu_us_per_chunk(cpu_seconds: Mapping[str, float], chunks: int) -> dict[str, float]:
    """Each process's CPU per chunk relayed in microseconds, and `total`, their sum; NaN with no chunk."""
    per = {name: seconds * 1e6 / chunks if chunks else math.nan for name, seconds in cpu_seconds.items()}
    per["total"] = sum(cpu_seconds.values()) * 1e6 / chunks if chunks else math.nan
    return per


def chunks_intact(streams: int, errors: int, chunks: int, tokens: int) -> bool:
    """No stream failed and every stream's every token chunk was read (the load generator keeps a stream's chunks
    only when the stream is whole)."""
    return errors == 0 and streams > 0 and chunks == streams * tokens


Buckets = list[tuple[float, float]]
"""A histogram's cumulative buckets: (upper bound `le`, count at or below it), ascending, +Inf last."""


def parse_histogram(text: str, name: str) -> Buckets:
    """The cumulative buckets of the unlabelled histogram `name` in a Prometheus text exposition."""
    prefix = f"{name}_bucket{{"
    buckets: Buckets = []
    for line in text.splitlines():
        if not line.startswith(prefix):
            continue
        labels, _, value = line[len(prefix) :].partition("} ")
        le = dict(part.split("=", 1) for part in labels.split(","))["le"].strip('"')
        buckets.append((math.inf if le == "+Inf" else float(le), float(value)))
    if not buckets:
        raise ValueError(f"no histogram {name} in the metrics page")
    return sorted(buckets)


def bucket_delta(after: Buckets, before: Buckets) -> Buckets:
    """The observations between two scrapes of one histogram (same buckets)."""
    if [le for le, _ in after] != [le for le, _ in before]:
        raise ValueError("the two scrapes have different buckets")
    return [(le, a - b) for (le, a), (_, b) in zip(after, before, strict=True)]


def share_within(buckets: Buckets, bound: float) -> float:
    """The share of observations at or below `bound`, which must be a bucket's upper bound; NaN with none."""
    total = buckets[-1][1]
    for le, count in buckets:
        if math.isclose(le, bound):
            return count / total if total else math.nan
    raise ValueError(f"{bound} is not a bucket bound of the histogram")


def histogram_quantile(buckets: Buckets, q: float) -> float:
    """As PromQL's histogram_quantile: linear within the bucket the rank falls in (from 0 for the first); the
    last finite bound when it falls in +Inf; NaN with no observation."""
    total = buckets[-1][1]
    if total == 0:
        return math.nan
    rank = q * total
    lower, below = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if math.isinf(le):
                return lower
            return lower + (le - lower) * ((rank - below) / (count - below) if count > below else 1.0)
        lower, below = le, count
    return lower


@dataclass(frozen=True, slots=True)
class Goal:
    name: str
    target: str
    measured: str
    passed: bool

    def row(self) -> str:
        return f"| {self.name} | {self.target} | {self.measured} | {'PASS' if self.passed else 'FAIL'} |"

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "target": self.target, "measured": self.measured, "passed": self.passed}


def _get(subjects: Mapping[str, Any], name: str, *path: str) -> float:
    value: Any = subjects[name]
    for key in path:
        value = value[key]
    return float(value)


def evaluate(streams: Mapping[str, Any], decision: Mapping[str, Any] | None) -> list[Goal]:
    """The goals over phase 3's per-subject readings (`streams`: subject -> its reading, see gateway_proxies) and the
    decision phase's; a goal whose subject did not run is left out."""
    goals: list[Goal] = []
    if ENVOY in streams and ENVOY_EPP in streams:
        alone = _get(streams, ENVOY, "cpu_us_per_chunk", "total")
        both = _get(streams, ENVOY_EPP, "cpu_us_per_chunk", "total")
        ratio = both / alone if alone else math.inf
        goals.append(Goal("Envoy+EPP (buffered) CPU per chunk, Envoy's + EPP's / Envoy alone's", f"<= {CPU_RATIO:g}",
                          f"{ratio:.2f} ({both:.1f} / {alone:.1f} us)", ratio <= CPU_RATIO))  # fmt: skip
        floor = _get(streams, ENVOY, "percentiles", "chunk_delay", "p99")
        p99 = _get(streams, ENVOY_EPP, "percentiles", "chunk_delay", "p99")
        goals.append(Goal("Envoy+EPP (buffered) chunk delay p99", f"<= Envoy alone's + {CHUNK_P99_MARGIN_MS:g} ms",
                          f"{p99:.2f} ms (Envoy alone {floor:.2f} ms, +{p99 - floor:.2f})",
                          p99 <= floor + CHUNK_P99_MARGIN_MS))  # fmt: skip
    if decision is not None:
        share = float(decision["share_within_bound"])
        goals.append(Goal(f"EPP decision p99 at {decision['rate']:g} requests/s", f"<= {DECISION_P99_MS:g} ms",
                          f"{decision['p99_ms']:.3f} ms ({100 * share:.2f} % within {DECISION_P99_MS:g} ms, "
                          f"{decision['decisions']} decisions)", share >= DECISION_QUANTILE))  # fmt: skip
    if ENVOY_EPP_DUPLEX in streams:
        d = streams[ENVOY_EPP_DUPLEX]
        goals.append(Goal("full duplex: failed streams, chunks intact", "0, every chunk",
                          f"{d['errors']} failed, {d['chunks']} of {d['streams']} x {d['tokens']} chunks",
                          bool(d["intact"])))  # fmt: skip
    failed = {name: int(s["errors"]) + int(s["direct_errors"]) for name, s in streams.items()}
    if decision is not None:
        failed["EPP decision phase"] = int(decision["failed"])
    if failed:
        worst = ", ".join(f"{name} {count}" for name, count in failed.items() if count) or "none"
        goals.append(Goal("failed requests, every path", "0", worst, not any(failed.values())))
    return goals


def passes(goals: Iterable[Goal]) -> bool:
    return all(g.passed for g in goals)
