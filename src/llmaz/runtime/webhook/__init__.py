"""A generic admission webhook server (AdmissionReview v1 over HTTPS) on aiohttp.

`Webhook` values (name, path, type, rules, async handler) are served by `WebhookServer` and rendered into
Mutating/ValidatingWebhookConfiguration manifests by `configuration`, so the two cannot disagree. Handlers get
an `AdmissionRequest` and return an `AdmissionResponse` built with `allowed`, `denied`, `errored` or
`patched` (which computes the JSON Patch); warnings ride on any response.
"""

from llmaz.runtime.webhook.certwatcher import CertWatcher
from llmaz.runtime.webhook.configuration import ServiceRef, configuration
from llmaz.runtime.webhook.handler import Handler, Rule, Webhook, WebhookType
from llmaz.runtime.webhook.response import AdmissionResponse, allowed, denied, encode_review, errored, patched
from llmaz.runtime.webhook.review import AdmissionRequest, GroupVersionKind, ReviewError, decode_review
from llmaz.runtime.webhook.server import DEFAULT_CERT_DIR, DEFAULT_PORT, WebhookServer

__all__ = [
    "DEFAULT_CERT_DIR",
    "DEFAULT_PORT",
    "AdmissionRequest",
    "AdmissionResponse",
    "CertWatcher",
    "GroupVersionKind",
    "Handler",
    "ReviewError",
    "Rule",
    "ServiceRef",
    "Webhook",
    "WebhookServer",
    "WebhookType",
    "allowed",
    "configuration",
    "decode_review",
    "denied",
    "encode_review",
    "errored",
    "patched",
]
