"""The global ConfigMap: a missing or invalid one is said once, with the fix, and fails readiness until it loads."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from structlog.testing import capture_logs

from llmaz.controllers.globalconfig import DEPLOY_FIX, GlobalConfig
from llmaz.controllers.settings import SettingsHolder
from llmaz.runtime.server.healthz import CheckFailed
from llmaz_dev.testing import FakeInformer

VALID = "init-container-image: inftyai/model-loader:v0.0.10\n"


def config_map(data: str, rv: str = "1") -> dict[str, Any]:
    return {
        "metadata": {"name": "llmaz-global-config", "namespace": "ops", "resourceVersion": rv},
        "data": {"config.data": data},
    }


async def synced(informer: FakeInformer, config: GlobalConfig) -> None:
    """Sync the informer while `config` runs: it reports once the informer has synced, then returns."""
    task = asyncio.create_task(config.run())
    informer.mark_synced()
    await asyncio.wait_for(task, 5)


async def test_a_missing_config_map_is_logged_once_with_the_fix_and_fails_readiness_until_it_appears() -> None:
    informer = FakeInformer()
    config = GlobalConfig(SettingsHolder(), "ops", informer)
    informer.add_event_handler(config)
    config.check()  # before the first list nothing is known: the informers check covers it
    with capture_logs() as logs:
        await synced(informer, config)
        with pytest.raises(CheckFailed) as failed:
            config.check()
        informer.add(config_map(VALID))
        config.check()
    assert str(failed.value) == (
        f"ConfigMap llmaz-global-config in namespace ops is missing, so no inference Service can be built: {DEPLOY_FIX}"
    )
    assert "make deploy" in DEPLOY_FIX
    assert "config/default" in DEPLOY_FIX
    assert [(log["log_level"], log["event"]) for log in logs] == [
        ("error", "global config not loaded"),
        ("info", "global config updated"),
        ("info", "global config loaded"),
    ]
    assert logs[0]["reason"] == str(failed.value)
    assert (logs[0]["configmap"], logs[0]["namespace"]) == ("llmaz-global-config", "ops")


async def test_an_invalid_config_map_is_reported_once_per_distinct_error() -> None:
    informer = FakeInformer()
    config = GlobalConfig(SettingsHolder(), "ops", informer)
    informer.add_event_handler(config)
    informer.add(config_map("scheduler-name: x\n"))
    with capture_logs() as logs:
        await synced(informer, config)
        informer.update(config_map("scheduler-name: y\n", rv="2"))  # still invalid, same error: not repeated
        with pytest.raises(CheckFailed, match=r"is invalid .*init-container-image is required"):
            config.check()
    assert [(log["log_level"], log["event"]) for log in logs] == [("error", "global config not loaded")]


async def test_deleting_a_loaded_config_map_keeps_the_settings_and_says_how_to_restore_it() -> None:
    informer = FakeInformer()
    settings = SettingsHolder()
    config = GlobalConfig(settings, "ops", informer)
    informer.add_event_handler(config)
    informer.add(config_map(VALID))
    await synced(informer, config)
    with capture_logs() as logs:
        informer.delete(config_map(VALID))
    config.check()
    assert settings.current is not None
    assert [(log["log_level"], log["event"], log["fix"]) for log in logs] == [
        ("warning", "global config deleted, keeping the last settings", DEPLOY_FIX)
    ]
