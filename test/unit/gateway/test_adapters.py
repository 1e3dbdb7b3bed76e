"""LoRA adapters, the pure rules and the catalog: names, listings, holders, the body llama.cpp gets, the routing key."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from llmaz.gateway.routing import routes
from llmaz.gateway.routing.adapters import (
    Adapter,
    LoraSlots,
    ServedAdapters,
    adapter_table,
    engine_body,
    loaded,
    model_adapters,
    path_adapter_name,
    with_scales,
)
from llmaz.gateway.routing.engines import UNKNOWN, engine, parse_lora_adapters, parse_served_adapters
from llmaz.gateway.routing.prefix import routing_key
from llmaz.gateway.routing.routes import Endpoint
from llmaz_dev.testing.waiting import eventually

from .support import WAIT, Cluster, endpoint_slice, inference_service, open_model, playground

HUB = {"modelHub": {"modelID": "x/lora"}}


def with_adapters(name: str, *adapters: str | tuple[str, float]) -> dict[str, Any]:
    listed = [
        {"name": a, "source": HUB} if isinstance(a, str) else {"name": a[0], "source": HUB, "scale": a[1]}
        for a in adapters
    ]
    return open_model(name, adapters=listed)


# --- names -------------------------------------------------------------------------------------------------------


def test_an_open_models_adapters_keep_their_spec_positions_and_scales() -> None:
    found = model_adapters("m", with_adapters("m", "a", ("b", 0.5), "c"))
    assert found == [Adapter("a", "m", 0, 1.0), Adapter("b", "m", 1, 0.5), Adapter("c", "m", 2, 1.0)]


def test_an_entry_without_a_name_is_skipped_and_the_others_keep_their_positions() -> None:
    om = open_model("m", adapters=[{"source": HUB}, {"name": "b", "source": HUB, "scale": "high"}, "junk"])
    assert model_adapters("m", om) == [Adapter("b", "m", 1, 1.0)]
    assert model_adapters("m", None) == []
    assert model_adapters("m", open_model("m")) == []


def test_a_served_model_wins_over_an_adapter_of_its_name_and_the_first_model_over_the_next() -> None:
    models = {"a": with_adapters("a", "shared", "b"), "b": with_adapters("b", "shared", "own")}
    table = adapter_table(["b", "a"], models.get)
    assert table == {"a": [Adapter("shared", "a", 0)], "b": [Adapter("own", "b", 1)]}


def test_the_model_list_puts_each_models_adapters_after_it_with_their_parent() -> None:
    models = {"m": open_model("m", ownedBy="acme", createdAt="2024-01-01T00:00:00Z")}
    listed = routes.model_list(["z", "m"], models.get, {"m": ["sql", "chat"]})
    card = {"object": "model", "created": 1704067200, "owned_by": "acme"}
    assert listed["data"] == [
        {"id": "m", **card},
        {"id": "sql", **card, "parent": "m"},
        {"id": "chat", **card, "parent": "m"},
        {"id": "z", "object": "model", "created": 0, "owned_by": "llmaz"},
    ]


def test_a_playgrounds_engine_is_its_backend_runtime_else_the_crds_default() -> None:
    pg = playground("p", "m")
    assert routes.backend_runtime_name(pg) == "vllm"
    pg["spec"]["backendRuntimeConfig"] = {"backendName": "llamacpp"}
    assert routes.backend_runtime_name(pg) == "llamacpp"


# --- what the engines list ---------------------------------------------------------------------------------------


def lora_slots(*paths: str) -> LoraSlots:
    return parse_lora_adapters(orjson.dumps([{"id": i, "path": p, "scale": 0.0} for i, p in enumerate(paths)]))


def test_llamacpp_holds_an_adapter_at_its_spec_position_when_the_paths_name_none() -> None:
    slots = lora_slots("/workspace/models/sql.gguf", "/workspace/models/chat.gguf")
    assert slots.lora_id(Adapter("chat", "m", 1)) == 1
    assert not slots.holds(Adapter("new", "m", 2))  # started before it was added


def test_llamacpp_holds_an_adapter_by_the_directory_its_path_names_whatever_its_position() -> None:
    slots = lora_slots("/workspace/models/adapters--chat/a.gguf", "/workspace/models/adapters--sql/b.gguf")
    assert slots.lora_id(Adapter("sql", "m", 0)) == 1  # the spec reordered them: this replica keeps its own ids
    assert slots.lora_id(Adapter("chat", "m", 1)) == 0
    assert not slots.holds(Adapter("other", "m", 0))  # position 0 names another adapter


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/workspace/models/adapters--sql/adapter.gguf", "sql"),
        ("/workspace/models/adapters--sql", "sql"),
        ("/workspace/models/adapters--", None),
        ("/workspace/models/sql.gguf", None),
    ],
)
def test_an_adapter_directory_names_its_adapter(path: str, name: str | None) -> None:
    assert path_adapter_name(path) == name


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"<html>", "/lora-adapters is not JSON"),
        (b'{"id": 0}', "/lora-adapters is not a JSON list"),
        (b'[{"id": "0", "path": "a"}]', "/lora-adapters has an entry without an id and a path"),
        (b'[{"id": 0}]', "/lora-adapters has an entry without an id and a path"),
    ],
)
def test_a_llamacpp_listing_that_is_not_one_says_why(body: bytes, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_lora_adapters(body)


def test_vllm_serves_the_adapters_its_model_list_gives_a_parent() -> None:
    listing = {
        "object": "list",
        "data": [
            {"id": "m", "object": "model", "root": "/workspace/models/m", "parent": None},
            {"id": "sql", "object": "model", "root": "/workspace/models/adapters--sql", "parent": "m"},
        ],
    }
    served = parse_served_adapters(orjson.dumps(listing))
    assert served == ServedAdapters(frozenset({"sql"}))
    assert served.holds(Adapter("sql", "m", 0))
    assert not served.holds(Adapter("chat", "m", 1))
    with pytest.raises(ValueError, match="/v1/models has no data list"):
        parse_served_adapters(b"[]")


# --- the body ----------------------------------------------------------------------------------------------------


def test_llamacpp_gets_the_lora_member_added_and_the_body_otherwise_byte_for_byte() -> None:
    body = b'{"model": "sql",  "messages": [{"role": "user", "content": "}"}], "temperature": 0.10}\n'
    document = orjson.loads(body)
    sent = with_scales(body, document, "lora", [{"id": 2, "scale": 0.5}])
    assert sent == body[:-2] + b',"lora":[{"id":2,"scale":0.5}]}\n'
    assert orjson.loads(sent) == {**document, "lora": [{"id": 2, "scale": 0.5}]}
    assert with_scales(b"{}", {}, "lora", [{"id": 0, "scale": 1.0}]) == b'{"lora":[{"id":0,"scale":1.0}]}'


def test_a_body_that_names_its_own_lora_is_sent_as_it_is() -> None:
    body = b'{"model": "sql", "lora": [{"id": 1, "scale": 0.2}]}'
    assert with_scales(body, orjson.loads(body), "lora", [{"id": 0, "scale": 1.0}]) == body


def test_only_llamacpp_bodies_change_and_they_carry_every_held_adapter_by_the_engines_own_id() -> None:
    body = b'{"model": "sql"}'
    document = orjson.loads(body)
    chat, sql = Adapter("chat", "m", 0, 1.0), Adapter("sql", "m", 1, 0.8)
    both = (chat, sql)
    reordered = lora_slots("/m/adapters--sql/b.gguf", "/m/adapters--chat/a.gguf")

    def lora(listing: LoraSlots | None, named: Adapter | None) -> object:
        member = engine("llamacpp").adapters.scales_member
        return orjson.loads(engine_body(member, listing, both, named, body, document))["lora"]

    assert lora(reordered, sql) == [{"id": 0, "scale": 0.8}, {"id": 1, "scale": 0.0}]
    assert lora(None, sql) == [{"id": 0, "scale": 0.0}, {"id": 1, "scale": 0.8}]
    # The base model's requests set every adapter to 0, so a slot's last adapter never answers for the base.
    assert lora(reordered, None) == [{"id": 0, "scale": 0.0}, {"id": 1, "scale": 0.0}]
    # An endpoint that does not hold an adapter is never sent an id for it.
    assert lora(lora_slots("/m/adapters--chat/a.gguf"), None) == [{"id": 0, "scale": 0.0}]
    for name in ("vllm", "sglang", None):
        assert engine_body(engine(name).adapters.scales_member, None, both, sql, body, document) is body


def test_before_an_engine_lists_its_adapters_those_its_service_left_out_take_no_id() -> None:
    body = b'{"model": "good"}'
    document = orjson.loads(body)
    gone, other, good = Adapter("gone", "m", 0), Adapter("other", "m", 1), Adapter("good", "m", 2, 0.7)
    held = loaded((gone, other, good), {"gone", "other"})
    assert held == [Adapter("good", "m", 0, 0.7)]  # the replica loaded it alone: its llama.cpp id is 0
    assert loaded((gone, other, good), ()) == [gone, other, good]
    member = engine("llamacpp").adapters.scales_member
    assert orjson.loads(engine_body(member, None, held, good, body, document))["lora"] == [{"id": 0, "scale": 0.7}]
    assert orjson.loads(engine_body(member, None, held, None, body, document))["lora"] == [{"id": 0, "scale": 0.0}]


def test_an_adapters_routing_key_is_its_own_and_the_base_models_is_unchanged() -> None:
    chat = {"messages": [{"role": "system", "content": "You are terse. " * 20}, {"role": "user", "content": "hi"}]}
    base, sql, other = routing_key(chat), routing_key(chat, adapter="sql"), routing_key(chat, adapter="chat")
    assert base is not None
    assert sql is not None
    assert other is not None
    assert len(base.blocks) == len(sql.blocks)
    assert not set(base.blocks) & set(sql.blocks)
    assert not set(sql.blocks) & set(other.blocks)
    assert len({base.ring, sql.ring, other.ring}) == 3
    assert routing_key(chat, None) == base


# --- the catalog -------------------------------------------------------------------------------------------------


def test_the_catalog_resolves_adapters_of_served_models_and_follows_their_open_models() -> None:
    cluster = Cluster().synced()
    catalog = cluster.catalog()
    cluster.playgrounds.add(playground("p", "m"))
    cluster.open_models.add(with_adapters("m", "sql"))
    cluster.open_models.add(with_adapters("unserved", "orphan"))
    assert catalog.adapter("sql") == Adapter("sql", "m", 0)
    assert catalog.adapter("orphan") is None
    assert catalog.adapter("m") is None
    assert catalog.served_names() == ["m", "sql"]
    cluster.open_models.update(with_adapters("m", "sql", "chat"))
    assert catalog.served_names() == ["chat", "m", "sql"]
    listed = catalog.model_list()["data"]
    assert isinstance(listed, list)
    assert [card["id"] for card in listed] == ["m", "sql", "chat"]
    cluster.open_models.delete(with_adapters("m", "sql", "chat"))
    assert catalog.adapter("sql") is None


def test_the_catalog_knows_the_engine_behind_each_endpoint_and_the_endpoints_listing_adapters() -> None:
    cluster = Cluster().synced()
    catalog = cluster.catalog()
    llama = playground("llama", "m")
    llama["spec"]["backendRuntimeConfig"] = {"backendName": "llamacpp"}
    cluster.playgrounds.add(llama)
    cluster.services.add(inference_service("bare", "m"))
    cluster.open_models.add(with_adapters("m", "sql"))
    cluster.serve("plain", Endpoint("10.0.0.9", 8080))
    cluster.slices.add(endpoint_slice("llama-lb-0", "llama-lb", 8080, ("10.0.0.1", True, False)))
    cluster.slices.add(endpoint_slice("bare-lb-0", "bare-lb", 8080, ("10.0.0.2", True, False)))
    assert catalog.endpoint_runtimes("m") == {Endpoint("10.0.0.1", 8080): "llamacpp", Endpoint("10.0.0.2", 8080): None}
    assert catalog.endpoints_with_adapters() == {Endpoint("10.0.0.1", 8080), Endpoint("10.0.0.2", 8080)}


def test_the_engine_at_an_endpoint_is_the_recognised_one_else_its_playgrounds_runtime() -> None:
    cluster = Cluster().synced()
    catalog = cluster.catalog()
    llama = playground("llama", "m")
    llama["spec"]["backendRuntimeConfig"] = {"backendName": "llamacpp"}
    cluster.playgrounds.add(llama)
    cluster.slices.add(endpoint_slice("llama-lb-0", "llama-lb", 8080, ("10.0.0.1", True, False)))
    first, second = Endpoint("10.0.0.1", 8080), Endpoint("10.0.0.2", 8080)
    recognised = {second: "vllm"}.get
    one_runtime = catalog.engine_at("m", recognised)
    assert (one_runtime(first).name, one_runtime(second).name) == ("llamacpp", "vllm")
    cluster.services.add(inference_service("bare", "m"))
    cluster.slices.add(endpoint_slice("bare-lb-0", "bare-lb", 8080, ("10.0.0.3", True, False)))
    two_runtimes = catalog.engine_at("m")  # a Playground's and a Service's: read per endpoint
    assert [two_runtimes(e).name for e in (first, Endpoint("10.0.0.3", 8080))] == ["llamacpp", UNKNOWN.name]
    assert catalog.engine_at("unserved")(first) is UNKNOWN


async def test_a_request_waiting_for_a_holder_is_woken_by_notify() -> None:
    cluster = Cluster().synced()
    catalog = cluster.catalog()
    cluster.serve("m", Endpoint("10.0.0.1", 8080), Endpoint("10.0.0.2", 8080))
    holders: set[Endpoint] = set()
    waiting = asyncio.create_task(
        catalog.await_endpoints(
            "m", asyncio.get_running_loop().time() + 10 * WAIT, lambda found: [e for e in found if e in holders]
        )
    )
    await eventually(lambda: len(catalog._waiters) == 1, WAIT, "the request waiting")
    holders.add(Endpoint("10.0.0.2", 8080))
    catalog.notify()
    assert await asyncio.wait_for(waiting, WAIT) == [Endpoint("10.0.0.2", 8080)]
