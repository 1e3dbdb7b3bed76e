"""The routing annotations' grammar: strategies by name, weights as NAME=WEIGHT pairs, errors that say what is
accepted and name the annotation."""

from __future__ import annotations

import pytest

from llmaz.apis import constants as c
from llmaz.apis.routing import (
    LEAST_OUTSTANDING,
    PREFIX_AWARE,
    RoutingOverride,
    RoutingWeights,
    parse_strategy,
    parse_weights,
    routing_override,
)


@pytest.mark.parametrize(
    ("text", "strategy"), [("prefix-aware", PREFIX_AWARE), (" least-outstanding ", LEAST_OUTSTANDING)]
)
def test_strategies_by_name(text: str, strategy: str) -> None:
    assert parse_strategy(text) == strategy


@pytest.mark.parametrize("text", ["", "round-robin", "Prefix-Aware", "prefix_aware"])
def test_other_strategies_are_refused_naming_the_accepted_ones(text: str) -> None:
    with pytest.raises(ValueError, match="use one of least-outstanding, prefix-aware"):
        parse_strategy(text)


@pytest.mark.parametrize(
    ("text", "weights"),
    [
        ("prefix=3,queue=2,utilisation=2", {"prefix": 3.0, "queue": 2.0, "utilisation": 2.0}),
        (" queue = 0 , utilization=1.5", {"queue": 0.0, "utilisation": 1.5}),
        ("prefix=100", {"prefix": 100.0}),
    ],
)
def test_weights_are_any_of_the_scorers(text: str, weights: dict[str, float]) -> None:
    assert parse_weights(text) == weights


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "is not NAME=WEIGHT"),
        ("prefix", "is not NAME=WEIGHT"),
        ("latency=1", "is not NAME=WEIGHT with NAME one of prefix, queue, utilisation"),
        ("prefix=3,", "is not NAME=WEIGHT"),
        ("prefix=lots", "is not a number"),
        ("prefix=-1", "is not a weight from 0 to 100"),
        ("queue=101", "is not a weight from 0 to 100"),
        ("queue=nan", "is not a weight"),
        ("queue=inf", "is not a weight"),
        ("queue=1,queue=2", "queue is given twice"),
        ("utilisation=1,utilization=2", "utilisation is given twice"),
    ],
)
def test_bad_weights_say_what_is_accepted(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_weights(text)


def test_only_annotated_playgrounds_override_and_a_bad_value_names_its_annotation() -> None:
    def pg(**annotations: str) -> dict[str, object]:
        return {"metadata": {"name": "p", "annotations": annotations}}

    assert routing_override(pg()) is None
    assert routing_override({"metadata": {"annotations": "not a map"}}) is None
    found = routing_override(pg(**{c.ROUTING_STRATEGY_ANNOTATION: "prefix-aware"}))
    assert found == RoutingOverride(PREFIX_AWARE)
    weighted = routing_override(pg(**{c.ROUTING_WEIGHTS_ANNOTATION: "queue=0"}))
    assert weighted is not None
    assert weighted.strategy is None
    assert weighted.weights_over(RoutingWeights(prefix=5)) == RoutingWeights(prefix=5, queue=0, utilisation=2)
    with pytest.raises(ValueError, match=f"annotation {c.ROUTING_STRATEGY_ANNOTATION}: 'rr' is not"):
        routing_override(pg(**{c.ROUTING_STRATEGY_ANNOTATION: "rr"}))
    with pytest.raises(ValueError, match=f"annotation {c.ROUTING_WEIGHTS_ANNOTATION}: 'x' is not"):
        routing_override(pg(**{c.ROUTING_WEIGHTS_ANNOTATION: "prefix=x"}))
