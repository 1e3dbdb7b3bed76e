"""What a Playground or Service serves, shared by the controllers and the gateway: the main model by role, `-lb`."""

from __future__ import annotations

from typing import Any

import pytest

from llmaz.apis import ModelRef
from llmaz.apis.serving import lb_service_name, main_first, main_model


def _obj(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "x", "namespace": "ns"}, "spec": spec}


@pytest.mark.parametrize(
    ("spec", "model"),
    [
        ({"modelClaim": {"modelName": "a"}}, "a"),
        ({"modelClaims": {"models": [{"name": "main"}, {"name": "draft", "role": "draft"}]}}, "main"),
        ({"modelClaims": {"models": [{"name": "draft", "role": "draft"}, {"name": "main", "role": "main"}]}}, "main"),
        ({"modelClaims": {"models": [{"name": "draft", "role": "draft"}, {"name": "main"}]}}, "main"),
        ({"modelClaims": {"models": [{"name": "a", "role": "draft"}, {"name": "b", "role": "draft"}]}}, "a"),
        ({"modelClaims": {"models": [{"name": "a"}, {"name": "b"}]}}, "b"),  # two mains: llmaz's last one leads
        ({"modelClaim": {"modelName": "a"}, "modelClaims": {"models": [{"name": "b"}]}}, "a"),
        ({"modelClaim": {}}, None),
        ({"modelClaims": {"models": []}}, None),
        ({"modelClaims": {"models": [{"role": "main"}]}}, None),
        ({"modelClaims": "garbage"}, None),
        ({}, None),
    ],
)
def test_the_main_model_is_the_claim_else_the_main_role_among_the_claims(
    spec: dict[str, Any], model: str | None
) -> None:
    assert main_model(_obj(spec)) == model


def test_the_controllers_order_typed_claims_with_the_same_function() -> None:
    refs = [ModelRef(name="d", role="draft"), ModelRef(name="m", role="main"), ModelRef(name="e", role="draft")]
    assert [ref.name for ref in main_first(refs, lambda ref: ref.role)] == ["m", "d", "e"]
    stored = {"modelClaims": {"models": [ref.to_dict() for ref in refs]}}
    assert main_model(_obj(stored)) == "m"


def test_the_lb_service_is_named_after_its_inference_service() -> None:
    assert lb_service_name("chat") == "chat-lb"
