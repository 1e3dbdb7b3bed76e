"""The InferencePool a Playground asks for: its opt-in annotations, as admission checks them and the controller
reads them.

`llmaz.io/inference-pool: "true"` asks for an InferencePool (Gateway API Inference Extension) named like the
Playground; "false", or no annotation, for none. `llmaz.io/inference-pool-failure-mode` is the pool's
`endpointPickerRef.failureMode`: FailClose (the default) or FailOpen. Admission refuses other values; a value
stored without admission is read the safe way: anything but "true" asks for no pool, a failure mode other than
the two is FailClose.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, cast

from llmaz.apis import constants as c
from llmaz.apis.gie_v1 import FailureMode

FAIL_OPEN: Final = "FailOpen"
FAIL_CLOSE: Final = "FailClose"
DEFAULT_FAILURE_MODE: Final[FailureMode] = "FailClose"
FAILURE_MODES: Final = (FAIL_OPEN, FAIL_CLOSE)

POOL_RULE: Final = (
    'must be "true" (llmaz creates an InferencePool named like the Playground, for a gateway of the Gateway API '
    'Inference Extension) or "false" (none, the default): set it to "true" or remove it'
)
FAILURE_MODE_RULE: Final = (
    "must be FailClose (a gateway fails requests while the endpoint picker does not answer, the default) or "
    "FailOpen (it picks an endpoint itself): set one of them or remove the annotation"
)


def parse_pool_opt_in(text: str) -> bool:
    """True for "true", False for "false"; ValueError for anything else."""
    if text not in ("true", "false"):
        raise ValueError(POOL_RULE)
    return text == "true"


def parse_failure_mode(text: str) -> FailureMode:
    """FailOpen or FailClose; ValueError for anything else."""
    if text not in FAILURE_MODES:
        raise ValueError(FAILURE_MODE_RULE)
    return cast(FailureMode, text)


def wants_pool(annotations: Mapping[str, Any] | None) -> bool:
    """Whether a Playground with `annotations` asks for an InferencePool: its annotation is exactly "true"."""
    return (annotations or {}).get(c.INFERENCE_POOL_ANNOTATION) == "true"


def failure_mode(annotations: Mapping[str, Any] | None) -> FailureMode:
    """The failure mode a Playground with `annotations` asks for; FailClose when none, or one admission would
    refuse."""
    text = (annotations or {}).get(c.INFERENCE_POOL_FAILURE_MODE_ANNOTATION)
    try:
        return parse_failure_mode(str(text)) if text is not None else DEFAULT_FAILURE_MODE
    except ValueError:
        return DEFAULT_FAILURE_MODE
