"""Pure builders holding llmaz's behaviour: typed API objects in, apply-ready dicts out; no I/O and no clock.

A Playground reconcile: `playground_model_refs` -> fetch each OpenModel -> `main_first` -> `build_service` and
`build_hpa` (apply both; None means delete an owned HPA) -> `playground_status`. A Service reconcile:
`with_scheduler_name` -> `service_model_refs` -> fetch -> `main_first` -> the active inference flavor (decided
outside the builders, in `llmaz.controllers.flavors`) -> `build_leader_worker_set` for it and `build_lb_service`
(apply both) -> `diagnose_pods` (why its pods are not ready) -> `service_status` and `status.with_flavor`. Before
any of that both reconcilers run the admission rules (`InvalidSpecError`), and before applying, `ownership_conflict`
says whether an existing child may be written (`ChildConflictError`). Every `BuildError` carries the message of
the `Progressing=False`/`AbortProcessing` condition to surface (`abort_status`); a `PodFinding` goes into the
in-progress `Progressing` message (`llmaz.apis.conditions.progressing_finding` reads it back).
"""

from llmaz.controllers.builders.diagnosis import PodFinding, diagnose_pod, diagnose_pods, finding_reason
from llmaz.controllers.builders.errors import (
    AdaptersUnsupportedError,
    ArgRenderError,
    BackendRuntimeNotFoundError,
    BuildError,
    InvalidModelSourceError,
    InvalidSpecError,
    NoModelClaimedError,
    RecommendedConfigNotFoundError,
)
from llmaz.controllers.builders.inferencepool import build_inference_pool
from llmaz.controllers.builders.meta import apply_ready, controller_reference
from llmaz.controllers.builders.models import (
    backend_name,
    effective_config_name,
    main_first,
    playground_model_refs,
    service_model_refs,
    skip_model_loader,
)
from llmaz.controllers.builders.networkpolicy import build_network_policy
from llmaz.controllers.builders.ownership import ChildConflictError, Conflict, kind_label, ownership_conflict
from llmaz.controllers.builders.playground import build_hpa, build_service, service_scheduler_name
from llmaz.controllers.builders.service import build_lb_service, build_leader_worker_set, with_scheduler_name
from llmaz.controllers.builders.status import (
    abort_status,
    playground_status,
    service_status,
    set_condition,
)

__all__ = [
    "AdaptersUnsupportedError",
    "ArgRenderError",
    "BackendRuntimeNotFoundError",
    "BuildError",
    "ChildConflictError",
    "Conflict",
    "InvalidModelSourceError",
    "InvalidSpecError",
    "NoModelClaimedError",
    "PodFinding",
    "RecommendedConfigNotFoundError",
    "abort_status",
    "apply_ready",
    "backend_name",
    "build_hpa",
    "build_inference_pool",
    "build_lb_service",
    "build_leader_worker_set",
    "build_network_policy",
    "build_service",
    "controller_reference",
    "diagnose_pod",
    "diagnose_pods",
    "effective_config_name",
    "finding_reason",
    "kind_label",
    "main_first",
    "ownership_conflict",
    "playground_model_refs",
    "playground_status",
    "service_model_refs",
    "service_scheduler_name",
    "service_status",
    "set_condition",
    "skip_model_loader",
    "with_scheduler_name",
]
