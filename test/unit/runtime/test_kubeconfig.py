"""Kubeconfig loading: kubectl's merge rules, certificate and token sources, plugins, in-cluster, clear errors."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import ssl
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmaz.runtime.client.config import from_kubeconfig, in_cluster, load
from llmaz.runtime.client.credentials import ConfigError, TokenFile
from llmaz_dev.envtest._pki import ControlPlanePKI, write_pki
from llmaz_dev.testing import FakeClock
from llmaz_dev.testing.waiting import eventually

CREDENTIAL = {
    "apiVersion": "client.authentication.k8s.io/v1beta1",
    "kind": "ExecCredential",
    "status": {"token": "from-plugin"},
}


def write_config(
    path: Path,
    *,
    clusters: dict[str, dict[str, Any]] | None = None,
    users: dict[str, dict[str, Any]] | None = None,
    contexts: dict[str, dict[str, Any]] | None = None,
    current: str | None = None,
) -> Path:
    document: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": n, "cluster": c} for n, c in (clusters or {}).items()],
        "users": [{"name": n, "user": u} for n, u in (users or {}).items()],
        "contexts": [{"name": n, "context": c} for n, c in (contexts or {}).items()],
    }
    if current is not None:
        document["current-context"] = current
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document))
    return path


def simple(path: Path, server: str = "https://one.example:6443", **user: Any) -> Path:
    return write_config(
        path,
        clusters={"c": {"server": server}},
        users={"u": user},
        contexts={"ctx": {"cluster": "c", "user": "u"}},
        current="ctx",
    )


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(name, raising=False)


async def test_token_user(tmp_path: Path, no_env: None) -> None:
    cfg = await from_kubeconfig(simple(tmp_path / "config", server="https://one.example:6443/", token="abc"))
    assert cfg.host == "https://one.example:6443"
    assert await cfg.auth_headers() == {"Authorization": "Bearer abc"}
    assert cfg.ssl_context() is True  # nothing to configure: aiohttp's default verification


async def test_basic_auth_user(tmp_path: Path, no_env: None) -> None:
    cfg = await from_kubeconfig(simple(tmp_path / "config", username="ann", password="s3cret"))
    assert await cfg.auth_headers() == {"Authorization": "Basic " + b64(b"ann:s3cret")}


async def test_merge_rules_of_a_kubeconfig_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = write_config(
        tmp_path / "a" / "config",
        clusters={"shared": {"server": "https://first:1", "certificate-authority": "ca.crt"}},
        users={"shared": {"token": "first-token"}},
        contexts={"shared": {"cluster": "shared", "user": "shared"}},
    )
    second = write_config(
        tmp_path / "b" / "config",
        clusters={
            "shared": {"server": "https://second:2"},
            "own": {"server": "https://own:3", "certificate-authority": "../certs/ca.crt"},
        },
        users={"shared": {"token": "second-token"}, "own": {"tokenFile": "token"}},
        contexts={"shared": {"cluster": "own", "user": "own"}, "own": {"cluster": "own", "user": "own"}},
        current="shared",
    )
    third = write_config(tmp_path / "c" / "config", current="own")
    (tmp_path / "b" / "token").write_text("file-token\n")
    ca_pem = write_pki(tmp_path / "pki").ca_cert.read_bytes()
    (tmp_path / "a" / "ca.crt").write_bytes(ca_pem)
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs" / "ca.crt").write_bytes(ca_pem)
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(tmp_path / "missing"), str(first), str(second), str(third)]))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)

    # current-context: the first file that sets it (the second); names: the first file that defines them.
    cfg = await from_kubeconfig()
    assert cfg.host == "https://first:1"
    assert cfg.tls.ca_file == str(tmp_path / "a" / "ca.crt")  # relative to the file that holds it
    assert await cfg.auth_headers() == {"Authorization": "Bearer first-token"}

    own = await from_kubeconfig(context="own")
    assert own.host == "https://own:3"
    assert own.tls.ca_file == str(tmp_path / "b" / ".." / "certs" / "ca.crt")
    assert await own.auth_headers() == {"Authorization": "Bearer file-token"}


async def test_explicit_path_is_the_only_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = simple(tmp_path / "other", server="https://other:1", token="x")
    monkeypatch.setenv("KUBECONFIG", str(other))
    cfg = await load(simple(tmp_path / "explicit", server="https://explicit:1", token="y"))
    assert cfg.host == "https://explicit:1"


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"clusters": [{"name": "c", "cluster": {"server": "https://x"}}]}, "no current-context"),
        ({"current-context": "nope"}, "context 'nope' not found"),
        ({"contexts": [{"name": "x", "context": {"cluster": "gone"}}], "current-context": "x"}, "cluster 'gone'"),
        (
            {
                "clusters": [{"name": "c", "cluster": {"server": "https://x"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "gone"}}],
                "current-context": "x",
            },
            "user 'gone'",
        ),
        (
            {
                "clusters": [{"name": "c", "cluster": {}}],
                "contexts": [{"name": "x", "context": {"cluster": "c"}}],
                "current-context": "x",
            },
            "set clusters[].cluster.server",
        ),
        (
            {
                "clusters": [{"name": "c", "cluster": {"server": "https://x", "certificate-authority-data": "%%"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c"}}],
                "current-context": "x",
            },
            "cluster.certificate-authority-data: not valid base64",
        ),
        ({"clusters": [{"cluster": {"server": "https://x"}}]}, "clusters[0] needs a name"),
        ("- just\n- a list\n", "expected a mapping"),
        ("clusters: [unclosed\n", "not valid YAML"),
    ],
)
async def test_errors_name_the_field(tmp_path: Path, no_env: None, document: Any, message: str) -> None:
    path = tmp_path / "config"
    path.write_text(document if isinstance(document, str) else yaml.safe_dump(document))
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")):
        await from_kubeconfig(path)


async def test_missing_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        await from_kubeconfig(tmp_path / "nope")
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b")]))
    with pytest.raises(ConfigError, match="none of the KUBECONFIG files exist"):
        await from_kubeconfig()


async def test_token_file_is_reread_after_the_period_and_survives_a_bad_read(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("one")
    clock = FakeClock()
    source = TokenFile(path, period=60, clock=clock)
    assert await source.headers() == {"Authorization": "Bearer one"}
    path.write_text("two")
    clock.step(59)
    assert await source.headers() == {"Authorization": "Bearer one"}  # cached within the period
    clock.step(1)
    assert await source.headers() == {"Authorization": "Bearer two"}
    path.unlink()  # a rotation caught between remove and write
    clock.step(60)
    assert await source.headers() == {"Authorization": "Bearer two"}
    path.write_text("")
    clock.step(60)
    assert await source.headers() == {"Authorization": "Bearer two"}


def test_token_file_never_read_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"token file .*/missing"):
        TokenFile(tmp_path / "missing").refresh()
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ConfigError, match="is empty"):
        TokenFile(tmp_path / "empty").refresh()


async def handshake(pki: ControlPlanePKI, client_context: ssl.SSLContext, server_name: str | None) -> str:
    """A mutual-TLS handshake with a loopback server using the control-plane PKI; returns the client's CN."""
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca_cert))
    server_context.load_cert_chain(str(pki.serving_cert), str(pki.serving_key))
    server_context.verify_mode = ssl.CERT_REQUIRED
    peers: list[str] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        cert = writer.get_extra_info("peercert")
        peers.append(dict(item[0] for item in cert["subject"])["commonName"])
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_context)
    port = server.sockets[0].getsockname()[1]
    async with server:
        _, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_context, server_hostname=server_name or "127.0.0.1"
        )
        writer.close()
        await eventually(lambda: peers, within=5, what="the server to see the client's certificate")
    return peers[0]


