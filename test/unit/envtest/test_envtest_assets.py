"""Where llmaz_dev.envtest finds its binaries and CRDs, without starting anything."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from llmaz_dev.envtest import AssetsMissingError, ExistingCluster, find_assets, kubernetes_version
from llmaz_dev.envtest._assets import cache_root, makefile_version, module_version, source_root, tool_path
from llmaz_dev.envtest._cluster import ClusterOperationError
from llmaz_dev.envtest._crds import load_crds

REPO = Path(__file__).resolve().parents[3]


def fake_binaries(directory: Path, *names: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        (directory / name).write_text("#!/bin/sh\n")
        (directory / name).chmod(0o755)
    return directory


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LLMAZ_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.delenv("LLMAZ_LWS_CRD", raising=False)
    return tmp_path / "cache"


def test_module_version_reads_block_and_single_line_requires(tmp_path: Path) -> None:
    go_mod = tmp_path / "go.mod"
    go_mod.write_text(
        "module x\n\nrequire (\n\tk8s.io/kubernetes v1.35.4\n)\nrequire go.etcd.io/etcd/server/v3 v3.6.6\n"
    )

    assert module_version(go_mod, "k8s.io/kubernetes") == "v1.35.4"
    assert module_version(go_mod, "go.etcd.io/etcd/server/v3") == "v3.6.6"
    with pytest.raises(AssetsMissingError):
        module_version(go_mod, "sigs.k8s.io/lws")


def test_build_script_and_driver_agree_on_the_binary_directory(empty_cache: Path) -> None:
    printed = subprocess.run(
        [REPO / "hack/cluster/build.sh", "--print"],
        capture_output=True,
        text=True,
        check=True,
        env=os.environ,
    ).stdout.strip()

    assert source_root() == REPO
    assert Path(printed) == cache_root() / "bin" / f"k8s-{kubernetes_version()}"


def test_kubebuilder_assets_with_apiserver_and_etcd_win_over_the_build_cache(
    empty_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_binaries(empty_cache / "bin" / f"k8s-{kubernetes_version()}", "kube-apiserver", "etcd", "kubectl")
    envtest = fake_binaries(tmp_path / "envtest", "kube-apiserver", "etcd")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(envtest))

    assets = find_assets()

    assert (assets.kube_apiserver, assets.etcd) == (envtest / "kube-apiserver", envtest / "etcd")
    assert assets.kubectl == empty_cache / "bin" / f"k8s-{kubernetes_version()}" / "kubectl"


def test_incomplete_kubebuilder_assets_are_ignored(
    empty_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = fake_binaries(empty_cache / "bin" / f"k8s-{kubernetes_version()}", "kube-apiserver", "etcd")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(fake_binaries(tmp_path / "envtest", "kube-apiserver")))

    assert find_assets().etcd == built / "etcd"


def test_missing_binaries_are_reported_with_the_command_that_builds_them(empty_cache: Path) -> None:
    with pytest.raises(AssetsMissingError, match="make cluster-bins"):
        find_assets()


def test_load_crds_keeps_only_custom_resource_definitions(tmp_path: Path) -> None:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "a.b"},
    }
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({"resources": ["a.yaml"]}))
    (tmp_path / "a.yaml").write_text(yaml.safe_dump_all([crd, {"kind": "ConfigMap"}]))

    assert load_crds([tmp_path]) == [crd]


def test_existing_cluster_writes_embedded_credentials_to_files(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "current-context": "kind",
                "contexts": [{"name": "kind", "context": {"cluster": "c", "user": "u"}}],
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {"server": "https://127.0.0.1:6443", "certificate-authority-data": "Q0E="},
                    }
                ],
                "users": [{"name": "u", "user": {"client-certificate-data": "Q0VSVA==", "client-key": "key.pem"}}],
            }
        )
    )

    cluster = ExistingCluster(kubeconfig)
    try:
        assert cluster.server == "https://127.0.0.1:6443"
        assert (cluster.ca_file.read_text(), cluster.admin_cert_file.read_text()) == ("CA", "CERT")
        assert cluster.admin_key_file == tmp_path / "key.pem"
        with pytest.raises(ClusterOperationError, match="cannot restart"):
            cluster.restart_apiserver()
        with pytest.raises(ClusterOperationError, match="cannot compact"):
            cluster.compact_etcd()
    finally:
        cluster.close()
    assert not cluster.scratch_dir.exists()


@pytest.mark.parametrize("tool", ["kustomize", "helm"])
def test_tools_come_from_the_cache_at_the_makefiles_version_unless_their_variable_names_one(
    tool: str, empty_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(tool.upper(), raising=False)
    version = next(
        line.split(":=")[1].strip()
        for line in (REPO / "Makefile").read_text().splitlines()
        if line.startswith(f"{tool.upper()}_VERSION :=")
    )
    with pytest.raises(AssetsMissingError, match=f"run `make {tool}`"):
        tool_path(tool)

    cached = fake_binaries(empty_cache / "bin" / "tools", f"{tool}-{version}") / f"{tool}-{version}"
    assert tool_path(tool) == cached

    explicit = fake_binaries(tmp_path / "elsewhere", tool) / tool
    monkeypatch.setenv(tool.upper(), str(explicit))
    assert tool_path(tool) == explicit


@pytest.mark.parametrize("variable", ["KUSTOMIZE", "HELM", "ENVOY_GATEWAY", "ENVOY_AI_GATEWAY"])
def test_makefile_version_is_the_makefiles_pin(variable: str) -> None:
    pins = [line for line in (REPO / "Makefile").read_text().splitlines() if line.startswith(f"{variable}_VERSION :=")]
    assert pins == [f"{variable}_VERSION := {makefile_version(variable)}"]
    with pytest.raises(AssetsMissingError, match="sets no NOT_PINNED_VERSION"):
        makefile_version("NOT_PINNED")
