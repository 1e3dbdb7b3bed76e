"""API requests a subject made: the API server's `apiserver_request_total` minus the driver's own requests.

The API server counts by verb (GET, LIST, WATCH, POST, PUT, PATCH, APPLY, DELETE) and resource; the driver's
REST client counts by HTTP method only. Both are folded onto HTTP methods so one can be subtracted from the
other. The per-resource breakdown of writes is the server's, driver included (the driver's writes are known:
OpenModel and Playground creates and patches, LWS status patches).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from llmaz.runtime.metrics import REGISTRY
from suite.cluster import BenchCluster

_METHOD_OF_VERB = {"LIST": "GET", "WATCH": "GET", "APPLY": "PATCH", "DELETECOLLECTION": "DELETE"}
WRITE_METHODS = ("POST", "PUT", "PATCH", "DELETE")


def driver_counts() -> Counter[str]:
    counts: Counter[str] = Counter()
    for metric in REGISTRY.collect():
        if metric.name == "rest_client_requests":
            for sample in metric.samples:
                if sample.name == "rest_client_requests_total":
                    counts[sample.labels["method"].upper()] += int(sample.value)
    return counts


@dataclass(frozen=True, slots=True)
class Snapshot:
    server: Counter[tuple[str, str]]
    driver: Counter[str]

    @classmethod
    def take(cls, cluster: BenchCluster) -> Snapshot:
        return cls(cluster.request_counts(), driver_counts())

    def subject_requests_since(self, earlier: Snapshot) -> dict[str, int]:
        """Requests by method made by everyone but the driver between `earlier` and this snapshot."""
        server: Counter[str] = Counter()
        for (verb, _), value in (self.server - earlier.server).items():
            server[_METHOD_OF_VERB.get(verb, verb)] += value
        made = server - (self.driver - earlier.driver)
        return {method: made.get(method, 0) for method in ("GET", *WRITE_METHODS)}

    def writes_by_resource_since(self, earlier: Snapshot) -> dict[str, int]:
        """All writes (driver's included) by "VERB resource" between `earlier` and this snapshot."""
        diff = self.server - earlier.server
        return {f"{verb} {res}": v for (verb, res), v in sorted(diff.items()) if _METHOD_OF_VERB.get(verb, verb)
                in WRITE_METHODS}  # fmt: skip


def total_writes(by_method: dict[str, int]) -> int:
    return sum(by_method.get(m, 0) for m in WRITE_METHODS)
