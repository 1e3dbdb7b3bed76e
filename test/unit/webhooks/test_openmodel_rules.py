"""OpenModel: defaulting of the family label and createdAt, and every validation rule with its exact text."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from llmaz.apis import OpenModel
from llmaz.apis.validation.field import aggregate, go_quote
from llmaz.apis.validation.names import LABEL_FORMAT_MESSAGE, LABEL_VALUE_FORMAT_MESSAGE
from llmaz.webhooks.openmodel import HUB_AND_URI_WARNING, default_openmodel, openmodel_warnings, validate_openmodel

NOW = datetime(2025, 3, 4, 5, 6, 7, 891234, tzinfo=UTC)


def model(source: dict[str, Any], name: str = "qwen2-0-5b", **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "llmaz.io/v1alpha1",
        "kind": "OpenModel",
        "metadata": {"name": name, **meta},
        "spec": {"familyName": "qwen2", "source": source},
    }


def errors(obj: dict[str, Any], creating: bool = True) -> list[str]:
    return [str(e) for e in validate_openmodel(OpenModel.from_dict(obj), creating)]


HUB = {"modelHub": {"modelID": "Qwen/Qwen2-0.5B-Instruct"}}


class TestDefaulting:
    def test_the_family_label_is_added_when_there_are_no_labels(self) -> None:
        out = default_openmodel(model(HUB), NOW)
        assert out["metadata"]["labels"] == {"llmaz.io/model-family-name": "qwen2"}

    def test_the_family_label_overwrites_a_user_value_and_keeps_other_labels(self) -> None:
        out = default_openmodel(model(HUB, labels={"llmaz.io/model-family-name": "x", "team": "a"}), NOW)
        assert out["metadata"]["labels"] == {"llmaz.io/model-family-name": "qwen2", "team": "a"}

    def test_created_at_is_now_in_utc_truncated_to_seconds(self) -> None:
        assert default_openmodel(model(HUB), NOW)["spec"]["createdAt"] == "2025-03-04T05:06:07Z"
        local = NOW.astimezone(timezone(timedelta(hours=8)))
        assert default_openmodel(model(HUB), local)["spec"]["createdAt"] == "2025-03-04T05:06:07Z"

    def test_an_existing_created_at_is_kept(self) -> None:
        obj = model(HUB)
        obj["spec"]["createdAt"] = "2024-01-01T00:00:00Z"
        assert default_openmodel(obj, NOW)["spec"]["createdAt"] == "2024-01-01T00:00:00Z"

    def test_an_update_without_created_at_keeps_the_stored_one(self) -> None:
        old = model(HUB)
        old["spec"]["createdAt"] = "2024-01-01T00:00:00Z"
        assert default_openmodel(model(HUB), NOW, old)["spec"]["createdAt"] == "2024-01-01T00:00:00Z"

    def test_a_created_at_in_the_update_wins_over_the_stored_one(self) -> None:
        old, new = model(HUB), model(HUB)
        old["spec"]["createdAt"] = "2024-01-01T00:00:00Z"
        new["spec"]["createdAt"] = "2024-02-02T00:00:00Z"
        assert default_openmodel(new, NOW, old)["spec"]["createdAt"] == "2024-02-02T00:00:00Z"

    def test_a_stored_object_without_created_at_gets_now(self) -> None:
        assert default_openmodel(model(HUB), NOW, model(HUB))["spec"]["createdAt"] == "2025-03-04T05:06:07Z"

    def test_the_input_is_not_modified_and_unknown_fields_survive(self) -> None:
        obj = model(HUB)
        obj["spec"]["future"] = {"x": 1}
        snapshot = copy.deepcopy(obj)
        out = default_openmodel(obj, NOW)
        assert obj == snapshot
        assert out["spec"]["future"] == {"x": 1}

    def test_a_model_without_family_name_gets_an_empty_label(self) -> None:
        obj = model(HUB)
        del obj["spec"]["familyName"]
        assert default_openmodel(obj, NOW)["metadata"]["labels"] == {"llmaz.io/model-family-name": ""}


ADDRESS = "URI with wrong address"

# (case, source, name, expected errors in order)
CASES: list[tuple[str, dict[str, Any], str, list[str]]] = [
    ("hub is valid", HUB, "m", []),
    ("no source at all", {}, "m", ["spec.source: Forbidden: Source can't be all null"]),
    ("uri without separator", {"uri": "qwen"}, "m", ['spec.source.uri: Invalid value: "qwen": URI with wrong format']),
    (
        "uri with two separators",
        {"uri": "oss://a://b"},
        "m",
        ['spec.source.uri: Invalid value: "oss://a://b": URI with wrong format'],
    ),
    ("empty uri", {"uri": ""}, "m", ['spec.source.uri: Invalid value: "": URI with wrong format']),
    (
        "unsupported protocol",
        {"uri": "http://x/y"},
        "m",
        ['spec.source.uri: Invalid value: "http://x/y": URI with unsupported protocol'],
    ),
    ("oss valid", {"uri": "oss://bucket.endpoint/models/qwen"}, "m", []),
    ("protocol is case-insensitive", {"uri": "Oss://bucket.endpoint/p"}, "m", []),
    (
        "oss without dot",
        {"uri": "oss://bucket/path"},
        "m",
        [f'spec.source.uri: Invalid value: "oss://bucket/path": {ADDRESS}'],
    ),
    (
        "oss without slash",
        {"uri": "oss://bucket.endpoint"},
        "m",
        [f'spec.source.uri: Invalid value: "oss://bucket.endpoint": {ADDRESS}'],
    ),
    ("s3 valid", {"uri": "s3://bucket/path"}, "m", []),
    ("s3 without path", {"uri": "s3://bucket"}, "m", [f'spec.source.uri: Invalid value: "s3://bucket": {ADDRESS}']),
    ("gcs without path", {"uri": "GCS://bucket"}, "m", [f'spec.source.uri: Invalid value: "GCS://bucket": {ADDRESS}']),
    ("ollama needs no address check", {"uri": "ollama://"}, "m", []),
    ("host accepts an absolute path", {"uri": "host:///workspace/Qwen2"}, "m", []),
    (
        "modelscope with filename",
        {"modelHub": {"name": "ModelScope", "filename": "a.gguf"}},
        "m",
        ['spec.source.modelHub.filename: Invalid value: "a.gguf": Filename can only set once modelHub is Huggingface'],
    ),
    ("huggingface with filename", {"modelHub": {"name": "Huggingface", "filename": "a.gguf"}}, "m", []),
    (
        "filename with allowPatterns",
        {"modelHub": {"filename": "a.gguf", "allowPatterns": ["*.gguf"]}},
        "m",
        [
            'spec.source.modelHub.allowPatterns: Invalid value: []string{"*.gguf"}: '
            "Once Filename is set, allowPatterns should be nil"
        ],
    ),
    (
        "filename with empty ignorePatterns",
        {"modelHub": {"filename": "a", "ignorePatterns": []}},
        "m",
        [
            "spec.source.modelHub.ignorePatterns: Invalid value: []string{}: "
            "Once Filename is set, ignorePatterns should be nil"
        ],
    ),
    ("patterns without filename", {"modelHub": {"allowPatterns": ["a"], "ignorePatterns": ["b"]}}, "m", []),
    ("name with a dot", HUB, "qwen-2-0.5b", [f'metadata.name: Invalid value: "qwen-2-0.5b": {LABEL_FORMAT_MESSAGE}']),
    (
        "everything wrong at once, in llmaz's order",
        {
            "modelHub": {"name": "ModelScope", "filename": "f", "allowPatterns": ["a"], "ignorePatterns": ["b"]},
            "uri": "ftp://x",
        },
        "Bad",
        [
            'spec.source.uri: Invalid value: "ftp://x": URI with unsupported protocol',
            'spec.source.modelHub.filename: Invalid value: "f": Filename can only set once modelHub is Huggingface',
            'spec.source.modelHub.allowPatterns: Invalid value: []string{"a"}: '
            "Once Filename is set, allowPatterns should be nil",
            'spec.source.modelHub.ignorePatterns: Invalid value: []string{"b"}: '
            "Once Filename is set, ignorePatterns should be nil",
            f'metadata.name: Invalid value: "Bad": {LABEL_FORMAT_MESSAGE}',
        ],
    ),
]


@pytest.mark.parametrize(("case", "source", "name", "expected"), CASES, ids=[c[0] for c in CASES])
def test_validation_rule(case: str, source: dict[str, Any], name: str, expected: list[str]) -> None:
    assert errors(model(source, name)) == expected


def test_the_name_is_checked_on_create_only() -> None:
    assert errors(model(HUB, "qwen-2-0.5b"), creating=False) == []


def test_several_errors_are_denied_together_in_one_aggregate() -> None:
    found = validate_openmodel(OpenModel.from_dict(model({"uri": "x"}, "A")), True)
    assert aggregate(found).startswith('[spec.source.uri: Invalid value: "x": URI with wrong format, metadata.name: ')


def test_hub_and_uri_together_are_admitted_with_a_warning() -> None:
    both = OpenModel.from_dict(model({**HUB, "uri": "s3://b/p"}))
    assert validate_openmodel(both, True) == []
    assert openmodel_warnings(both) == [HUB_AND_URI_WARNING]
    assert openmodel_warnings(OpenModel.from_dict(model(HUB))) == []


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ({"nvidia.com/gpu": 1, "cpu": 4, "memory": "16Gi", "hugepages-2Mi": "1Gi", "amd.com/gpu": 1}, []),
        ({}, ["spec.inferenceConfig.flavors[0]: flavor 'a10' has no limits; its pods request no accelerators"]),
        (None, ["spec.inferenceConfig.flavors[0]: flavor 'a10' has no limits; its pods request no accelerators"]),
        ({"gpu": 1}, ["spec.inferenceConfig.flavors[0].limits: 'gpu' is not a known resource name"]),
        ({"kubernetes.io/gpu": 1}, ["spec.inferenceConfig.flavors[0].limits: 'kubernetes.io/gpu' is not a known"]),
    ],
)
def test_flavors_that_cannot_place_pods_as_meant_are_admitted_with_a_warning(
    limits: dict[str, Any] | None, expected: list[str]
) -> None:
    flavor: dict[str, Any] = {"name": "a10"} if limits is None else {"name": "a10", "limits": limits}
    obj = model(HUB)
    obj["spec"]["inferenceConfig"] = {"flavors": [flavor]}
    parsed = OpenModel.from_dict(obj)
    assert validate_openmodel(parsed, True) == []
    found = openmodel_warnings(parsed)
    assert len(found) == len(expected)
    for warning, start in zip(found, expected, strict=True):
        assert warning.startswith(start), warning


def with_adapters(*adapters: dict[str, Any], name: str = "qwen2-0-5b") -> dict[str, Any]:
    obj = model(HUB, name)
    obj["spec"]["adapters"] = list(adapters)
    return obj


LORA = {"uri": "s3://loras/sql/sql-lora.gguf"}


class TestAdapters:
    def test_named_adapters_from_every_kind_of_source_are_admitted(self) -> None:
        sources = [LORA, {"modelHub": {"modelID": "org/lora"}}, {"uri": "host:///mnt/l.gguf"}, {"uri": "gcs://b/l"}]
        adapters = [{"name": f"lora-{index}", "source": source} for index, source in enumerate(sources)]

        assert errors(with_adapters(*adapters, {"name": "scaled", "source": LORA, "scale": 4})) == []

    @pytest.mark.parametrize(
        ("name", "expected"),
        [
            ("SQL", 'spec.adapters[0].name: Invalid value: "SQL": ' + LABEL_FORMAT_MESSAGE),
            ("a" * 64, f'spec.adapters[0].name: Invalid value: "{"a" * 64}": must be no more than 63 characters'),
            ("qwen2-0-5b", 'spec.adapters[0].name: Invalid value: "qwen2-0-5b": an adapter cannot be named like'),
        ],
        ids=["not-a-label", "too-long", "the-models-name"],
    )
    def test_a_name_is_a_dns_label_other_than_the_models(self, name: str, expected: str) -> None:
        (error,) = errors(with_adapters({"name": name, "source": LORA}))

        assert error.startswith(expected)

    def test_a_name_is_unique_within_the_model(self) -> None:
        found = errors(with_adapters({"name": "sql", "source": LORA}, {"name": "sql", "source": LORA}))

        assert found == [
            'spec.adapters[1].name: Invalid value: "sql": adapter names must be unique within the model: another '
            "adapter has this name"
        ]

    @pytest.mark.parametrize(
        ("source", "expected"),
        [
            ({}, "spec.adapters[0].source: Forbidden: Source can't be all null"),
            ({"uri": "s3:/x"}, 'spec.adapters[0].source.uri: Invalid value: "s3:/x": URI with wrong format'),
            ({"uri": "ftp://x/y"}, 'spec.adapters[0].source.uri: Invalid value: "ftp://x/y": URI with unsupported'),
            ({"uri": "oss://bucket"}, 'spec.adapters[0].source.uri: Invalid value: "oss://bucket": URI with wrong'),
            (
                {"modelHub": {"name": "ModelScope", "modelID": "o/l", "filename": "l.gguf"}},
                'spec.adapters[0].source.modelHub.filename: Invalid value: "l.gguf": Filename can only set once',
            ),
            (
                {"modelHub": {"modelID": "o/l", "filename": "l.gguf", "allowPatterns": ["*"]}},
                'spec.adapters[0].source.modelHub.allowPatterns: Invalid value: []string{"*"}: Once Filename is set',
            ),
            (
                {"uri": "ollama://qwen2:0.5b"},
                'spec.adapters[0].source.uri: Invalid value: "ollama://qwen2:0.5b": an adapter cannot come from '
                "ollama://: ollama pulls whole models by tag, not adapter weights; use a model hub",
            ),
        ],
        ids=["no-source", "format", "protocol", "address", "modelscope-file", "file-and-patterns", "ollama"],
    )
    def test_a_source_follows_the_models_rules_and_is_not_ollama(self, source: dict[str, Any], expected: str) -> None:
        (error,) = errors(with_adapters({"name": "sql", "source": source}))

        assert error.startswith(expected)

    @pytest.mark.parametrize("scale", [0, -1, 4.5])
    def test_a_scale_is_greater_than_zero_and_at_most_four(self, scale: float) -> None:
        (error,) = errors(with_adapters({"name": "sql", "source": LORA, "scale": scale}))

        assert error == (
            f"spec.adapters[0].scale: Invalid value: {float(scale)}: must be a number greater than 0 and at most 4 "
            "(how strongly the adapter applies; 1 is as trained)"
        )

    def test_adapter_rules_apply_on_update_too_and_follow_the_models_errors(self) -> None:
        obj = with_adapters({"name": "SQL", "source": LORA}, name="Qwen")
        obj["spec"]["source"] = {"uri": "x"}

        assert [error.split(":")[0] for error in errors(obj, creating=False)] == [
            "spec.source.uri",
            "spec.adapters[0].name",
        ]


class TestFamilyName:
    """Fix: llmaz copied any family name into a label, which the API server then refused under metadata.labels."""

    def family(self, name: str) -> dict[str, Any]:
        obj = model(HUB)
        obj["spec"]["familyName"] = name
        return obj

    @pytest.mark.parametrize("name", ["llama3", "Qwen2.5_chat", "f" * 63, ""])
    def test_a_label_value_is_a_good_family_name_and_becomes_the_label(self, name: str) -> None:
        assert errors(self.family(name)) == []
        assert default_openmodel(self.family(name), NOW)["metadata"]["labels"]["llmaz.io/model-family-name"] == name

    def test_a_family_name_longer_than_63_characters_is_denied_on_its_field(self) -> None:
        name = "f" * 64
        assert errors(self.family(name)) == [
            f'spec.familyName: Invalid value: "{name}": must be no more than 63 characters'
        ]

    @pytest.mark.parametrize("name", ["llama 3", "-llama", "llama/3", "llama."])
    def test_a_family_name_with_what_a_label_cannot_hold_is_denied_on_its_field(self, name: str) -> None:
        assert errors(self.family(name)) == [
            f"spec.familyName: Invalid value: {go_quote(name)}: {LABEL_VALUE_FORMAT_MESSAGE}"
        ]
        assert errors(self.family(name), creating=False) != []

    def test_a_bad_family_name_is_not_copied_into_the_label_so_the_denial_names_the_field(self) -> None:
        obj = self.family("llama 3")
        obj["metadata"]["labels"] = {"llmaz.io/model-family-name": "old", "team": "a"}
        assert default_openmodel(obj, NOW)["metadata"]["labels"] == {"team": "a"}
