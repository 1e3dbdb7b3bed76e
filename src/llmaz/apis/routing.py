"""How llmaz-gateway picks an endpoint for a Playground's model, when the Playground says so.

- `llmaz.io/routing-strategy: least-outstanding | prefix-aware`: the gateway's strategy for the model.
- `llmaz.io/routing-weights: prefix=3,queue=2,utilisation=2`: the weights of the prefix-aware strategy's scorers,
  any of them, comma-separated (spaces allowed); each a number from 0 to MAX_WEIGHT; `utilization` is accepted for
  `utilisation`. A weight not named keeps the gateway's own (its flags).

The admission webhook refuses anything else; the gateway reads the same rules for objects stored before (or
without) admission, and ignores a value they refuse.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from llmaz.apis import constants as c

LEAST_OUTSTANDING: Final = "least-outstanding"
PREFIX_AWARE: Final = "prefix-aware"
STRATEGIES: Final = (LEAST_OUTSTANDING, PREFIX_AWARE)
SCORERS: Final = ("prefix", "queue", "utilisation")
_ALIASES: Final = {"utilization": "utilisation"}
# Large enough for any ratio between scorers anyone means, small enough that a typo (3000 for 3) is caught.
MAX_WEIGHT: Final = 100.0
STRATEGY_RULE: Final = f"must be one of: {', '.join(STRATEGIES)}"
WEIGHTS_RULE: Final = (
    f"must be NAME=WEIGHT pairs separated by commas, NAME one of {', '.join(SCORERS)}, WEIGHT a number from 0 to "
    f"{MAX_WEIGHT:g}, e.g. prefix=3,queue=2,utilisation=2"
)


@dataclass(frozen=True, slots=True)
class RoutingWeights:
    """The weights of the prefix-aware strategy's scorers (the defaults are the Gateway API Inference Extension's)."""

    prefix: float = 3.0
    queue: float = 2.0
    utilisation: float = 2.0


def parse_strategy(text: str) -> str:
    """The strategy `text` names (surrounding whitespace ignored); ValueError saying what is accepted."""
    strategy = text.strip()
    if strategy not in STRATEGIES:
        raise ValueError(f"{text!r} is not a routing strategy: use one of {', '.join(STRATEGIES)}")
    return strategy


def parse_weight(text: str) -> float:
    """One weight: a number from 0 to MAX_WEIGHT; ValueError otherwise."""
    try:
        weight = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not math.isfinite(weight) or not 0 <= weight <= MAX_WEIGHT:
        raise ValueError(f"{text!r} is not a weight from 0 to {MAX_WEIGHT:g}")
    return weight


def parse_weights(text: str) -> dict[str, float]:
    """The weights `text` names, by scorer (see the module docstring); ValueError saying what is accepted."""
    found: dict[str, float] = {}
    for pair in text.split(","):
        name, sep, value = pair.partition("=")
        name = _ALIASES.get(name.strip(), name.strip())
        if not sep or name not in SCORERS:
            raise ValueError(f"{pair.strip()!r} is not NAME=WEIGHT with NAME one of {', '.join(SCORERS)}")
        if name in found:
            raise ValueError(f"{name} is given twice")
        found[name] = parse_weight(value.strip())
    return found


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    return annotations if isinstance(annotations, Mapping) else {}


@dataclass(frozen=True, slots=True)
class RoutingOverride:
    """What a Playground's annotations change: the strategy (None: the gateway's) and the weights they name."""

    strategy: str | None = None
    weights: tuple[tuple[str, float], ...] = ()

    def weights_over(self, defaults: RoutingWeights) -> RoutingWeights:
        return replace(defaults, **dict(self.weights)) if self.weights else defaults


def routing_override(obj: Mapping[str, Any]) -> RoutingOverride | None:
    """A Playground's routing annotations, or None when it has neither. Raises ValueError naming the annotation
    when one is present but invalid."""
    annotations = _annotations(obj)
    strategy_text = annotations.get(c.ROUTING_STRATEGY_ANNOTATION)
    weights_text = annotations.get(c.ROUTING_WEIGHTS_ANNOTATION)
    if strategy_text is None and weights_text is None:
        return None
    strategy = weights = None
    try:
        strategy = None if strategy_text is None else parse_strategy(str(strategy_text))
    except ValueError as err:
        raise ValueError(f"annotation {c.ROUTING_STRATEGY_ANNOTATION}: {err}") from None
    try:
        weights = None if weights_text is None else parse_weights(str(weights_text))
    except ValueError as err:
        raise ValueError(f"annotation {c.ROUTING_WEIGHTS_ANNOTATION}: {err}") from None
    return RoutingOverride(strategy, tuple(sorted((weights or {}).items())))
