"""CacheLookup answers from informer stores, and says nothing before they have synced."""

from __future__ import annotations

from llmaz.webhooks.cachelookup import CacheLookup
from llmaz_dev.testing import FakeStore


def _stores() -> tuple[FakeStore, FakeStore]:
    models, backends = FakeStore(), FakeStore()
    models.objects["m"] = {"metadata": {"name": "m"}}
    backends.objects["vllm"] = {"metadata": {"name": "vllm"}, "spec": {"recommendedConfigs": [{"name": "default"}]}}
    return models, backends


def test_answers_come_from_the_caches_once_synced() -> None:
    models, backends = _stores()
    lookup = CacheLookup(models, backends, lambda: True)
    assert lookup.open_model_exists("m") is True
    assert lookup.open_model_exists("other") is False
    assert lookup.backend_runtime_exists("vllm") is True
    assert lookup.backend_runtime_exists("sglang") is False
    assert list(lookup.backend_config_names("vllm") or []) == ["default"]
    assert lookup.backend_config_names("sglang") is None


def test_nothing_is_known_before_the_caches_sync() -> None:
    models, backends = _stores()
    lookup = CacheLookup(models, backends, lambda: False)
    assert lookup.open_model_exists("other") is None
    assert lookup.backend_runtime_exists("sglang") is None
    assert lookup.backend_config_names("vllm") is None
