"""Env, resource and map merges: stable order (llmaz's followed Go map iteration), per-key overrides and the
cpu/memory limit rule."""

from __future__ import annotations

from typing import Any

import pytest

from llmaz.apis.base import ResourceRequirements
from llmaz.controllers.builders.merge import append_absent, json_copy, merge_envs, merge_kvs, merge_resources


def env(name: str, value: str) -> dict[str, Any]:
    return {"name": name, "value": value}


@pytest.mark.parametrize(
    ("base", "overrides", "merged"),
    [
        (None, None, []),
        ([env("A", "1"), env("B", "2")], None, [env("A", "1"), env("B", "2")]),
        (None, [env("B", "2"), env("A", "1")], [env("B", "2"), env("A", "1")]),
        (
            [env("A", "1"), env("B", "2"), env("C", "3")],
            [env("D", "4"), env("B", "x")],
            [env("A", "1"), env("B", "x"), env("C", "3"), env("D", "4")],
        ),
    ],
    ids=["both empty", "backend only", "playground only", "replace in place then append"],
)
def test_env_merge_keeps_backend_order_replaces_in_place_and_appends_new_names(
    base: list[dict[str, Any]] | None, overrides: list[dict[str, Any]] | None, merged: list[dict[str, Any]]
) -> None:
    assert merge_envs(base, overrides) == merged


def test_env_merge_does_not_mutate_its_inputs() -> None:
    base = [env("A", "1")]
    merge_envs(base, [env("A", "2")])[0]["value"] = "changed"
    assert base == [env("A", "1")]


def resources(requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None) -> ResourceRequirements:
    return ResourceRequirements(requests=requests, limits=limits)


@pytest.mark.parametrize(
    ("recommended", "override", "merged"),
    [
        (None, None, {}),
        (
            resources({"cpu": 4, "memory": "8Gi"}, {"cpu": 4, "memory": "8Gi"}),
            None,
            {"requests": {"cpu": "4", "memory": "8Gi"}, "limits": {"cpu": "4", "memory": "8Gi"}},
        ),
        (
            resources({"cpu": 4, "memory": "8Gi"}, {"cpu": 4, "memory": "8Gi"}),
            resources({"cpu": 10}),
            {"requests": {"cpu": "10", "memory": "8Gi"}, "limits": {"cpu": "10", "memory": "8Gi"}},
        ),
        (
            resources({"cpu": 4, "memory": "8Gi"}, {"cpu": 4, "memory": "8Gi"}),
            resources({"memory": "16Gi"}, {"nvidia.com/gpu": 1}),
            {
                "requests": {"memory": "16Gi", "cpu": "4"},
                "limits": {"nvidia.com/gpu": "1", "cpu": "4", "memory": "16Gi"},
            },
        ),
        (
            resources({"cpu": "500m"}, {"cpu": 1}),
            resources({"cpu": "250m"}),
            {"requests": {"cpu": "250m"}, "limits": {"cpu": "1"}},
        ),
        (
            None,
            resources({"nvidia.com/gpu": 2}, {"nvidia.com/gpu": 1}),
            {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "1"}},
        ),
        (
            resources({"cpu": 1}),
            resources(limits={"cpu": 2}),
            {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}},
        ),
    ],
    ids=[
        "nothing",
        "recommended only",
        "cpu request above the recommended limit raises the limit",
        "memory request above the limit raises it, accelerators merged per key",
        "lower request keeps the limit",
        "accelerator limits are never raised",
        "playground limit alone",
    ],
)
def test_resource_merge_overrides_per_key_and_raises_cpu_and_memory_limits(
    recommended: ResourceRequirements | None, override: ResourceRequirements | None, merged: dict[str, Any]
) -> None:
    assert merge_resources(recommended, override) == merged


@pytest.mark.parametrize(
    ("to_merge", "to_be_merged", "merged"),
    [
        (None, None, None),
        (None, {}, None),
        ({}, None, {}),
        (None, {"a": "1"}, {"a": "1"}),
        ({"a": "1", "b": "2"}, {"b": "x", "c": "3"}, {"a": "1", "b": "x", "c": "3"}),
    ],
)
def test_map_merge_overwrites_keys_and_creates_a_map_only_when_needed(
    to_merge: dict[str, str] | None, to_be_merged: dict[str, str] | None, merged: dict[str, str] | None
) -> None:
    assert merge_kvs(to_merge, to_be_merged) == merged


def test_append_absent_never_duplicates_a_key() -> None:
    items: list[Any] = [{"name": "a"}]
    append_absent(items, [{"name": "a", "x": 1}, {"name": "b"}, {"name": "b", "x": 2}])
    assert items == [{"name": "a"}, {"name": "b"}]


@pytest.mark.parametrize(
    "value",
    [
        None,
        {"spec": {"containers": [{"name": "c", "args": ["--x", "1"], "resources": {"limits": {"cpu": 2}}}]}},
        [{"a": [1, 2.5, True, None, "s"]}, []],
        "text",
    ],
)
def test_json_copy_is_an_equal_and_independent_copy(value: Any) -> None:
    copied = json_copy(value)
    assert copied == value
    if isinstance(value, dict):
        copied["spec"]["containers"][0]["args"].append("--y")
        assert value["spec"]["containers"][0]["args"] == ["--x", "1"]
    if isinstance(value, list):
        assert copied[0] is not value[0]
        assert copied[0]["a"] is not value[0]["a"]
