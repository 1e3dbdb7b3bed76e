"""The scheduler extender: nodes filtered and scored by the inference flavors of a pod's model, over HTTP as
kube-scheduler calls it (Go field names)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from llmaz.schedext import flavors
from llmaz.schedext.server import MAX_BODY_BYTES, NODE_CACHE_CAPABLE, SchedulerExtender
from llmaz_dev.testing.informer import FakeInformer
from llmaz_dev.testing.runnables import running

GPU = "nvidia.com/gpu.product"
MODEL = {
    "metadata": {"name": "llama"},
    "spec": {
        "inferenceConfig": {
            "flavors": [
                {"name": "h100", "nodeSelector": {GPU: "H100"}},
                {"name": "a100", "nodeSelector": {GPU: "A100"}},
                {"name": "a10", "nodeSelector": {GPU: "A10"}},
            ]
        }
    },
}


def node(name: str, product: str | None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {GPU: product} if product else {}}}


NODES = [node("h", "H100"), node("a", "A100"), node("s", "A10"), node("cpu", None)]
NAMES = [n["metadata"]["name"] for n in NODES]
LABELS = {n["metadata"]["name"]: n["metadata"]["labels"] for n in NODES}


def pod(model: str | None = "llama", claimed: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "p", "labels": {"llmaz.io/model-name": model} if model else {}}
    if claimed is not None:
        metadata["annotations"] = {"llmaz.io/inference-service-flavors": claimed}
    return {"metadata": metadata, "spec": {}}


def lookup(name: str) -> dict[str, Any] | None:
    return MODEL if name == "llama" else None


def labels_of(name: str) -> dict[str, str] | None:
    return LABELS.get(name)


@pytest.mark.parametrize(
    ("the_pod", "kept", "scores"),
    [
        (pod(), ["h", "a", "s"], {"h": 10, "a": 6, "s": 4, "cpu": 0}),
        (pod(claimed="a10,a100"), ["a", "s"], {"h": 0, "a": 6, "s": 10, "cpu": 0}),  # the claim's order
        (pod(claimed="t4, a10"), ["s"], {"h": 0, "a": 0, "s": 10, "cpu": 0}),  # t4: not the model's
        (pod(model=None), ["h", "a", "s", "cpu"], {"h": 0, "a": 0, "s": 0, "cpu": 0}),  # not a model pod
        (pod(model="unknown"), ["h", "a", "s", "cpu"], {"h": 0, "a": 0, "s": 0, "cpu": 0}),
    ],
    ids=["model-order", "claimed-order", "unknown-claim", "not-a-model-pod", "unknown-model"],
)
def test_nodes_are_kept_by_any_flavor_and_scored_by_the_first(
    the_pod: dict[str, Any], kept: list[str], scores: dict[str, int]
) -> None:
    passed, failed = flavors.filter_nodes(the_pod, NAMES, labels_of, lookup)
    assert passed == kept
    assert sorted(failed) == sorted(name for name in NAMES if name not in kept)
    assert dict(flavors.prioritize(the_pod, NAMES, labels_of, lookup)) == scores


def test_a_failed_node_says_which_flavors_it_matches_none_of() -> None:
    _, failed = flavors.filter_nodes(pod(), NAMES, labels_of, lookup)
    assert failed == {"cpu": "node matches no inference flavor of model llama (h100, a100, a10)"}


def test_a_node_not_in_the_cache_fails_a_model_pod_but_not_another_pod() -> None:
    names = ["h", "new"]
    assert flavors.filter_nodes(pod(), names, labels_of, lookup) == (["h"], {"new": flavors.NOT_CACHED})
    assert flavors.prioritize(pod(), names, labels_of, lookup) == [("h", 10), ("new", 0)]
    assert flavors.filter_nodes(pod(model=None), names, labels_of, lookup) == (names, {})


def test_llmaz_weights_by_flavor_position_scaled_to_the_extender_range() -> None:
    assert [flavors.flavor_score(i) for i in range(9)] == [10, 6, 4, 2, 1, 1, 1, 0, 0]
    assert flavors.flavor_score(None) == 0


@contextlib.asynccontextmanager
async def serving(synced: bool = True) -> AsyncIterator[str]:
    models, nodes = FakeInformer(), FakeInformer()
    models.add(MODEL)
    for each in NODES:
        nodes.add(each)
    if synced:
        models.mark_synced()
        nodes.mark_synced()

    def both_synced() -> bool:
        return models.has_synced() and nodes.has_synced()

    async with running(SchedulerExtender("127.0.0.1:0", models.store, nodes.store, both_synced)) as server:
        yield f"http://127.0.0.1:{server.port}"


async def call(url: str, verb: str, args: Any) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.post(f"{url}/{verb}", json=args) as resp:
        return resp.status, await resp.json() if resp.content_type == "application/json" else await resp.text()


async def test_kube_scheduler_s_calls_are_answered_in_its_go_field_names() -> None:
    args = {"Pod": pod(), "Nodes": None, "NodeNames": NAMES}
    async with serving() as url:
        status, filtered = await call(url, "filter", args)
        assert (status, filtered) == (
            200,
            {
                "NodeNames": ["h", "a", "s"],
                "FailedNodes": {"cpu": "node matches no inference flavor of model llama (h100, a100, a10)"},
                "Error": "",
            },
        )
        status, scored = await call(url, "prioritize", args)
        assert (status, scored) == (
            200,
            [
                {"Host": "h", "Score": 10},
                {"Host": "a", "Score": 6},
                {"Host": "s", "Score": 4},
                {"Host": "cpu", "Score": 0},
            ],
        )


async def test_node_objects_get_an_error_that_says_how_to_configure_the_extender() -> None:
    """kube-scheduler configured with nodeCacheCapable: false: the filter's Error reaches the pod's events."""
    args = {"pod": pod(), "nodes": {"items": NODES}}
    async with serving() as url:
        filtered = await call(url, "filter", args)
        scored = await call(url, "prioritize", args)
    assert filtered == (200, {"NodeNames": None, "FailedNodes": {}, "Error": NODE_CACHE_CAPABLE})
    assert scored == (400, f"{NODE_CACHE_CAPABLE}\n")


async def test_a_body_too_large_for_node_names_is_refused_saying_why() -> None:
    nodes = [node(f"n{i}", "H100") | {"status": {"images": [{"names": ["x" * 200]}] * 20}} for i in range(1200)]
    async with serving() as url:
        status, text = await call(url, "filter", {"Pod": pod(), "Nodes": {"items": nodes}})
    assert (status, text) == (400, f"request body over {MAX_BODY_BYTES // 2**20} MiB: {NODE_CACHE_CAPABLE}\n")


@pytest.mark.parametrize(
    ("synced", "args", "message"),
    [
        (True, [1], "expected ExtenderArgs, a JSON object"),
        (True, {"NodeNames": NAMES}, "ExtenderArgs has no Pod"),
        (True, {"Pod": pod()}, "ExtenderArgs has no NodeNames"),
        (True, {"Pod": pod(), "NodeNames": "h"}, "ExtenderArgs.NodeNames must be a list of node names"),
        (False, {"Pod": pod(), "NodeNames": NAMES}, "the OpenModel and Node caches have not synced yet"),
    ],
)
async def test_bad_calls_are_refused_with_a_400_that_says_why(synced: bool, args: Any, message: str) -> None:
    async with serving(synced) as url:
        status, text = await call(url, "filter", args)
    assert (status, text) == (400, f"{message}\n")
