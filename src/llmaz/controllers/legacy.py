"""Once per leadership: put the managed-by label on Playground HPAs created before children carried it.

The manager caches only the HPAs labelled `app.kubernetes.io/managed-by=llmaz` (see `caches`). Every other child
gets the label from its owner's first reconcile, which applies it; an HPA is applied only while its Playground
wants one. An unlabelled HPA of a Playground that no longer wants one (llmaz never removed them when
`elasticConfig` went) would be invisible to the cache and keep scaling the Playground. This pass lists the HPAs
without the label, a page at a time (so it never holds the cluster's HPAs at once), and merge-patches the label
onto those whose controller owner is a Playground: the cache then sees them, and the Playground's reconcile
removes the unwanted ones as before.

It runs when this replica starts leading, once; a failure is logged and not retried (the HPAs of Playgrounds
that still want one are relabelled by their apply anyway).
"""

from __future__ import annotations

from llmaz.apis import constants as c
from llmaz.apis import resources as r
from llmaz.controllers.common import controller_uid
from llmaz.runtime.cache import Obj
from llmaz.runtime.client import Client, NotFound, PatchType
from llmaz.runtime.log import get_logger
from llmaz.runtime.rbac import allow

RBAC_RULES = (allow(r.HORIZONTAL_POD_AUTOSCALERS, "list", "patch"),)

PAGE_SIZE = 100
_log = get_logger("llmaz.controllers.legacy")


def _owned_by_playground(hpa: Obj) -> bool:
    for ref in (hpa.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == "Playground":
            return str(ref.get("apiVersion", "")).startswith(f"{c.INFERENCE_GROUP}/")
    return False


class LegacyHpaRelabeler:
    """A leader-elected Runnable: relabels once, then returns."""

    needs_leader_election = True

    def __init__(self, client: Client) -> None:
        self._client = client

    async def run(self) -> None:
        try:
            relabelled = await self.relabel()
        except Exception as err:
            _log.warning("could not relabel HPAs created before the managed-by label", error=str(err))
        else:
            if relabelled:
                _log.info("relabelled HPAs created before the managed-by label", count=relabelled)

    async def relabel(self) -> int:
        """Label every unlabelled Playground HPA; the number labelled."""
        count = 0
        pages = self._client.list_pages(
            r.HORIZONTAL_POD_AUTOSCALERS, label_selector=f"!{c.MANAGED_BY_LABEL}", limit=PAGE_SIZE
        )
        async for page in pages:
            for hpa in page.items:
                if _owned_by_playground(hpa) and controller_uid(hpa) and await self._label(hpa):
                    count += 1
        return count

    async def _label(self, hpa: Obj) -> bool:
        meta = hpa.get("metadata") or {}
        patch = {"metadata": {"labels": {c.MANAGED_BY_LABEL: c.MANAGED_BY}}}
        try:
            await self._client.patch(
                r.HORIZONTAL_POD_AUTOSCALERS,
                str(meta.get("name")),
                patch,
                meta.get("namespace"),
                patch_type=PatchType.MERGE,
                field_manager=c.FIELD_MANAGER,
            )
        except NotFound:
            return False
        return True
