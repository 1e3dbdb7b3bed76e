"""OpenModels as users create them: the defaulting webhook fills in what they left out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from .support import Environment, ModelNames, open_model


def test_an_openmodel_is_labelled_with_its_family_and_gets_created_at_and_owned_by_defaults(
    e2e: Environment, namespace: str, models: ModelNames
) -> None:
    name = models.new("opt")
    before = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)

    e2e.apply([open_model(name, family="opt")])

    model = e2e.get("openmodels", name)
    assert model is not None
    assert model["metadata"]["labels"]["llmaz.io/model-family-name"] == "opt"
    assert model["spec"]["ownedBy"] == "llmaz"
    created_at = datetime.fromisoformat(model["spec"]["createdAt"].replace("Z", "+00:00"))
    assert before <= created_at <= datetime.now(UTC) + timedelta(seconds=1)
    assert created_at.microsecond == 0
