"""What makes an OpenModel or a BackendRuntime unusable, as the Ready condition reports it."""

from __future__ import annotations

from typing import Any

import pytest

from llmaz.controllers.readiness import backend_problem, model_problem


def _model(source: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "OpenModel", "metadata": {"name": "m"}, "spec": {"familyName": "f", "source": source}}


def _backend(*configs: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "BackendRuntime",
        "metadata": {"name": "b"},
        "spec": {"image": "i", "version": "1", "recommendedConfigs": list(configs)},
    }


@pytest.mark.parametrize(
    "source",
    [
        {"modelHub": {"modelID": "a/b"}},
        {"uri": "oss://bucket.endpoint/models/x"},
        {"uri": "s3://bucket/models/x"},
        {"uri": "gcs://bucket/models/x"},
        {"uri": "ollama://qwen2:0.5b"},
        {"uri": "host:///models/x"},
    ],
)
def test_usable_model_sources_have_no_problem(source: dict[str, Any]) -> None:
    assert model_problem(_model(source)) is None


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ({}, "invalid source"),
        ({"uri": "ftp://bucket/x"}, "invalid source"),
        ({"uri": "s3://bucket-without-path"}, "invalid source"),
        ({"uri": "no-protocol"}, "invalid source"),
    ],
)
def test_unusable_model_sources_are_explained(source: dict[str, Any], fragment: str) -> None:
    problem = model_problem(_model(source))
    assert problem is not None
    assert fragment in problem


def test_a_model_that_does_not_match_the_schema_is_explained() -> None:
    assert "does not match its schema" in (model_problem({"metadata": {"name": "m"}, "spec": {}}) or "")


def test_a_backend_with_known_placeholders_has_no_problem() -> None:
    config = {"name": "default", "args": ["--model", "{{ .ModelPath }}", "{{.ModelName}}", "${#x} {% raw"]}
    assert backend_problem(_backend(config)) is None


@pytest.mark.parametrize(
    ("configs", "problem"),
    [
        (
            [{"name": "default"}, {"name": "default"}],
            "duplicated recommended config name default",
        ),
        (
            [{"name": "default", "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "2"}}}],
            "recommended config default: resource limit of cpu is less than resource request",
        ),
        (
            [{"name": "default", "args": ["{{ .Nope }}"]}],
            "recommended config default: missing flag or the flag has format error: {{ .Nope }}",
        ),
    ],
)
def test_broken_backends_are_explained(configs: list[dict[str, Any]], problem: str) -> None:
    assert backend_problem(_backend(*configs)) == problem


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ({"uri": "ollama://qwen2:0.5b"}, "OpenModel m has an invalid source: adapter sql: an ollama:// source"),
        ({"uri": "s3://bucket-without-path"}, "OpenModel m has an invalid source: adapter sql: address not right"),
    ],
)
def test_an_unusable_adapter_source_is_explained_naming_the_adapter(source: dict[str, Any], fragment: str) -> None:
    obj = _model({"modelHub": {"modelID": "a/b"}})
    obj["spec"]["adapters"] = [{"name": "sql", "source": source}]

    assert (model_problem(obj) or "").startswith(fragment)
