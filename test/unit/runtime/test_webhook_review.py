"""AdmissionReview decoding refuses bad input with 400 ReviewErrors, and encoding writes well-formed reviews."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest

from llmaz.runtime.webhook import ReviewError, allowed, decode_review, denied, encode_review, errored, patched
from llmaz.runtime.webhook.review import MAX_BODY_BYTES


def review(request: Any, api_version: str = "admission.k8s.io/v1") -> bytes:
    return orjson.dumps({"apiVersion": api_version, "kind": "AdmissionReview", "request": request})


REQUEST = {
    "uid": "u-1",
    "kind": {"group": "llmaz.io", "version": "v1alpha1", "kind": "OpenModel"},
    "resource": {"group": "llmaz.io", "version": "v1alpha1", "resource": "openmodels"},
    "name": "m",
    "operation": "CREATE",
    "userInfo": {"username": "admin"},
    "object": {"metadata": {"name": "m"}},
    "oldObject": None,
    "dryRun": False,
}


def test_a_v1_review_decodes_into_its_request() -> None:
    req = decode_review(review(REQUEST), "application/json")
    assert (req.uid, req.kind.kind, req.operation, req.name) == ("u-1", "OpenModel", "CREATE", "m")
    assert req.object == {"metadata": {"name": "m"}}
    assert req.old_object is None
    assert req.api_version == "admission.k8s.io/v1"


def test_a_v1beta1_review_is_read_and_answered_in_v1beta1() -> None:
    req = decode_review(review(REQUEST, "admission.k8s.io/v1beta1"), "application/json")
    assert req.api_version == "admission.k8s.io/v1beta1"


@pytest.mark.parametrize(
    ("body", "content_type", "message"),
    [
        (b"", "application/json", "request body is empty"),
        (b"{}", "text/plain", "contentType=text/plain, expected application/json"),
        (b"{not json", "application/json", "couldn't decode AdmissionReview"),
        (b"[1]", "application/json", "not a JSON object"),
        (orjson.dumps({"kind": "Pod", "apiVersion": "v1"}), "application/json", "unsupported kind 'Pod'"),
        (review(None), "application/json", "got an empty AdmissionRequest"),
        (review({"kind": {}}), "application/json", "AdmissionRequest has no uid"),
        (review({**REQUEST, "object": [1]}), "application/json", "object is not an object"),
        (review({**REQUEST, "kind": "x"}), "application/json", "kind is not an object"),
        (review({**REQUEST, "name": 3}), "application/json", "name is not a string"),
    ],
)
def test_bad_input_is_a_400_review_error(body: bytes, content_type: str, message: str) -> None:
    with pytest.raises(ReviewError) as caught:
        decode_review(body, content_type)
    assert caught.value.code == 400
    assert message in caught.value.message


def test_a_decoding_error_after_the_uid_keeps_the_uid() -> None:
    with pytest.raises(ReviewError) as caught:
        decode_review(review({**REQUEST, "object": "x"}), "application/json")
    assert caught.value.uid == "u-1"


def test_a_body_over_seven_mebibytes_is_refused() -> None:
    with pytest.raises(ReviewError, match="too large"):
        decode_review(b" " * (MAX_BODY_BYTES + 1), "application/json")


def response_of(data: bytes) -> dict[str, Any]:
    doc = orjson.loads(data)
    assert doc["apiVersion"] == "admission.k8s.io/v1"
    assert doc["kind"] == "AdmissionReview"
    result: dict[str, Any] = doc["response"]
    return result


def test_an_allowed_response_carries_uid_and_nothing_else() -> None:
    assert response_of(encode_review(allowed(), "u")) == {"uid": "u", "allowed": True}


def test_a_denial_is_a_403_forbidden_status_with_the_message() -> None:
    assert response_of(encode_review(denied("spec: Forbidden: x"), "u")) == {
        "uid": "u",
        "allowed": False,
        "status": {
            "metadata": {},
            "code": 403,
            "status": "Failure",
            "reason": "Forbidden",
            "message": "spec: Forbidden: x",
        },
    }


def test_an_error_carries_its_code() -> None:
    status = response_of(encode_review(errored(400, "bad"), "u"))["status"]
    assert (status["code"], status["message"]) == (400, "bad")


def test_a_patch_is_base64_json_patch_and_warnings_are_listed() -> None:
    response = patched({"a": 1}, {"a": 2}).with_warnings(["careful"])
    body = response_of(encode_review(response, "u"))
    assert body["patchType"] == "JSONPatch"
    assert orjson.loads(base64.b64decode(body["patch"])) == [{"op": "replace", "path": "/a", "value": 2}]
    assert body["warnings"] == ["careful"]


def test_an_unchanged_object_gives_no_patch() -> None:
    assert "patch" not in response_of(encode_review(patched({"a": 1}, {"a": 1}), "u"))
