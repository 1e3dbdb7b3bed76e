"""AdmissionResponse values and their AdmissionReview encoding.

Invariants: every response carries the request's uid and is sent with HTTP 200, denials and errors included
(the API server reads the verdict from the body). A denial's `message` is what the API server shows after
`admission webhook "<name>" denied the request: `. Warnings are sent as given (keep them under 120 chars).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from llmaz.runtime.webhook.jsonpatch import Operation, diff
from llmaz.runtime.webhook.review import V1


@dataclass(frozen=True, slots=True)
class AdmissionResponse:
    allowed: bool
    code: int = 200
    reason: str = ""
    message: str = ""
    patch: list[Operation] = field(default_factory=list)
    warnings: tuple[str, ...] = ()

    def with_warnings(self, warnings: list[str] | tuple[str, ...]) -> AdmissionResponse:
        return replace(self, warnings=(*self.warnings, *warnings))


def allowed(message: str = "") -> AdmissionResponse:
    return AdmissionResponse(allowed=True, message=message)


def denied(message: str) -> AdmissionResponse:
    """A policy denial (403 Forbidden), as a validator returns it."""
    return AdmissionResponse(allowed=False, code=403, reason="Forbidden", message=message)


def errored(code: int, message: str) -> AdmissionResponse:
    """The request could not be judged (bad input: 400; our own failure: 500); the object is not admitted."""
    return AdmissionResponse(allowed=False, code=code, message=message)


def patched(original: dict[str, Any], mutated: dict[str, Any]) -> AdmissionResponse:
    """Allowed with the JSON Patch that turns `original` into `mutated` (no patch if they are equal)."""
    return AdmissionResponse(allowed=True, patch=diff(original, mutated))


def encode_review(response: AdmissionResponse, uid: str, api_version: str = V1) -> bytes:
    body: dict[str, Any] = {"uid": uid, "allowed": response.allowed}
    if not response.allowed or response.message:
        status: dict[str, Any] = {"metadata": {}, "code": response.code}
        if not response.allowed:
            status["status"] = "Failure"
        if response.reason:
            status["reason"] = response.reason
        if response.message:
            status["message"] = response.message
        body["status"] = status
    if response.patch:
        body["patchType"] = "JSONPatch"
        body["patch"] = base64.b64encode(orjson.dumps(response.patch)).decode()
    if response.warnings:
        body["warnings"] = list(response.warnings)
    return orjson.dumps({"apiVersion": api_version, "kind": "AdmissionReview", "response": body})
