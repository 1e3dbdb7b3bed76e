"""What a webhook is: a name, a path, a type, the resources it intercepts, and an async handler.

A handler turns an `AdmissionRequest` into an `AdmissionResponse`. It may raise: the server turns any exception
into a 500-coded denial for that request, so one bad object can never take the server down.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from llmaz.runtime.webhook.response import AdmissionResponse
from llmaz.runtime.webhook.review import AdmissionRequest

Handler = Callable[[AdmissionRequest], Awaitable[AdmissionResponse]]


class WebhookType(enum.Enum):
    MUTATING = "mutating"
    VALIDATING = "validating"


@dataclass(frozen=True, slots=True)
class Rule:
    """Which requests the API server sends: admissionregistration.k8s.io/v1 RuleWithOperations."""

    api_groups: tuple[str, ...]
    api_versions: tuple[str, ...]
    resources: tuple[str, ...]
    operations: tuple[str, ...] = ("CREATE", "UPDATE")


@dataclass(frozen=True, slots=True)
class Webhook:
    name: str
    path: str
    type: WebhookType
    rules: tuple[Rule, ...]
    handler: Handler
    failure_policy: str = "Fail"
    side_effects: str = "None"
