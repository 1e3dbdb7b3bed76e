"""The generated RBAC: committed files are current, every declared rule is collected, and every watch is allowed."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from llmaz.apis import resources as r
from llmaz.controllers import setup
from llmaz.controllers.setup import ControllerSettings, setup_controllers
from llmaz.manager.__main__ import add_scheduler_extender, parse_args
from llmaz.runtime import rbac
from llmaz.runtime.client import Client
from llmaz.runtime.client.config import RestConfig
from llmaz.runtime.manager import Manager
from llmaz.runtime.resource import Resource
from llmaz_dev.rbacgen import ROLE_FILES, main, render

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"
MANAGER_ROLE = next(f for f in ROLE_FILES if f.role == "manager-role")


@pytest.mark.parametrize("role_file", ROLE_FILES, ids=[f.role for f in ROLE_FILES])
def test_committed_role_files_match_the_declared_rules(role_file: object) -> None:
    path = REPO / "config" / "rbac" / role_file.directory / role_file.filename  # type: ignore[attr-defined]
    assert path.read_text() == render(role_file), f"{path} is stale: run `make manifests`"  # type: ignore[arg-type]


def test_the_generator_writes_the_managers_roles_to_dir_and_the_gateways_beside_it(tmp_path: Path) -> None:
    assert main([str(tmp_path / "rbac")]) == 0
    written = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.yaml")}
    assert written == {
        "rbac/role.yaml",
        "rbac/leader_election_role.yaml",
        "rbac/metrics_auth_role.yaml",
        "rbac/metrics_reader_role.yaml",
        "gateway/role.yaml",
    }


def _modules_declaring(name: str) -> set[str]:
    found = set()
    for path in (SRC / "llmaz").rglob("*.py"):
        tree = ast.parse(path.read_text())
        targets = [t for node in tree.body if isinstance(node, ast.Assign) for t in node.targets]
        targets += [node.target for node in tree.body if isinstance(node, ast.AnnAssign)]
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            parts = list(path.relative_to(SRC).with_suffix("").parts)
            found.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def test_every_module_declaring_rbac_rules_feeds_a_role() -> None:
    collected = {m.__name__ for f in ROLE_FILES if f.attribute == "RBAC_RULES" for m in f.sources}
    assert _modules_declaring("RBAC_RULES") == collected


def _watched_scopes(with_extender: bool = False) -> list[tuple[Resource, str | None, str | None]]:
    """(resource, namespace, field selector) of every informer the controllers' setup creates (and, if asked, the
    scheduler extender's wiring after it)."""
    manager = Manager(Client(RestConfig(host="https://127.0.0.1:1")))
    created: list[tuple[Resource, str | None, str | None]] = []
    informer_for = manager.informers.informer_for

    def recording(
        resource: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> object:
        created.append((resource, namespace, field_selector))
        return informer_for(resource, namespace, label_selector, field_selector)

    manager.informers.informer_for = recording  # type: ignore[method-assign,assignment]
    setup_controllers(manager, ControllerSettings(namespace="llmaz-system"))
    if with_extender:
        created.clear()
        add_scheduler_extender(manager, parse_args(["--scheduler-extender-bind-address=127.0.0.1:0"]))
    return created


def test_every_resource_the_controllers_watch_can_be_listed_and_watched() -> None:
    scopes = _watched_scopes()
    assert len({resource for resource, _, _ in scopes}) == 12  # the setup changed: review its RBAC_RULES
    for resource, namespace, field_selector in scopes:
        # Only the manager's own namespace is covered by its Role; anything else needs the ClusterRole.
        own = namespace == "llmaz-system"
        name = field_selector.removeprefix("metadata.name=") if field_selector else None
        rules = MANAGER_ROLE.rules()
        for verb in rbac.READ:
            assert rbac.allows(rules, resource.group, resource.plural, verb, own_namespace=own, name=name)


def test_the_inference_pools_cached_once_their_crd_is_served_can_be_listed_and_watched() -> None:
    # Their informer is requested at run time (controllers.pools), so `_watched_scopes` does not see it.
    for verb in rbac.READ:
        assert rbac.allows(
            MANAGER_ROLE.rules(), "inference.networking.k8s.io", "inferencepools", verb, own_namespace=False
        )


def test_the_watch_rules_are_declared_beside_the_watches() -> None:
    watched = {(resource.group, resource.plural) for resource, _, _ in _watched_scopes()}
    declared = {(rule.api_group, resource) for rule in setup.RBAC_RULES for resource in rule.resources}
    assert declared == watched


def test_the_scheduler_extender_s_informers_can_be_listed_and_watched() -> None:
    scopes = _watched_scopes(with_extender=True)
    assert {resource for resource, _, _ in scopes} == {r.OPEN_MODELS, r.NODES}
    for resource, _, _ in scopes:
        for verb in ("list", "watch"):
            assert rbac.allows(MANAGER_ROLE.rules(), resource.group, resource.plural, verb, own_namespace=False)
