"""llmaz's Grafana dashboards, as data: `python -m llmaz_dev.dashboards config/grafana` (run by `make manifests`)
writes one JSON file per dashboard under `config/grafana/dashboards/` and the kustomization that ships them as
ConfigMaps labelled `grafana_dashboard: "1"`, the label the sidecar of Grafana's Helm chart loads dashboards from.

Four dashboards:
- `llmaz-manager`: reconciles, work queues, admission webhooks, leader election, webhook certificate expiry;
- `llmaz-gateway`: requests by model and status, time to first byte, the time per completion token after it,
  held and in-flight requests, routing signals (stale endpoints, engine scrapes, prompt-cache reuse), sleeping
  models and the autoscaler's decisions;
- `llmaz-engines`: the inference engines' own metrics (llama.cpp's `llamacpp:*`, vLLM's `vllm:*`), the series the
  PodMonitor of config/prometheus scrapes (they carry `inference_service` and `model`);
- `llmaz-model`: one model, picked by the `model` variable over the gateway's `model` label.

Each panel's `may_be_empty` says why it may legitimately show no data on a running cluster with traffic (an engine
that is not deployed, an event that did not happen); the tests hold every other panel to returning data.
The files are generated: edit this module and run `make manifests`, never the JSON or the ConfigMaps.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LABEL = "grafana_dashboard"
DASHBOARDS_DIR = "dashboards"
RATE = "$__rate_interval"
# Dashboard variables and what each stands for when a query runs outside Grafana (the tests).
ALL = ".+"


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    queries: tuple[Query, ...]
    unit: str = "short"
    may_be_empty: str = ""
    """Why the panel may have no data on a cluster with traffic; empty: it must have data."""


@dataclass(frozen=True)
class Variable:
    """A query variable over the values of one label; `regex_all`: several values or All (a regex matcher)."""

    name: str
    label: str
    query: str
    regex_all: bool = True


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    panels: tuple[Panel, ...]
    variables: tuple[Variable, ...] = field(default=())

    @property
    def file_name(self) -> str:
        return f"{self.uid}.json"


def _rate(metric: str, selector: str = "") -> str:
    return f"rate({metric}{selector}[{RATE}])"


def _quantile(q: float, metric: str, by: str, selector: str = "") -> str:
    return f"histogram_quantile({q}, sum by ({by}, le) ({_rate(metric + '_bucket', selector)}))"


def _quantiles(metric: str, by: str, selector: str = "", legend: str = "") -> tuple[Query, ...]:
    return tuple(
        Query(_quantile(q, metric, by, selector), f"{legend} p{int(q * 100)}".strip()) for q in (0.5, 0.95, 0.99)
    )


# The manager ------------------------------------------------------------------------------------------------------

_JOB = '{job=~"$job"}'
_FAILED = '{job=~"$job", code!="200"}'
MANAGER = Dashboard(
    uid="llmaz-manager",
    title="llmaz / Manager",
    description="llmaz's manager: controllers, work queues, admission webhooks, leader election, certificates.",
    variables=(Variable("job", "Job", "label_values(controller_runtime_webhook_latency_seconds_count, job)"),),
    panels=(
        Panel(
            "Reconciles",
            "Reconciles per second, by controller and result (success, error, requeue, requeue_after).",
            (
                Query(
                    f"sum by (controller, result) ({_rate('controller_runtime_reconcile_total', _JOB)})",
                    "{{controller}} {{result}}",
                ),
            ),
            unit="ops",
        ),
        Panel(
            "Reconcile errors",
            "Reconciles that raised, per second, by controller.",
            (
                Query(
                    f"sum by (controller) ({_rate('controller_runtime_reconcile_errors_total', _JOB)})",
                    "{{controller}}",
                ),
            ),
            unit="ops",
        ),
        Panel(
            "Reconcile time",
            "How long one reconcile takes, by controller (95th percentile).",
            (
                Query(
                    _quantile(0.95, "controller_runtime_reconcile_time_seconds", "controller", _JOB),
                    "{{controller}} p95",
                ),
            ),
            unit="s",
        ),
        Panel(
            "Work queue depth",
            "Items waiting in each controller's work queue.",
            (Query(f"sum by (name) (workqueue_depth{_JOB})", "{{name}}"),),
        ),
        Panel(
            "Work queue latency",
            "How long an item waits in the queue before a worker takes it (95th percentile), by queue.",
            (Query(_quantile(0.95, "workqueue_queue_duration_seconds", "name", _JOB), "{{name}} p95"),),
            unit="s",
        ),
        Panel(
            "Work queue retries",
            "Items put back with rate limiting, per second, by queue.",
            (Query(f"sum by (name) ({_rate('workqueue_retries_total', _JOB)})", "{{name}}"),),
            unit="ops",
            may_be_empty="a queue has a series only once one of its items was retried",
        ),
        Panel(
            "Admission requests",
            "Admission reviews answered per second, by webhook path and HTTP status.",
            (
                Query(
                    f"sum by (webhook, code) ({_rate('controller_runtime_webhook_requests_total', _JOB)})",
                    "{{webhook}} {{code}}",
                ),
            ),
            unit="reqps",
        ),
        Panel(
            "Admission failures",
            "Admission reviews answered with an HTTP status other than 200 (the webhook failed to judge the "
            "request), per second, by webhook path. A denial is an answer of 200 with `allowed: false`: the "
            "requests panel counts it.",
            (
                Query(
                    f"sum by (webhook, code) ({_rate('controller_runtime_webhook_requests_total', _FAILED)})",
                    "{{webhook}} {{code}}",
                ),
            ),
            unit="reqps",
            may_be_empty="no admission review failed",
        ),
        Panel(
            "Admission latency",
            "Time to answer an admission review, by webhook path (95th percentile).",
            (Query(_quantile(0.95, "controller_runtime_webhook_latency_seconds", "webhook", _JOB), "{{webhook}} p95"),),
            unit="s",
        ),
        Panel(
            "Leader",
            "1 for the replica holding the lease, 0 for the others.",
            (Query(f"max by (name, instance) (leader_election_master_status{_JOB})", "{{instance}} {{name}}"),),
        ),
        Panel(
            "Webhook certificate expiry",
            "Time left before the self-managed webhook certificates expire (each is renewed 90 days before).",
            (
                Query(
                    f"min by (certificate) (llmaz_webhook_certificate_expiration_timestamp_seconds{_JOB}) - time()",
                    "{{certificate}}",
                ),
            ),
            unit="s",
            may_be_empty="the manager's certificates are managed by cert-manager, not by the manager",
        ),
    ),
)

# The gateway ------------------------------------------------------------------------------------------------------

_ANY_MODEL = '{model=~"$model"}'


def _per_model(metric: str, selector: str) -> str:
    return f"sum by (model) ({_rate(metric, selector)})"


def _gateway_panels(selector: str) -> tuple[Panel, ...]:
    """The request panels the gateway's and the model's dashboards share."""
    errors = selector[:-1] + ', code=~"5.."}'
    return (
        Panel(
            "Requests",
            "Requests answered per second, by model and HTTP status (499: the client went away first).",
            (Query(f"sum by (model, code) ({_rate('llmaz_gateway_requests_total', selector)})", "{{model}} {{code}}"),),
            unit="reqps",
        ),
        Panel(
            "Server errors",
            "Share of the requests answered with a 5xx status, by model.",
            (
                Query(
                    f"{_per_model('llmaz_gateway_requests_total', errors)} / "
                    f"{_per_model('llmaz_gateway_requests_total', selector)}",
                    "{{model}}",
                ),
            ),
            unit="percentunit",
            may_be_empty="no request was answered with a 5xx status",
        ),
        Panel(
            "Time to first byte",
            "From a request's arrival to the first byte of the engine's answer relayed: for a stream, about the "
            "time to the first token.",
            _quantiles("llmaz_gateway_time_to_first_byte_seconds", "model", selector, "{{model}}"),
            unit="s",
        ),
        Panel(
            "Time per completion token",
            "The time after the first byte divided by the completion tokens: about the inter-token latency of "
            "streams (the gateway's own timings, for answers whose usage names their tokens).",
            (
                Query(
                    f"(sum by (model) ({_rate('llmaz_gateway_request_duration_seconds_sum', selector)})"
                    f" - sum by (model) ({_rate('llmaz_gateway_time_to_first_byte_seconds_sum', selector)}))"
                    f" / {_per_model('llmaz_gateway_completion_tokens_total', selector)}",
                    "{{model}}",
                ),
            ),
            unit="s",
        ),
        Panel(
            "Request duration",
            "From a request's arrival to the end of its answer.",
            _quantiles("llmaz_gateway_request_duration_seconds", "model", selector, "{{model}}"),
            unit="s",
        ),
        Panel(
            "In flight",
            "Requests being handled, by model.",
            (Query(f"sum by (model) (llmaz_gateway_requests_in_flight{selector})", "{{model}}"),),
        ),
        Panel(
            "Held",
            "Requests waiting for a ready endpoint of their model (a replica starting or waking from zero, or one "
            "with the adapter they name), by model.",
            (Query(f"sum by (model) (llmaz_gateway_requests_held{selector})", "{{model}}"),),
            may_be_empty="a model has a series only once one of its requests waited for an endpoint",
        ),
        Panel(
            "Tokens",
            "Prompt and completion tokens per second, as the answers' usage reports them.",
            (
                Query(_per_model("llmaz_gateway_prompt_tokens_total", selector), "{{model}} prompt"),
                Query(_per_model("llmaz_gateway_completion_tokens_total", selector), "{{model}} completion"),
            ),
        ),
        Panel(
            "Endpoints and replicas",
            "Ready endpoints requests can go to now, and the replicas the model's Playgrounds ask for (0 while it "
            "sleeps).",
            (
                Query(f"sum by (model) (llmaz_gateway_model_ready_endpoints{selector})", "{{model}} ready"),
                Query(f"sum by (model) (llmaz_gateway_model_desired_replicas{selector})", "{{model}} desired"),
            ),
        ),
        Panel(
            "Upstream retries",
            "Requests sent to another endpoint per second, by model and why the previous one failed.",
            (
                Query(
                    f"sum by (model, reason) ({_rate('llmaz_gateway_upstream_retries_total', selector)})",
                    "{{model}} {{reason}}",
                ),
            ),
            unit="reqps",
            may_be_empty="no endpoint failed a request",
        ),
    )


def _cache_ratio(selector: str) -> str:
    """The share of prompt tokens the engines took from their KV cache (llama.cpp: reused / all; vLLM: hits /
    lookups), by model."""
    cached = _per_model("llamacpp:prompt_tokens_cached_total", selector)
    prefilled = _per_model("llamacpp:prompt_tokens_total", selector)
    vllm = (f"{_per_model('vllm:prefix_cache_hits_total', selector)}"
            f" / {_per_model('vllm:prefix_cache_queries_total', selector)}")  # fmt: skip
    return f"({cached} / ({cached} + {prefilled})) or ({vllm})"


_ENGINE = '{inference_service!="", model=~"$model"}'
GATEWAY = Dashboard(
    uid="llmaz-gateway",
    title="llmaz / Gateway",
    description="llmaz-gateway: requests, latency, held requests, routing signals, sleeping models, autoscaling.",
    variables=(Variable("model", "Model", "label_values(llmaz_gateway_requests_total, model)"),),
    panels=(
        *_gateway_panels(_ANY_MODEL),
        Panel(
            "Prompt cache reuse",
            "Share of prompt tokens the engines reused from their KV cache (prefix-aware routing raises it).",
            (Query(_cache_ratio(_ENGINE), "{{model}}"),),
            unit="percentunit",
        ),
        Panel(
            "Stale endpoints",
            "Routed endpoints whose engine load is not known now (failed or old metrics reads, or an engine "
            "without metrics): routing uses the gateway's own counts for them.",
            (Query("sum(llmaz_gateway_stale_endpoints)", "stale"),),
        ),
        Panel(
            "Engine metrics reads failed",
            "The gateway's reads of the engines' metrics that failed, per second, by kind.",
            (Query(f"sum by (kind) ({_rate('llmaz_gateway_engine_scrape_failures_total')})", "{{kind}}"),),
            unit="ops",
        ),
        Panel(
            "Engine metrics age",
            "Seconds since each engine's metrics were last read (about the read interval while reads succeed).",
            (Query("max by (engine, endpoint) (llmaz_gateway_engine_metrics_age_seconds)", "{{engine}} {{endpoint}}"),),
            unit="s",
        ),
        Panel(
            "Asleep models",
            "Models scaled to zero: their next request wakes them and is held until an endpoint is ready.",
            (Query(f"sum by (model) (llmaz_gateway_model_desired_replicas{_ANY_MODEL}) == 0", "{{model}}"),),
            may_be_empty="no model is asleep",
        ),
        Panel(
            "Autoscaler: replicas",
            "Replicas the autoscaler decided, those the Playground had, and its maximum, by Playground.",
            (
                Query("max by (playground) (llmaz_gateway_autoscaler_desired_replicas)", "{{playground}} desired"),
                Query("max by (playground) (llmaz_gateway_autoscaler_current_replicas)", "{{playground}} current"),
                Query("max by (playground) (llmaz_gateway_autoscaler_max_replicas)", "{{playground}} max"),
            ),
            may_be_empty="no Playground has a scale trigger",
        ),
        Panel(
            "Autoscaler: load",
            "Requests (running plus waiting) the deciding window saw, against the target per replica times the "
            "replicas.",
            (
                Query("max by (playground) (llmaz_gateway_autoscaler_load)", "{{playground}} load"),
                Query(
                    "max by (playground) (llmaz_gateway_autoscaler_target_per_replica"
                    " * llmaz_gateway_autoscaler_current_replicas)",
                    "{{playground}} target",
                ),
            ),
            may_be_empty="no Playground has a scale trigger",
        ),
        Panel(
            "Autoscaler: deciding window",
            "Which window decided (stable, panic, no-signal, asleep), and whether the load signal is missing.",
            (
                Query(
                    "max by (playground, window) (llmaz_gateway_autoscaler_window) == 1", "{{playground}} {{window}}"
                ),
                Query(
                    "max by (playground) (llmaz_gateway_autoscaler_signal_missing) == 1",
                    "{{playground}} signal missing",
                ),
            ),
            may_be_empty="no Playground has a scale trigger",
        ),
    ),
)

# The engines ------------------------------------------------------------------------------------------------------

_NO_VLLM = "no model is served by vLLM"
ENGINES = Dashboard(
    uid="llmaz-engines",
    title="llmaz / Engines",
    description="The inference engines' own metrics, as the PodMonitor of config/prometheus scrapes them.",
    variables=(Variable("model", "Model", 'label_values(up{inference_service!=""}, model)'),),
    panels=(
        Panel(
            "Engine targets up",
            "Engine pods scraped successfully, by model (Ollama serves no metrics: its pods show as down).",
            (Query(f"sum by (model) (up{_ENGINE})", "{{model}}"),),
        ),
        Panel(
            "llama.cpp: requests",
            "Requests being processed and deferred (queued), by model.",
            (
                Query(f"sum by (model) (llamacpp:requests_processing{_ENGINE})", "{{model}} processing"),
                Query(f"sum by (model) (llamacpp:requests_deferred{_ENGINE})", "{{model}} deferred"),
            ),
        ),
        Panel(
            "llama.cpp: tokens",
            "Prompt tokens prefilled, prompt tokens reused from the cache and tokens predicted, per second.",
            (
                Query(_per_model("llamacpp:prompt_tokens_total", _ENGINE), "{{model}} prefilled"),
                Query(_per_model("llamacpp:prompt_tokens_cached_total", _ENGINE), "{{model}} cached"),
                Query(_per_model("llamacpp:tokens_predicted_total", _ENGINE), "{{model}} predicted"),
            ),
        ),
        Panel(
            "llama.cpp: speed",
            "Prompt processing and generation speed the engine measured, tokens per second.",
            (
                Query(f"avg by (model) (llamacpp:prompt_tokens_seconds{_ENGINE})", "{{model}} prompt"),
                Query(f"avg by (model) (llamacpp:predicted_tokens_seconds{_ENGINE})", "{{model}} predicted"),
            ),
        ),
        Panel(
            "llama.cpp: decode calls",
            "Batches decoded per second, and the busy slots per decode.",
            (
                Query(_per_model("llamacpp:n_decode_total", _ENGINE), "{{model}} decodes"),
                Query(f"avg by (model) (llamacpp:n_busy_slots_per_decode{_ENGINE})", "{{model}} busy slots"),
            ),
        ),
        Panel(
            "vLLM: requests",
            "Requests running and waiting, by model.",
            (
                Query(f"sum by (model) (vllm:num_requests_running{_ENGINE})", "{{model}} running"),
                Query(f"sum by (model) (vllm:num_requests_waiting{_ENGINE})", "{{model}} waiting"),
            ),
            may_be_empty=_NO_VLLM,
        ),
        Panel(
            "vLLM: KV cache usage",
            "Share of the KV cache in use, by model.",
            (Query(f"max by (model) (vllm:kv_cache_usage_perc{_ENGINE})", "{{model}}"),),
            unit="percentunit",
            may_be_empty=_NO_VLLM,
        ),
        Panel(
            "vLLM: tokens",
            "Prompt and generated tokens per second.",
            (
                Query(_per_model("vllm:prompt_tokens_total", _ENGINE), "{{model}} prompt"),
                Query(_per_model("vllm:generation_tokens_total", _ENGINE), "{{model}} generated"),
            ),
            may_be_empty=_NO_VLLM,
        ),
        Panel(
            "vLLM: time to first token",
            "The engine's time to first token.",
            _quantiles("vllm:time_to_first_token_seconds", "model", _ENGINE, "{{model}}"),
            unit="s",
            may_be_empty=_NO_VLLM,
        ),
        Panel(
            "vLLM: inter-token latency",
            "Time between two output tokens (`vllm:inter_token_latency_seconds`, earlier releases "
            "`vllm:time_per_output_token_seconds`).",
            (
                Query(
                    "histogram_quantile(0.95, sum by (model, le) ("
                    f"{_rate('vllm:inter_token_latency_seconds_bucket', _ENGINE)}"
                    f" or {_rate('vllm:time_per_output_token_seconds_bucket', _ENGINE)}))",
                    "{{model}} p95",
                ),
            ),
            unit="s",
            may_be_empty=_NO_VLLM,
        ),
    ),
)

# One model --------------------------------------------------------------------------------------------------------

_MODEL = '{model="$model"}'
_MODEL_ENGINE = '{inference_service!="", model="$model"}'
MODEL = Dashboard(
    uid="llmaz-model",
    title="llmaz / Model",
    description="One model: its requests through llmaz-gateway, their latency, its endpoints and replicas.",
    variables=(Variable("model", "Model", "label_values(llmaz_gateway_requests_total, model)", regex_all=False),),
    panels=(
        *_gateway_panels(_MODEL),
        Panel(
            "Engine requests",
            "Requests the model's engines are running and queueing (llama.cpp or vLLM).",
            (
                Query(
                    f"sum(llamacpp:requests_processing{_MODEL_ENGINE})"
                    f" or sum(vllm:num_requests_running{_MODEL_ENGINE})",
                    "running",
                ),
                Query(
                    f"sum(llamacpp:requests_deferred{_MODEL_ENGINE}) or sum(vllm:num_requests_waiting{_MODEL_ENGINE})",
                    "queued",
                ),
            ),
        ),
        Panel(
            "Engine pods up",
            "The model's engine pods scraped successfully, by inference Service.",
            (Query(f"sum by (inference_service) (up{_MODEL_ENGINE})", "{{inference_service}}"),),
        ),
    ),
)

DASHBOARDS = (MANAGER, GATEWAY, ENGINES, MODEL)


# Rendering --------------------------------------------------------------------------------------------------------

_WIDTH, _HEIGHT = 12, 8


def dashboard_json(dashboard: Dashboard) -> dict[str, Any]:
    datasource = {"type": "prometheus", "uid": "${datasource}"}
    panels = []
    for index, panel in enumerate(dashboard.panels):
        panels.append({
            "id": index + 1,
            "type": "timeseries",
            "title": panel.title,
            "description": panel.description,
            "datasource": datasource,
            "gridPos": {"h": _HEIGHT, "w": _WIDTH, "x": (index % 2) * _WIDTH, "y": (index // 2) * _HEIGHT},
            "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
            "targets": [
                {"refId": chr(ord("A") + i), "datasource": datasource, "expr": q.expr, "legendFormat": q.legend}
                for i, q in enumerate(panel.queries)
            ],
        })  # fmt: skip
    variables: list[dict[str, Any]] = [
        {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus"}
    ]
    for variable in dashboard.variables:
        variables.append({
            "name": variable.name,
            "label": variable.label,
            "type": "query",
            "datasource": datasource,
            "query": {"query": variable.query, "refId": "Variable"},
            "definition": variable.query,
            "refresh": 2,
            "sort": 1,
            "multi": variable.regex_all,
            "includeAll": variable.regex_all,
            **({"allValue": ALL, "current": {"text": "All", "value": "$__all"}} if variable.regex_all else {}),
        })  # fmt: skip
    return {
        "uid": dashboard.uid,
        "title": dashboard.title,
        "description": dashboard.description,
        "tags": ["llmaz"],
        "editable": True,
        "schemaVersion": 39,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        "templating": {"list": variables},
        "panels": panels,
    }


def config_map_name(dashboard: Dashboard) -> str:
    return f"llmaz-dashboard-{dashboard.uid.removeprefix('llmaz-')}"


def kustomization() -> str:
    """One ConfigMap per dashboard (the sidecar loads each key of a labelled ConfigMap as one dashboard), with
    stable names."""
    generators = "".join(
        f"  - name: {config_map_name(d)}\n    files:\n      - {DASHBOARDS_DIR}/{d.file_name}\n" for d in DASHBOARDS
    )
    return (
        "# Generated by `make manifests` (python -m llmaz_dev.dashboards config/grafana) from\n"
        "# src/llmaz_dev/dashboards.py: do not edit, copy under another name to customise (docs/operations.md,\n"
        "# Dashboards). llmaz's Grafana dashboards as ConfigMaps with the label the dashboard sidecar of Grafana's\n"
        "# Helm chart loads:\n"
        "#   kubectl apply --server-side -k config/grafana\n"
        "apiVersion: kustomize.config.k8s.io/v1beta1\n"
        "kind: Kustomization\n"
        "namespace: llmaz-system\n"
        "generatorOptions:\n"
        "  disableNameSuffixHash: true\n"
        "  labels:\n"
        f'    {LABEL}: "1"\n'
        "    app.kubernetes.io/name: llmaz\n"
        "    app.kubernetes.io/component: dashboards\n"
        f"configMapGenerator:\n{generators}"
    )


def generated() -> dict[str, str]:
    """Path under the output directory -> text."""
    files = {
        f"{DASHBOARDS_DIR}/{d.file_name}": json.dumps(dashboard_json(d), indent=2, sort_keys=True) + "\n"
        for d in DASHBOARDS
    }
    files["kustomization.yaml"] = kustomization()
    return files


def write(directory: Path) -> list[str]:
    """Write the files; remove dashboards no longer generated. Returns the paths written."""
    files = generated()
    for old in (directory / DASHBOARDS_DIR).glob("*.json"):
        if f"{DASHBOARDS_DIR}/{old.name}" not in files:
            old.unlink()
    for name, text in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return sorted(files)


_VARIABLE = re.compile(r"\$(__rate_interval|[A-Za-z_]\w*)")


def substituted(expr: str, values: Mapping[str, str]) -> str:
    """`expr` with the dashboard variables replaced by `values` (and `$__rate_interval` by `values` or 1m), as a query
    to run outside Grafana; a variable without a value is a KeyError naming it."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "__rate_interval":
            return values.get(name, "1m")
        if name not in values:
            raise KeyError(f"no value for the dashboard variable ${name} in {expr}")
        return values[name]

    return _VARIABLE.sub(value, expr)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path, help="where to write, config/grafana")
    args = parser.parse_args(argv)
    for name in write(args.directory):
        print(args.directory / name)


if __name__ == "__main__":
    main()
