"""config/webhook/manifests.yaml is generated from the registry and must not be stale."""

from __future__ import annotations

from pathlib import Path

import yaml

from llmaz_dev.webhookgen import main, render

MANIFESTS = Path(__file__).resolve().parents[3] / "config" / "webhook" / "manifests.yaml"


def test_the_committed_manifests_match_the_registry() -> None:
    assert MANIFESTS.read_text() == render(), "config/webhook/manifests.yaml is stale: run `make manifests`"


def test_both_configurations_hold_their_four_webhooks_with_the_required_fields() -> None:
    mutating, validating = yaml.safe_load_all(render())
    assert (mutating["kind"], mutating["metadata"]["name"]) == (
        "MutatingWebhookConfiguration",
        "mutating-webhook-configuration",
    )
    assert validating["metadata"]["name"] == "validating-webhook-configuration"
    for config, prefix in ((mutating, "m"), (validating, "v")):
        assert len(config["webhooks"]) == 4
        for hook in config["webhooks"]:
            assert hook["name"].startswith(prefix)
            assert hook["sideEffects"] == "None"
            assert hook["failurePolicy"] == "Fail"
            assert hook["admissionReviewVersions"] == ["v1"]
            assert hook["rules"][0]["operations"] == ["CREATE", "UPDATE"]
            assert hook["clientConfig"]["service"]["name"] == "webhook-service"


def test_the_generator_writes_the_file_it_is_given(tmp_path: Path) -> None:
    out = tmp_path / "manifests.yaml"
    assert main([str(out)]) == 0
    assert out.read_text() == render()
    assert main([]) == 2