@pytest.mark.parametrize("inline", [False, True], ids=["files", "data"])
async def test_client_certificate_and_ca(
    tmp_path: Path, no_env: None, monkeypatch: pytest.MonkeyPatch, inline: bool
) -> None:
    pki = write_pki(tmp_path / "pki")
    if inline:
        cluster = {"server": "https://127.0.0.1:1", "certificate-authority-data": b64(pki.ca_cert.read_bytes())}
        user = {
            "client-certificate-data": b64(pki.admin_cert.read_bytes()),
            "client-key-data": b64(pki.admin_key.read_bytes()),
        }
    else:
        cluster = {"server": "https://127.0.0.1:1", "certificate-authority": "pki/ca.crt"}
        user = {"client-certificate": str(pki.admin_cert), "client-key": str(pki.admin_key)}
    path = write_config(
        tmp_path / "config",
        clusters={"c": {**cluster, "tls-server-name": "kubernetes.default.svc"}},
        users={"u": user},
        contexts={"x": {"cluster": "c", "user": "u"}},
        current="x",
    )
    if not inline:
        (tmp_path / "pki" / "ca.crt").write_bytes(pki.ca_cert.read_bytes())
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    cfg = await from_kubeconfig(path)
    context = cfg.ssl_context()
    assert isinstance(context, ssl.SSLContext)
    assert cfg.tls_server_name == "kubernetes.default.svc"
    assert await handshake(pki, context, cfg.tls_server_name) == "llmaz-envtest-admin"
    # In-memory keys pass through a private scratch directory that is gone once loaded.
    assert list(scratch.iterdir()) == []


