"""llmaz's admission rules, one pure module per kind, and the registry of the eight webhooks serving them.

Defaulters take the raw object and return the mutated copy; validators take the decoded object and return
field errors (rendered in apimachinery's text by `llmaz.apis.validation.field`); warning functions name
references that do not exist yet, asked through a `ReferenceLookup`. The Playground and Service validators live
in `llmaz.apis.validation`, because their reconcilers run the same rules on objects stored without admission.
"""

from llmaz.webhooks.lookup import ReferenceLookup, StaticLookup
from llmaz.webhooks.registry import (
    KINDS,
    MUTATING_CONFIGURATION,
    VALIDATING_CONFIGURATION,
    WEBHOOK_SERVICE,
    webhooks,
)

__all__ = [
    "KINDS",
    "MUTATING_CONFIGURATION",
    "VALIDATING_CONFIGURATION",
    "WEBHOOK_SERVICE",
    "ReferenceLookup",
    "StaticLookup",
    "webhooks",
]
