"""Claimed models, their order, the recommended config they select and the template values they define.

Invariants:
- Model lists handed to the other builders are main-first: `main_first` orders them as `llmaz.apis.serving` does
  for everyone (a main model is prepended, any other appended), so index 0 is the main model and index 1 the draft.
- A missing role counts as `main` and a missing backend name as `vllm`, as the CRD defaults would have made them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from llmaz.apis import BackendRuntime, ModelRef, OpenModel, Playground, RecommendedConfig, Service
from llmaz.apis import constants as c
from llmaz.apis.modelpath import model_name, model_path
from llmaz.apis.serving import main_first as serving_order
from llmaz.controllers.builders.errors import InvalidModelSourceError, NoModelClaimedError


def playground_model_refs(playground: Playground) -> list[ModelRef]:
    """The models a Playground claims, in claim order; a `modelClaim` is one main model."""
    spec = playground.spec
    if spec.model_claim is not None:
        return [ModelRef(name=spec.model_claim.model_name or "", role=c.MAIN_ROLE)]
    if spec.model_claims is not None:
        return list(spec.model_claims.models or ())
    return []


def service_model_refs(service: Service) -> list[ModelRef]:
    claims = service.spec.model_claims
    return list(claims.models or ()) if claims is not None else []


def main_first(claimed: Sequence[tuple[ModelRef, OpenModel]]) -> list[OpenModel]:
    """The fetched models ordered as llmaz orders them: each main model prepended, the others appended."""
    return [model for _, model in serving_order(claimed, lambda pair: pair[0].role)]


def require_models(models: Sequence[OpenModel]) -> OpenModel:
    """The main model; an empty claim is an error rather than llmaz's index panic."""
    if not models:
        raise NoModelClaimedError()
    return models[0]


def skip_model_loader(annotations: Mapping[str, str] | None) -> bool:
    """Only the exact value "true" skips the loader."""
    return (annotations or {}).get(c.SKIP_MODEL_LOADER_ANNOTATION) == "true"


def backend_name(playground: Playground) -> str:
    config = playground.spec.backend_runtime_config
    return (config.backend_name if config is not None else None) or c.DEFAULT_BACKEND_NAME


def detect_config_name(playground: Playground) -> str:
    """`speculative-decoding` when `modelClaims` has a draft model, else `default` (llmaz's DetectArgFrom)."""
    spec = playground.spec
    claims = spec.model_claims if spec.model_claim is None else None
    if claims is not None and any(ref.role == c.DRAFT_ROLE for ref in claims.models or ()):
        return c.SPECULATIVE_DECODING_CONFIG_NAME
    return c.DEFAULT_CONFIG_NAME


def effective_config_name(playground: Playground) -> str:
    """An explicit `configName` wins over the detected one."""
    config = playground.spec.backend_runtime_config
    explicit = config.config_name if config is not None else None
    return explicit or detect_config_name(playground)


def recommended_config(backend: BackendRuntime, name: str) -> RecommendedConfig | None:
    """The first recommended config called `name`."""
    return next((config for config in backend.spec.recommended_configs or () if config.name == name), None)


def checked_model_path(model: OpenModel, skip: bool) -> str:
    try:
        return model_path(model, skip)
    except ValueError as error:
        raise InvalidModelSourceError(model.metadata.name or "", str(error)) from error


def checked_model_name(model: OpenModel) -> str:
    try:
        return model_name(model)
    except ValueError as error:
        raise InvalidModelSourceError(model.metadata.name or "", str(error)) from error


def template_values(models: Sequence[OpenModel], skip: bool) -> dict[str, str]:
    """The argument placeholders: ModelPath and ModelName of the main model, DraftModelPath of the second one."""
    main = require_models(models)
    values = {"ModelPath": checked_model_path(main, skip), "ModelName": checked_model_name(main)}
    if len(models) > 1:
        values["DraftModelPath"] = checked_model_path(models[1], skip)
    return values
