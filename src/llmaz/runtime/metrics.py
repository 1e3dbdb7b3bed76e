"""The one Prometheus registry every runtime metric registers into and the metrics endpoint serves.

Metric names follow client-go and controller-runtime exactly, so existing dashboards work unchanged.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

REGISTRY = CollectorRegistry(auto_describe=True)

# controller-runtime's registry carries the Go runtime and process collectors; these are the same process_*
# families (process_cpu_seconds_total, process_resident_memory_bytes, process_open_fds, ...) and Python's
# runtime counterparts (python_info, python_gc_collections_total, ...). runtime.heap adds the GC pause times.
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)