async def test_data_overrides_the_file_of_the_same_certificate(tmp_path: Path, no_env: None) -> None:
    pki = write_pki(tmp_path / "pki")
    path = write_config(
        tmp_path / "config",
        clusters={
            "c": {
                "server": "https://127.0.0.1:1",
                "certificate-authority": "missing.crt",
                "certificate-authority-data": b64(pki.ca_cert.read_bytes()),
            }
        },
        contexts={"x": {"cluster": "c"}},
        current="x",
    )
    cfg = await from_kubeconfig(path)
    assert cfg.tls.ca_file is None
    assert isinstance(cfg.ssl_context(), ssl.SSLContext)


async def test_client_certificate_without_key_is_an_error(tmp_path: Path, no_env: None) -> None:
    pki = write_pki(tmp_path / "pki")
    path = simple(tmp_path / "config", **{"client-certificate-data": b64(pki.admin_cert.read_bytes())})
    with pytest.raises(ConfigError, match="client-key or client-key-data"):
        await from_kubeconfig(path)


async def test_insecure_skip_tls_verify(tmp_path: Path, no_env: None) -> None:
    path = write_config(
        tmp_path / "config",
        clusters={"c": {"server": "https://x:1", "insecure-skip-tls-verify": True}},
        contexts={"x": {"cluster": "c"}},
        current="x",
    )
    context = (await from_kubeconfig(path)).ssl_context()
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_NONE
    assert not context.check_hostname


async def test_exec_plugin_runs_through_kubernetes_asyncio(tmp_path: Path, no_env: None) -> None:
    plugin = tmp_path / "plugin.py"
    plugin.write_text(f"import json\nprint(json.dumps({CREDENTIAL!r}))\n")
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    exec_config = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "command": sys.executable,
        "args": [str(plugin)],
        "interactiveMode": "Never",
    }
    cfg = await from_kubeconfig(simple(tmp_path / "config", server="https://plugin:443", exec=exec_config))
    assert cfg.host == "https://plugin:443"
    assert await cfg.auth_headers() == {"Authorization": "Bearer from-plugin"}


def service_account(directory: Path, token: str = "sa-token") -> Path:
    pki = write_pki(directory.parent / "pki")
    directory.mkdir(parents=True)
    (directory / "token").write_text(token)
    (directory / "ca.crt").write_bytes(pki.ca_cert.read_bytes())
    return directory


