"""The global ConfigMap (`llmaz-global-config` in the manager's namespace): settings kept current, and its absence
said once, clearly.

Without valid settings no inference Service can be built, and llmaz only said so in every Service's reconcile error.
Here:

- `GlobalConfig` is the ConfigMap informer's handler: it keeps `SettingsHolder` current (a bad edit is logged and the
  last good settings kept; a deletion keeps them too, with a warning saying how to restore it).
- Once the informer's first list is in, and after every change, it checks whether settings are loaded. When they
  are not (no ConfigMap, or an invalid one) it logs one error naming the ConfigMap, its namespace and the fix; the
  same condition is not logged again, and an info line says when settings load.
- `check` is the /readyz check "global-config": it fails with the same text while no settings are loaded.

Services reconciled meanwhile wait quietly: the ConfigMap watch re-enqueues every Service when the settings arrive.
"""

from __future__ import annotations

from llmaz.apis import constants as c
from llmaz.controllers.settings import SettingsError, SettingsHolder
from llmaz.runtime.cache import DeletedFinalStateUnknown, Informer, Obj
from llmaz.runtime.log import get_logger
from llmaz.runtime.server.healthz import CheckFailed

DEPLOY_FIX = (
    "apply llmaz's config/default (`make deploy`, or `kubectl apply --server-side -k config/default`), which "
    f"installs a valid {c.GLOBAL_CONFIG_NAME}, or create it with key {c.GLOBAL_CONFIG_DATA_KEY} (see README.md)"
)

_log = get_logger("llmaz.controllers.globalconfig")


class GlobalConfig:
    """Informer handler, readiness check and a Runnable (not leader-elected: every replica reports)."""

    needs_leader_election = False

    def __init__(self, settings: SettingsHolder, namespace: str, informer: Informer) -> None:
        self._settings = settings
        self._namespace = namespace
        self._informer = informer
        self._reported: str | None = None
        self._fields = {"configmap": c.GLOBAL_CONFIG_NAME, "namespace": namespace}

    # Handler (registered on the ConfigMap informer before the Service controller's, so settings are current when
    # Services are enqueued).

    def on_add(self, obj: Obj, is_initial_list: bool) -> None:
        self._load(obj)

    def on_update(self, old: Obj, new: Obj) -> None:
        self._load(new)

    def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        self._settings.forget()
        if self._settings.current is not None:
            _log.warning("global config deleted, keeping the last settings", fix=DEPLOY_FIX, **self._fields)
        self._report()

    def _load(self, obj: Obj) -> None:
        try:
            if self._settings.update(obj):
                _log.info("global config updated", settings=str(self._settings.current), **self._fields)
        except SettingsError as err:
            if self._settings.current is not None:
                _log.error("invalid global config, keeping the last settings", error=str(err), **self._fields)
        self._report()

    # Reporting

    def problem(self) -> str | None:
        """Why no settings are loaded, with the fix; None when they are (or before the first list is in)."""
        if self._settings.current is not None or not self._informer.has_synced():
            return None
        where = f"ConfigMap {c.GLOBAL_CONFIG_NAME} in namespace {self._namespace}"
        error = self._settings.last_error
        if error and "deleted" not in error:
            return f"{where} is invalid ({error}): fix its {c.GLOBAL_CONFIG_DATA_KEY}"
        return f"{where} is missing, so no inference Service can be built: {DEPLOY_FIX}"

    def check(self) -> None:
        problem = self.problem()
        if problem:
            raise CheckFailed(problem)

    def _report(self) -> None:
        problem = self.problem()
        if problem == self._reported:
            return
        if problem:
            _log.error("global config not loaded", reason=problem, **self._fields)
        elif self._reported:
            _log.info("global config loaded", **self._fields)
        self._reported = problem

    async def run(self) -> None:
        """Report once the ConfigMap informer has synced (an absent ConfigMap brings no event), then return."""
        await self._informer.wait_for_sync()
        self._report()
