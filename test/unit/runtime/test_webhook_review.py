"""AdmissionReview decoding refuses bad input with 400 ReviewErrors, and encoding writes well-formed reviews."""

from __future__ import annotations

import base64
import re
from typing import Any

import orjson
import pytest

from llmaz.runtime.webhook import ReviewError, allowed, decode_review, denied, encode_review, errored, patched
from llmaz.runtime.webhook.review import MAX_BODY_BYTES, MAX_JSON_VALUES, MAX_OBJECT_DEPTH, json_values, nesting_depth


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


def test_the_uid_is_kept_in_errors_about_the_review_itself() -> None:
    with pytest.raises(ReviewError) as caught:
        decode_review(review(REQUEST, api_version="v1"), "application/json")
    assert (caught.value.uid, caught.value.code) == ("u-1", 400)


def nested(depth: int) -> dict[str, Any]:
    """An object `depth` levels deep: {"spec": {"a": {"a": ... {}}}}, built without recursion."""
    inner: dict[str, Any] = {}
    for _ in range(depth - 2):
        inner = {"a": inner}
    return {"spec": inner}


def nested_json(depth: int) -> bytes:
    """`nested(depth)` as JSON text (orjson refuses to encode that deep)."""
    return b'{"spec":' + b'{"a":' * (depth - 2) + b"{}" + b"}" * (depth - 2) + b"}"


def review_with(key: str, obj: bytes) -> bytes:
    """A review of REQUEST whose `key` is the JSON text `obj`."""
    head = review({**REQUEST, key: "@"})
    return head.replace(b'"@"', obj)


def test_nesting_depth_counts_levels_of_objects_and_arrays_without_recursion() -> None:
    values: list[Any] = [1, {}, [], {"a": [1]}, {"a": [{}]}]
    assert [nesting_depth(v) for v in values] == [0, 1, 1, 2, 3]
    assert nesting_depth(nested(50_000)) == 50_000  # far past the recursion limit
    assert nesting_depth(nested(50_000), stop_above=10) == 11


@pytest.mark.parametrize("key", ["object", "oldObject"])
def test_an_object_nested_deeper_than_the_limit_is_a_400_naming_the_limit(key: str) -> None:
    assert nesting_depth(orjson.loads(nested_json(MAX_OBJECT_DEPTH))) == MAX_OBJECT_DEPTH
    decode_review(review_with(key, nested_json(MAX_OBJECT_DEPTH)), "application/json")
    with pytest.raises(ReviewError) as caught:
        decode_review(review_with(key, nested_json(1000)), "application/json")
    assert caught.value.code == 400
    assert caught.value.message == f"couldn't decode AdmissionRequest: {key} is nested more than 100 levels deep"
    assert caught.value.uid == "u-1"


def test_a_review_too_deep_to_decode_at_all_is_a_400_naming_the_limit() -> None:
    deep = b'{"a":' * 5000 + b"1" + b"}" * 5000
    with pytest.raises(ReviewError) as caught:
        decode_review(b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":' + deep + b"}",
                      "application/json")  # fmt: skip
    assert caught.value.code == 400
    assert "objects may nest at most 100 levels" in caught.value.message


def test_json_values_counts_members_and_ignores_separators_inside_strings_over_the_limit() -> None:
    assert json_values(b'{"a":[1,2,3],"b":{}}') == 6  # two objects, an array, three commas
    # Over the limit by the rough count, but the commas are text: strings are looked into until it is not.
    commas = b'{"a":"' + b"," * (MAX_JSON_VALUES + 10) + b'","b":"[{"}'
    assert json_values(commas) <= MAX_JSON_VALUES
    decode_review(review({**REQUEST, "object": {"note": "," * (MAX_JSON_VALUES + 10)}}), "application/json")
    assert json_values(b"[" + b"1," * MAX_JSON_VALUES + b"1]") == MAX_JSON_VALUES + 1


def test_a_review_of_more_values_than_the_limit_is_refused_before_decoding() -> None:
    many = review({**REQUEST, "object": {"metadata": {"name": "m"}, "spec": {"args": ["a"] * MAX_JSON_VALUES}}})
    with pytest.raises(ReviewError) as caught:
        decode_review(many, "application/json")
    assert caught.value.code == 400
    assert re.fullmatch(
        rf"request holds too many JSON values \(\d+\); limit is {MAX_JSON_VALUES}", caught.value.message
    )


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
