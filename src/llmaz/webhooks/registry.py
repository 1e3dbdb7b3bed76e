"""The eight llmaz admission webhooks: names, paths, kinds, and the handlers built from the per-kind rules.

This registry is the single source for both the server routes and `config/webhook/manifests.yaml`
(`python -m llmaz_dev.webhookgen`). Names and paths are llmaz's exactly.

Handlers:
- mutating: apply the kind's defaulter to the raw object and answer with the JSON Patch (never deny);
- validating: decode the object, deny with the aggregate of every field error (403), else allow; warnings about
  missing references (and other surprises) are attached either way. DELETE is always allowed. The field errors
  are the kind's validation rules (shared with its reconciler) and, for some kinds, rules that only admission
  applies, on the raw object and the stored one (`validate_raw`).
- a request for another kind, or an object that does not decode, is answered with a 400-coded denial.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from pydantic import ValidationError

from llmaz.apis import BackendRuntime, OpenModel, Playground, Service
from llmaz.apis import constants as c
from llmaz.apis.base import ApiModel
from llmaz.apis.validation import FieldError, aggregate, validate_playground, validate_service
from llmaz.runtime.webhook import (
    AdmissionRequest,
    AdmissionResponse,
    Handler,
    Rule,
    Webhook,
    WebhookType,
    allowed,
    denied,
    errored,
    patched,
)
from llmaz.webhooks.backendruntime import validate_backendruntime
from llmaz.webhooks.lookup import ReferenceLookup
from llmaz.webhooks.openmodel import (
    default_openmodel,
    openmodel_warnings,
    validate_openmodel,
    validate_openmodel_annotations,
)
from llmaz.webhooks.playground import default_playground, playground_warnings, validate_playground_annotations
from llmaz.webhooks.service import service_warnings, validate_service_annotations

MUTATING_CONFIGURATION: Final = "llmaz-mutating-webhook-configuration"
VALIDATING_CONFIGURATION: Final = "llmaz-validating-webhook-configuration"
WEBHOOK_SERVICE: Final = "llmaz-webhook-service"

Now = Callable[[], datetime]
# (object, the stored object on UPDATE else None, now) -> the defaulted copy
Defaulter = Callable[[dict[str, Any], dict[str, Any] | None, datetime], dict[str, Any]]
Validator = Callable[[Any, bool], list[FieldError]]
Warner = Callable[[Any, ReferenceLookup | None], list[str]]
# (raw object, the stored raw object on UPDATE else None) -> field errors
RawValidator = Callable[[dict[str, Any], dict[str, Any] | None], list[FieldError]]


@dataclass(frozen=True, slots=True)
class KindRules:
    kind: str
    group: str
    plural: str
    model: type[ApiModel]
    default: Defaulter | None
    validate: Validator
    warn: Warner
    validate_raw: RawValidator | None = None

    @property
    def path_stem(self) -> str:
        return f"{self.group.replace('.', '-')}-{c.VERSION}-{self.kind.lower()}"


def _no_warnings(_: Any, __: ReferenceLookup | None) -> list[str]:
    return []


KINDS: Final = (
    KindRules("BackendRuntime", c.INFERENCE_GROUP, "backendruntimes", BackendRuntime, None,
              lambda obj, _: validate_backendruntime(obj), _no_warnings),
    KindRules("OpenModel", c.CORE_GROUP, "openmodels", OpenModel,
              lambda obj, old, now: default_openmodel(obj, now, old),
              validate_openmodel, lambda obj, _: openmodel_warnings(obj), validate_openmodel_annotations),
    KindRules("Playground", c.INFERENCE_GROUP, "playgrounds", Playground,
              lambda obj, _, __: default_playground(obj), validate_playground, playground_warnings,
              validate_playground_annotations),
    KindRules("Service", c.INFERENCE_GROUP, "services", Service, None, validate_service, service_warnings,
              validate_service_annotations),
)  # fmt: skip


def webhooks(lookup: ReferenceLookup | None = None, now: Now = lambda: datetime.now(UTC)) -> list[Webhook]:
    """The eight webhooks; `lookup` (optional) enables reference warnings, `now` stamps createdAt."""
    out = []
    for rules in KINDS:
        rule = Rule((rules.group,), (c.VERSION,), (rules.plural,))
        out.append(Webhook(f"m{rules.kind.lower()}.kb.io", f"/mutate-{rules.path_stem}", WebhookType.MUTATING,
                           (rule,), _mutating(rules, now)))  # fmt: skip
        out.append(Webhook(f"v{rules.kind.lower()}.kb.io", f"/validate-{rules.path_stem}", WebhookType.VALIDATING,
                           (rule,), _validating(rules, lookup)))  # fmt: skip
    return sorted(out, key=lambda w: (w.type.value, w.name))


def _kind_error(rules: KindRules, request: AdmissionRequest) -> AdmissionResponse | None:
    k = request.kind
    if (k.group, k.version, k.kind) != (rules.group, c.VERSION, rules.kind):
        return errored(400, f"unexpected kind {k.group}/{k.version}, Kind={k.kind}; expected {rules.kind}")
    if request.object is None and request.operation != "DELETE":
        return errored(400, f"there is no content to decode in the {rules.kind} request")
    return None


def _mutating(rules: KindRules, now: Now) -> Handler:
    async def handle(request: AdmissionRequest) -> AdmissionResponse:
        error = _kind_error(rules, request)
        if error is not None:
            return error
        if rules.default is None or request.object is None or request.operation == "DELETE":
            return allowed()
        old = request.old_object if request.operation == "UPDATE" else None
        return patched(request.object, rules.default(request.object, old, now()))

    return handle


def _validating(rules: KindRules, lookup: ReferenceLookup | None) -> Handler:
    async def handle(request: AdmissionRequest) -> AdmissionResponse:
        error = _kind_error(rules, request)
        if error is not None:
            return error
        if request.operation not in ("CREATE", "UPDATE") or request.object is None:
            return allowed()
        try:
            obj = rules.model.from_dict(request.object)
        except ValidationError as exc:
            return errored(400, f"couldn't decode {rules.kind}: {_summary(exc)}")
        errors = rules.validate(obj, request.operation == "CREATE")
        if rules.validate_raw is not None:
            old = request.old_object if request.operation == "UPDATE" else None
            errors += rules.validate_raw(request.object, old)
        response = denied(aggregate(errors)) if errors else allowed()
        return response.with_warnings(rules.warn(obj, lookup))

    return handle


def _summary(exc: ValidationError, limit: int = 5) -> str:
    issues = [f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in exc.errors()[:limit]]
    more = exc.error_count() - len(issues)
    return "; ".join(issues) + (f" (and {more} more)" if more > 0 else "")