async def test_in_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sa = service_account(tmp_path / "sa")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    cfg = in_cluster(sa)
    assert cfg.host == "https://10.96.0.1:443"
    assert cfg.tls.ca_file == str(sa / "ca.crt")
    assert await cfg.auth_headers() == {"Authorization": "Bearer sa-token"}
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    assert in_cluster(sa).host == "https://[fd00::1]:443"


def test_in_cluster_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    with pytest.raises(ConfigError, match="KUBERNETES_SERVICE_PORT must both be set"):
        in_cluster(tmp_path)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(ConfigError, match="token file"):
        in_cluster(tmp_path)
    (tmp_path / "token").write_text("t")
    with pytest.raises(ConfigError, match=r"ca\.crt does not exist"):
        in_cluster(tmp_path)


def test_loading_a_kubeconfig_does_not_import_the_generated_client(tmp_path: Path) -> None:
    # The generated API client is ~40 MB of a manager's memory; only credential plugins may pull it in.
    path = simple(tmp_path / "config", token="abc")
    code = (
        "import asyncio, sys\n"
        "from llmaz.runtime.client.config import from_kubeconfig\n"
        f"cfg = asyncio.run(from_kubeconfig({str(path)!r}))\n"
        "print(cfg.host, 'kubernetes_asyncio' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["https://one.example:6443", "False"]


async def test_unreadable_certificates_are_errors_that_name_them(tmp_path: Path, no_env: None) -> None:
    missing_ca = write_config(
        tmp_path / "a",
        clusters={"c": {"server": "https://x:1", "certificate-authority": "/nonexistent/ca.crt"}},
        contexts={"x": {"cluster": "c"}},
        current="x",
    )
    with pytest.raises(ConfigError, match=r"cluster CA /nonexistent/ca\.crt"):
        await from_kubeconfig(missing_ca)  # at load time, not on the first request
    not_pem = write_config(
        tmp_path / "b",
        clusters={"c": {"server": "https://x:1", "certificate-authority-data": b64(b"not a certificate")}},
        contexts={"x": {"cluster": "c"}},
        current="x",
    )
    with pytest.raises(ConfigError, match="cluster CA certificate-authority-data"):
        await from_kubeconfig(not_pem)
    bad_client = simple(tmp_path / "c", **{"client-certificate-data": b64(b"junk"), "client-key-data": b64(b"junk")})
    with pytest.raises(ConfigError, match="client certificate client-certificate-data"):
        await from_kubeconfig(bad_client)


def test_a_token_file_read_at_load_is_not_read_again_within_the_period(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("at-load")
    clock = FakeClock()
    source = TokenFile(path, period=60, clock=clock)
    source.refresh()  # what in_cluster does to fail early
    path.write_text("rotated")
    assert asyncio.run(source.headers()) == {"Authorization": "Bearer at-load"}
    clock.step(60)
    assert asyncio.run(source.headers()) == {"Authorization": "Bearer rotated"}


async def test_the_tls_context_built_at_load_is_the_one_the_transport_gets(tmp_path: Path, no_env: None) -> None:
    pki = write_pki(tmp_path / "pki")
    path = write_config(
        tmp_path / "config",
        clusters={"c": {"server": "https://127.0.0.1:1", "certificate-authority": str(pki.ca_cert)}},
        contexts={"x": {"cluster": "c"}},
        current="x",
    )
    cfg = await from_kubeconfig(path)
    assert cfg.ssl_context() is cfg.ssl_context()


async def test_a_plugin_user_with_an_unreadable_ca_fails_at_load(tmp_path: Path, no_env: None) -> None:
    exec_config = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "command": sys.executable,
        "args": ["-c", f"print({json.dumps(json.dumps(CREDENTIAL))})"],
        "interactiveMode": "Never",
    }
    path = write_config(
        tmp_path / "config",
        clusters={"c": {"server": "https://x:1", "certificate-authority-data": b64(b"not a certificate")}},
        users={"u": {"exec": exec_config}},
        contexts={"x": {"cluster": "c", "user": "u"}},
        current="x",
    )
    with pytest.raises(ConfigError, match="cluster CA"):
        await from_kubeconfig(path)
