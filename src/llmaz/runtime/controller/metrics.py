"""Reconcile metrics under controller-runtime's exact names, labels, help texts and buckets.

`controller_runtime_reconcile_panics_total` exists for dashboard compatibility and stays at 0: a Python
reconciler reports failure by raising, so every exception is an error (`reconcile_errors_total`); there is
no separate panic path to count. `controller_runtime_reconcile_timeouts_total` counts reconciles cancelled at the
controller's `reconcile_timeout`; each is also an error (`reconcile_total{result="error"}`, `reconcile_errors_total`),
as in controller-runtime.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from llmaz.runtime.metrics import REGISTRY

RESULTS = ("success", "error", "requeue", "requeue_after")

RECONCILE_TIME_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
    1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60,
)  # fmt: skip

RECONCILE_TOTAL = Counter(
    "controller_runtime_reconcile_total",
    "Total number of reconciliations per controller",
    ["controller", "result"],
    registry=REGISTRY,
)
RECONCILE_ERRORS = Counter(
    "controller_runtime_reconcile_errors_total",
    "Total number of reconciliation errors per controller",
    ["controller"],
    registry=REGISTRY,
)
TERMINAL_RECONCILE_ERRORS = Counter(
    "controller_runtime_terminal_reconcile_errors_total",
    "Total number of terminal reconciliation errors per controller",
    ["controller"],
    registry=REGISTRY,
)
RECONCILE_TIMEOUTS = Counter(
    "controller_runtime_reconcile_timeouts_total",
    "Total number of reconciliation timeouts per controller",
    ["controller"],
    registry=REGISTRY,
)
RECONCILE_PANICS = Counter(
    "controller_runtime_reconcile_panics_total",
    "Total number of reconciliation panics per controller",
    ["controller"],
    registry=REGISTRY,
)
RECONCILE_TIME = Histogram(
    "controller_runtime_reconcile_time_seconds",
    "Length of time per reconciliation per controller",
    ["controller"],
    buckets=RECONCILE_TIME_BUCKETS,
    registry=REGISTRY,
)
MAX_CONCURRENT_RECONCILES = Gauge(
    "controller_runtime_max_concurrent_reconciles",
    "Maximum number of concurrent reconciles per controller",
    ["controller"],
    registry=REGISTRY,
)
ACTIVE_WORKERS = Gauge(
    "controller_runtime_active_workers",
    "Number of currently used workers per controller",
    ["controller"],
    registry=REGISTRY,
)


def init_controller_metrics(controller: str, max_concurrent_reconciles: int) -> None:
    """Create every series at zero so dashboards show the controller before its first reconcile."""
    for result in RESULTS:
        RECONCILE_TOTAL.labels(controller=controller, result=result)
    for counter in (RECONCILE_ERRORS, TERMINAL_RECONCILE_ERRORS, RECONCILE_TIMEOUTS, RECONCILE_PANICS):
        counter.labels(controller=controller)
    RECONCILE_TIME.labels(controller=controller)
    ACTIVE_WORKERS.labels(controller=controller).set(0)
    MAX_CONCURRENT_RECONCILES.labels(controller=controller).set(max_concurrent_reconciles)
