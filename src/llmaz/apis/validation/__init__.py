"""llmaz's validation rules for Playgrounds and Services: pure functions of the API objects, returning field
errors rendered in apimachinery's text (`field`).

Both sides of admission use them: the validating webhooks deny with `aggregate(errors)`, and the Playground and
Service reconcilers run the same rules (as on create) on what they read from the cache, because an object can
be stored without admission (written before the webhooks were installed, or while a `failurePolicy: Ignore`
webhook was unreachable). Such an object gets `Progressing=False` with the very text the webhook would have
denied it with, and no children.
"""

from llmaz.apis.validation.field import FieldError, aggregate
from llmaz.apis.validation.playground import validate_playground
from llmaz.apis.validation.service import validate_service

__all__ = ["FieldError", "aggregate", "validate_playground", "validate_service"]
