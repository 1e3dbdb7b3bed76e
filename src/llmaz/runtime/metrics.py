"""The one Prometheus registry every runtime metric registers into and the metrics endpoint serves.

Metric names follow client-go and controller-runtime exactly, so existing dashboards work unchanged.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

REGISTRY = CollectorRegistry(auto_describe=True)
