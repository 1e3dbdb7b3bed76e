"""Playground: the model-name label default, every validation rule and fix, and reference warnings."""

from __future__ import annotations

from typing import Any

import pytest

from llmaz.apis import Playground
from llmaz.apis.validation import validate_playground
from llmaz.apis.validation.autoscale import BOTH_TRIGGERS, DELAY_RULE, TARGET_RULE, THRESHOLD_RULE, WINDOW_RULE
from llmaz.apis.validation.names import DNS1035_FORMAT_MESSAGE, LABEL_FORMAT_MESSAGE, serving_name_too_long
from llmaz.webhooks.lookup import StaticLookup
from llmaz.webhooks.playground import default_playground, playground_warnings


def playground(spec: dict[str, Any], name: str = "qwen", **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "inference.llmaz.io/v1alpha1",
        "kind": "Playground",
        "metadata": {"name": name, "namespace": "default", **meta},
        "spec": spec,
    }


CLAIM = {"modelClaim": {"modelName": "qwen2-0-5b"}}
REQUESTS = "spec.elasticConfig.scaleTrigger.requests"


def requests_spec(trigger: dict[str, Any], **bounds: int) -> dict[str, Any]:
    elastic = {"minReplicas": 1, "maxReplicas": 4, **bounds, "scaleTrigger": {"requests": trigger}}
    return {**CLAIM, "elasticConfig": elastic}


SPECULATIVE = {"modelClaims": {"models": [{"name": "llama-7b", "role": "main"}, {"name": "llama-1b", "role": "draft"}]}}


class TestDefaulting:
    def test_the_label_is_the_model_claim_name(self) -> None:
        out = default_playground(playground(CLAIM))
        assert out["metadata"]["labels"] == {"llmaz.io/model-name": "qwen2-0-5b"}

    def test_the_label_is_the_last_main_model_of_model_claims(self) -> None:
        claims = {"models": [{"name": "a"}, {"name": "d", "role": "draft"}, {"name": "b", "role": "main"}]}
        out = default_playground(playground({"modelClaims": claims}))
        assert out["metadata"]["labels"]["llmaz.io/model-name"] == "b"

    def test_the_label_is_set_to_empty_when_no_model_is_claimed(self) -> None:
        out = default_playground(playground({}))
        assert out["metadata"]["labels"] == {"llmaz.io/model-name": ""}

    def test_the_label_overwrites_a_user_value_and_keeps_other_labels(self) -> None:
        out = default_playground(playground(CLAIM, labels={"llmaz.io/model-name": "other", "app": "x"}))
        assert out["metadata"]["labels"] == {"llmaz.io/model-name": "qwen2-0-5b", "app": "x"}

    def test_the_input_is_not_modified(self) -> None:
        obj = playground(CLAIM)
        default_playground(obj)
        assert "labels" not in obj["metadata"]


def errors(spec: dict[str, Any], name: str = "qwen", creating: bool = True) -> list[str]:
    return [str(e) for e in validate_playground(Playground.from_dict(playground(spec, name)), creating)]


LIMIT = (
    "spec.backendRuntimeConfig.resources: Forbidden: limit ({}) for {} must be greater than or equal to request ({})"
)

CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("a model claim is valid", CLAIM, []),
    ("speculative decoding with two models is valid", SPECULATIVE, []),
    ("no claim at all", {}, ["spec: Forbidden: modelClaim and modelClaims couldn't be both nil"]),
    ("both claims", {**CLAIM, **SPECULATIVE}, ["spec: Forbidden: modelClaim and modelClaims couldn't be both not nil"]),
    (
        "speculative decoding with three models",
        {"modelClaims": {"models": [{"name": "a"}, {"name": "b", "role": "draft"}, {"name": "c", "role": "draft"}]}},
        ["spec.modelClaims.models: Forbidden: only two models are allowed in speculativeDecoding mode"],
    ),
    # Fix #2: count main models by role, and require one.
    (
        "two main models (fix: counted by role)",
        {"modelClaims": {"models": [{"name": "a"}, {"name": "b", "role": "main"}]}},
        ["spec.modelClaims.models: Forbidden: only one main model is allowed"],
    ),
    ("a model named main is just a model (fix)", {"modelClaims": {"models": [{"name": "main"}]}}, []),
    (
        "only a draft model (fix: a main model is required)",
        {"modelClaims": {"models": [{"name": "d", "role": "draft"}]}},
        [
            "spec.modelClaims.models: Forbidden: only two models are allowed in speculativeDecoding mode",
            "spec.modelClaims.models: Forbidden: main model is required",
        ],
    ),
    (
        "model claims without models (fix)",
        {"modelClaims": {}},
        ["spec.modelClaims.models: Forbidden: main model is required"],
    ),
    (
        "limit below request",
        {**CLAIM, "backendRuntimeConfig": {"resources": {"limits": {"cpu": 5}, "requests": {"cpu": 10}}}},
        [LIMIT.format("5", "cpu", "10")],
    ),
    (
        "quantities are printed canonically",
        {
            **CLAIM,
            "backendRuntimeConfig": {
                "resources": {
                    "limits": {"memory": "2048Mi", "cpu": "500m"},
                    "requests": {"memory": "3Gi", "cpu": "1000m"},
                }
            },
        },
        [LIMIT.format("2Gi", "memory", "3Gi"), LIMIT.format("500m", "cpu", "1")],
    ),
    (
        "limit equal to request",
        {**CLAIM, "backendRuntimeConfig": {"resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "1000m"}}}},
        [],
    ),
    (
        "minReplicas zero",
        {**CLAIM, "elasticConfig": {"minReplicas": 0, "maxReplicas": 3}},
        ["spec.elasticConfig.minReplicas: Forbidden: minReplicas couldn't be 0"],
    ),
    # Fix #3: the errors are reported on the fields they concern.
    (
        "minReplicas not below maxReplicas (fix: path)",
        {**CLAIM, "elasticConfig": {"minReplicas": 3, "maxReplicas": 3}},
        ["spec.elasticConfig.minReplicas: Invalid value: 3: minReplicas must be less than maxReplicas"],
    ),
    (
        "minReplicas zero and maxReplicas zero",
        {**CLAIM, "elasticConfig": {"minReplicas": 0, "maxReplicas": 0}},
        [
            "spec.elasticConfig.minReplicas: Forbidden: minReplicas couldn't be 0",
            "spec.elasticConfig.minReplicas: Invalid value: 0: minReplicas must be less than maxReplicas",
        ],
    ),
    ("minReplicas unset is not compared", {**CLAIM, "elasticConfig": {"maxReplicas": 1}}, []),
    (
        "scaleTrigger without hpa (fix: path)",
        {**CLAIM, "elasticConfig": {"maxReplicas": 3, "scaleTrigger": {}}},
        ["spec.elasticConfig.scaleTrigger.hpa: Forbidden: hpa couldn't be nil"],
    ),
    ("scaleTrigger with hpa", {**CLAIM, "elasticConfig": {"maxReplicas": 3, "scaleTrigger": {"hpa": {}}}}, []),
    # The autoscaler's trigger (llmaz has none): a `requests` trigger stands in for `hpa`.
    ("requests trigger, defaults", requests_spec({"targetPerReplica": 4}), []),
    (
        "requests trigger, every field",
        requests_spec(
            {
                "targetPerReplica": 2.5,
                "stableWindow": "2m",
                "panicWindow": "10s",
                "panicThreshold": 3,
                "scaleDownDelay": "0s",
            }
        ),
        [],
    ),
    (
        "requests trigger, target not above 0",
        requests_spec({"targetPerReplica": 0}),
        [f"{REQUESTS}.targetPerReplica: Invalid value: 0.0: {TARGET_RULE}"],
    ),
    (
        "requests trigger, negative target",
        requests_spec({"targetPerReplica": -1}),
        [f"{REQUESTS}.targetPerReplica: Invalid value: -1.0: {TARGET_RULE}"],
    ),
    (
        "requests trigger, windows that are not durations",
        requests_spec({"targetPerReplica": 4, "stableWindow": "a minute", "panicWindow": "0s"}),
        [
            f'{REQUESTS}.stableWindow: Invalid value: "a minute": {WINDOW_RULE}',
            f'{REQUESTS}.panicWindow: Invalid value: "0s": {WINDOW_RULE}',
        ],
    ),
    (
        "requests trigger, panic window not shorter than the stable window",
        requests_spec({"targetPerReplica": 4, "stableWindow": "30s", "panicWindow": "30s"}),
        [f'{REQUESTS}.panicWindow: Invalid value: "30s": must be shorter than stableWindow'],
    ),
    (
        "requests trigger, default panic window against a short stable window",
        requests_spec({"targetPerReplica": 4, "stableWindow": "5s"}),
        [f'{REQUESTS}.panicWindow: Invalid value: "6s": must be shorter than stableWindow'],
    ),
    (
        "requests trigger, panic threshold not above 1",
        requests_spec({"targetPerReplica": 4, "panicThreshold": 1}),
        [f"{REQUESTS}.panicThreshold: Invalid value: 1.0: {THRESHOLD_RULE}"],
    ),
    (
        "requests trigger, scale-down delay not a duration",
        requests_spec({"targetPerReplica": 4, "scaleDownDelay": "-5m"}),
        [f'{REQUESTS}.scaleDownDelay: Invalid value: "-5m": {DELAY_RULE}'],
    ),
    (
        "requests trigger, minReplicas above maxReplicas",
        requests_spec({"targetPerReplica": 4}, minReplicas=5, maxReplicas=2),
        ["spec.elasticConfig.minReplicas: Invalid value: 5: minReplicas must be less than maxReplicas"],
    ),
    (
        "hpa and requests together",
        {
            **CLAIM,
            "elasticConfig": {"maxReplicas": 3, "scaleTrigger": {"hpa": {}, "requests": {"targetPerReplica": 4}}},
        },
        [f"spec.elasticConfig.scaleTrigger: Forbidden: {BOTH_TRIGGERS}"],
    ),
]


@pytest.mark.parametrize(("case", "spec", "expected"), CASES, ids=[c[0] for c in CASES])
def test_validation_rule(case: str, spec: dict[str, Any], expected: list[str]) -> None:
    assert errors(spec) == expected


def test_the_name_is_checked_on_create_only() -> None:
    assert errors(CLAIM, name="qwen.0") == [f'metadata.name: Invalid value: "qwen.0": {LABEL_FORMAT_MESSAGE}']
    assert errors(CLAIM, name="qwen.0", creating=False) == []


def warnings(spec: dict[str, Any], lookup: StaticLookup | None) -> list[str]:
    return playground_warnings(Playground.from_dict(playground(spec)), lookup)


LOOKUP = StaticLookup(
    backends={"vllm": ["default", "speculative-decoding"], "llamacpp": ["default"]},
    models={"qwen2-0-5b", "llama-7b", "llama-1b"},
)


class TestWarnings:
    def test_no_warning_when_everything_exists(self) -> None:
        assert warnings(CLAIM, LOOKUP) == []
        assert warnings(SPECULATIVE, LOOKUP) == []

    def test_a_missing_model_is_named(self) -> None:
        assert warnings({"modelClaim": {"modelName": "nope"}}, LOOKUP) == [
            "OpenModel 'nope' not found; the workload waits until it exists"
        ]

    def test_a_missing_backend_is_named_and_defaults_to_vllm(self) -> None:
        assert warnings(CLAIM, StaticLookup(models={"qwen2-0-5b"})) == [
            "BackendRuntime 'vllm' not found; the Playground waits until it exists"
        ]
        assert warnings({**CLAIM, "backendRuntimeConfig": {"backendName": "sglang"}}, LOOKUP) == [
            "BackendRuntime 'sglang' not found; the Playground waits until it exists"
        ]

    def test_a_config_name_missing_from_the_backend_is_named(self) -> None:
        spec = {**CLAIM, "backendRuntimeConfig": {"backendName": "vllm", "configName": "fast"}}
        assert warnings(spec, LOOKUP) == ["BackendRuntime 'vllm' has no recommended config 'fast'"]

    def test_the_inferred_speculative_config_must_exist_in_the_backend(self) -> None:
        spec = {**SPECULATIVE, "backendRuntimeConfig": {"backendName": "llamacpp"}}
        assert warnings(spec, LOOKUP) == ["BackendRuntime 'llamacpp' has no recommended config 'speculative-decoding'"]

    def test_a_claimed_flavor_the_model_lacks_is_named(self) -> None:
        lookup = StaticLookup(backends=LOOKUP.backends, models=LOOKUP.models, flavors={"qwen2-0-5b": ["a10"]})
        spec = {"modelClaim": {"modelName": "qwen2-0-5b", "inferenceFlavors": ["t4", "a10"]}}
        assert warnings(spec, lookup) == [
            "OpenModel 'qwen2-0-5b' has no inference flavor 't4'; it is skipped (the Service's FlavorsResolved "
            "condition says which flavor is used)"
        ]
        claims = {"modelClaims": {"models": [{"name": "qwen2-0-5b"}], "inferenceFlavors": ["a10"]}}
        assert warnings(claims, lookup) == []

    def test_no_lookup_means_no_warnings(self) -> None:
        assert warnings({"modelClaim": {"modelName": "nope"}}, None) == []


class TestNamesMadeFromThePlaygroundName:
    """Fix: llmaz admitted a name its `-lb` Service or its LeaderWorkerSet's pods could not carry."""

    def test_a_name_of_52_characters_is_admitted(self) -> None:
        assert errors(CLAIM, name="p" * 52) == []

    def test_a_name_of_53_characters_is_denied_with_the_limit_and_why(self) -> None:
        name = "p" * 53
        assert errors(CLAIM, name=name) == [f'metadata.name: Invalid value: "{name}": {serving_name_too_long(52)}']
        assert "must be no more than 52 characters" in serving_name_too_long(52)

    @pytest.mark.parametrize("length", [61, 63])
    def test_a_name_whose_lb_service_name_is_too_long_is_denied(self, length: int) -> None:
        assert [e.split(": ")[0] for e in errors(CLAIM, name="p" * length)] == ["metadata.name"]

    def test_a_name_starting_with_a_digit_is_denied_as_services_need_a_letter_first(self) -> None:
        assert errors(CLAIM, name="7b-chat") == [f'metadata.name: Invalid value: "7b-chat": {DNS1035_FORMAT_MESSAGE}']

    def test_a_generate_name_is_checked_on_the_name_it_generates(self) -> None:
        def generated(prefix: str) -> list[str]:
            obj = Playground.from_dict(playground(CLAIM, name="", generateName=prefix))
            return [str(e) for e in validate_playground(obj, True)]

        assert generated("p" * 47) == []
        prefix = "p" * 48
        assert generated(prefix) == [f'metadata.generateName: Invalid value: "{prefix}": {serving_name_too_long(52)}']

    def test_names_are_checked_on_create_only(self) -> None:
        assert errors(CLAIM, name="p" * 60, creating=False) == []
