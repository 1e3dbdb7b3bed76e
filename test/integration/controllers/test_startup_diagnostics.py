"""What the manager says when what it needs is missing: one clear line naming the fix, and /readyz saying why.

- No LeaderWorkerSet CRD: one error naming the resource and the `kubectl apply` that installs LWS, /readyz failing
  with the same text, and no failure at the cache-sync deadline; once the CRD is installed the manager syncs and
  reconciles without a restart. On a control plane of this test's own (it must start without the CRD).
- No global ConfigMap in the manager's namespace: one error naming it, its namespace and `make deploy`, /readyz
  failing with it, no reconcile errors meanwhile; the ConfigMap's arrival fixes everything without a restart.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from llmaz.apis import resources as r
from llmaz.controllers.caches import LWS_FIX
from llmaz.controllers.globalconfig import DEPLOY_FIX
from llmaz.controllers.setup import ControllerSettings
from llmaz.runtime.client import Client
from llmaz.runtime.manager import Manager
from llmaz_dev.envtest import Cluster
from llmaz_dev.envtest._assets import find_assets
from llmaz_dev.envtest.control_plane import ControlPlane
from llmaz_dev.testing.waiting import eventually

from .objects import get_or_none, open_model, playground
from .running import manager_running, readyz

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
LWS_RESOURCE = "leaderworkerset.x-k8s.io/v1/leaderworkersets"


@pytest.fixture
async def plane_without_lws() -> AsyncIterator[ControlPlane]:
    """A control plane with llmaz's CRDs, default BackendRuntimes and global ConfigMap, but no LeaderWorkerSet."""
    assets = dataclasses.replace(find_assets(), lws_crd=None)
    plane = ControlPlane(crd_paths=[REPO / "config" / "crd" / "bases"], assets=assets)
    await asyncio.to_thread(plane.start)
    try:
        await asyncio.to_thread(
            plane.kubectl, "apply", "--server-side", "--force-conflicts", "-k", str(REPO / "config" / "dev")
        )
        yield plane
    finally:
        await asyncio.to_thread(plane.stop)


def _failed_lws_lists(logs: Sequence[Mapping[str, Any]]) -> int:
    return sum(
        1 for log in logs if log["event"] == "list and watch failed" and "leaderworkersets" in log.get("reflector", "")
    )


async def test_a_missing_lws_crd_is_one_clear_error_fails_readyz_and_heals_once_installed(
    plane_without_lws: ControlPlane,
) -> None:
    plane = plane_without_lws
    lws_crd = find_assets().lws_crd
    assert lws_crd is not None, "the LWS CRD is needed to install it later (make cluster-bins)"
    expected_line = f"[-]informers failed: resource {LWS_RESOURCE} is not served by the API server; fix: {LWS_FIX}"
    with capture_logs() as logs:
        # Three failed lists take longer than a 2 s cache-sync deadline (0.8 s, then 1.6 s or more between them):
        # the manager waits on, and says why.
        async with manager_running(plane.kubeconfig, ControllerSettings(), cache_sync_timeout=2.0) as manager:
            await eventually(lambda: _failed_lws_lists(logs) >= 3, within=30, what="three failed LWS lists")
            status, lines = await readyz(manager)
            assert status == 500
            assert expected_line in lines
            errors = [log for log in logs if log["log_level"] == "error"]
            assert [(e["event"], e["resource"], e["fix"]) for e in errors] == [
                ("resource is not served by the API server", LWS_RESOURCE, LWS_FIX)
            ]

            await asyncio.to_thread(plane.install_crds, [lws_crd])
            await eventually(lambda: manager.informers.has_synced(), within=60, what="the caches to sync")
            await eventually(lambda: readyz_ok(manager), within=30, what="/readyz to pass")
            client = manager.client
            await client.create(r.OPEN_MODELS, open_model("m"))
            await client.create(r.PLAYGROUNDS, playground("default", "pg", "m"))
            lws = await eventually(
                lambda: get_or_none(client, r.LEADER_WORKER_SETS, "pg", "default"), what="the LeaderWorkerSet"
            )
            assert lws["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "llmaz"
    assert [log["event"] for log in logs if log["log_level"] == "error"] == ["resource is not served by the API server"]
    assert any(log["event"] == "resource can be listed again" for log in logs)


async def readyz_ok(manager: Manager) -> bool:
    return (await readyz(manager))[0] == 200


async def test_a_missing_global_config_is_one_clear_error_fails_readyz_and_heals_once_created(
    control_plane: Cluster, client: Client, namespace: str, llmaz_defaults: None
) -> None:
    # The manager's namespace is the test's, which has no llmaz-global-config.
    expected = (
        f"[-]global-config failed: ConfigMap llmaz-global-config in namespace {namespace} is missing, so no "
        f"inference Service can be built: {DEPLOY_FIX}"
    )
    model = f"{namespace}-m"
    with capture_logs() as logs:
        async with manager_running(control_plane.kubeconfig, ControllerSettings(namespace=namespace)) as manager:
            await client.create(r.OPEN_MODELS, open_model(model))
            await client.create(r.PLAYGROUNDS, playground(namespace, "pg", model))
            await eventually(lambda: get_or_none(client, r.INFERENCE_SERVICES, "pg", namespace), what="the Service")
            status, lines = await eventually(lambda: readyz_failing(manager), what="/readyz to fail")
            assert status == 500
            assert expected in lines
            assert await get_or_none(client, r.LEADER_WORKER_SETS, "pg", namespace) is None

            config = await client.get(r.CONFIG_MAPS, "llmaz-global-config", "llmaz-system")
            await client.create(
                r.CONFIG_MAPS,
                {"metadata": {"name": "llmaz-global-config", "namespace": namespace}, "data": config["data"]},
            )
            await eventually(lambda: get_or_none(client, r.LEADER_WORKER_SETS, "pg", namespace), what="the LWS")
            await eventually(lambda: readyz_ok(manager), what="/readyz to pass")
    not_loaded = [log for log in logs if log["event"] == "global config not loaded"]
    assert [(log["log_level"], log["namespace"]) for log in not_loaded] == [("error", namespace)]
    assert not_loaded[0]["reason"] == expected.removeprefix("[-]global-config failed: ")
    assert [log for log in logs if log["event"] == "Reconciler error"] == []
    assert any(log["event"] == "global config loaded" for log in logs)


async def readyz_failing(manager: Manager) -> tuple[int, list[str]] | None:
    status, lines = await readyz(manager)
    return (status, lines) if any(line.startswith("[-]global-config") for line in lines) else None
