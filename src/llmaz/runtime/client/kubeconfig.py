"""Kubeconfig files read into connection settings, with kubectl's merge rules.

Read here: a `KUBECONFIG` list of files merged as kubectl merges them (the first file to define a cluster, user or
context name wins; the first `current-context` wins; a missing file in the list is skipped; relative paths are
relative to the file that holds them), the server, the CA (file or data), `insecure-skip-tls-verify`,
`tls-server-name`, client certificates (file or data), bearer tokens (inline or `tokenFile`, re-read as it rotates)
and basic auth. `proxy-url` is not supported.

Credential plugins (`exec`, `auth-provider`) run through kubernetes_asyncio's loader, imported only for them: it
pulls in the whole generated API client (tens of MB and about a second of start-up) that nothing else here uses.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from llmaz.runtime.client.credentials import (
    ANONYMOUS,
    BasicAuth,
    ConfigError,
    Credentials,
    PluginCredentials,
    StaticToken,
    TLSConfig,
    TokenFile,
    decode_pem_data,
)

DEFAULT_PATH = Path("~/.kube/config")


@dataclass(frozen=True, slots=True)
class Entry:
    """A named cluster, user or context, with the directory its relative paths are relative to."""

    body: dict[str, Any]
    base: Path

    def path(self, key: str) -> str | None:
        value = self.body.get(key)
        if not value:
            return None
        return str(self.base / os.path.expanduser(str(value)))

    def data(self, key: str, name: str) -> bytes | None:
        value = self.body.get(key)
        return decode_pem_data(str(value), f"{name}.{key}") if value else None


@dataclass(slots=True)
class Kubeconfig:
    """The merge of one or more kubeconfig files."""

    files: list[Path]
    clusters: dict[str, Entry] = field(default_factory=dict)
    users: dict[str, Entry] = field(default_factory=dict)
    contexts: dict[str, Entry] = field(default_factory=dict)
    current_context: str = ""

    def merge_file(self, path: Path) -> None:
        try:
            document = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"kubeconfig {path}: not valid YAML: {exc}") from exc
        if not isinstance(document, dict):
            raise ConfigError(f"kubeconfig {path}: expected a mapping (kind: Config), got {type(document).__name__}")
        base = path.parent
        for section, key, target in (
            ("clusters", "cluster", self.clusters),
            ("users", "user", self.users),
            ("contexts", "context", self.contexts),
        ):
            for index, item in enumerate(document.get(section) or []):
                if not isinstance(item, dict) or not item.get("name"):
                    raise ConfigError(f"kubeconfig {path}: {section}[{index}] needs a name")
                body = item.get(key) or {}
                if not isinstance(body, dict):
                    raise ConfigError(f"kubeconfig {path}: {section}[{index}].{key} must be a mapping")
                target.setdefault(str(item["name"]), Entry(body, base))
        if not self.current_context and document.get("current-context"):
            self.current_context = str(document["current-context"])

    def select(self, context: str | None) -> tuple[str, Entry, Entry]:
        """The context named (or the current one) with its cluster and user (empty when it names none)."""
        name = context or self.current_context
        where = ", ".join(str(f) for f in self.files)
        if not name:
            raise ConfigError(f"kubeconfig {where}: no current-context; set one or choose a context by name")
        ctx = self.contexts.get(name)
        if ctx is None:
            raise ConfigError(f"kubeconfig {where}: context {name!r} not found (have: {sorted(self.contexts)})")
        cluster_name = str(ctx.body.get("cluster") or "")
        cluster = self.clusters.get(cluster_name)
        if cluster is None:
            raise ConfigError(f"kubeconfig {where}: context {name!r} names cluster {cluster_name!r}, not defined")
        user_name = str(ctx.body.get("user") or "")
        if not user_name:
            return name, cluster, Entry({}, cluster.base)  # anonymous
        user = self.users.get(user_name)
        if user is None:
            raise ConfigError(f"kubeconfig {where}: context {name!r} names user {user_name!r}, not defined")
        return name, cluster, user


def kubeconfig_files(path: str | os.PathLike[str] | None) -> tuple[list[Path], bool]:
    """The files to read and whether they were named explicitly (a missing explicit file is an error)."""
    if path is not None:
        return [Path(os.path.expanduser(str(path)))], True
    env = os.environ.get("KUBECONFIG", "")
    if env:
        return [Path(os.path.expanduser(p)) for p in env.split(os.pathsep) if p], False
    return [DEFAULT_PATH.expanduser()], True


def read(path: str | os.PathLike[str] | None = None) -> Kubeconfig:
    files, explicit = kubeconfig_files(path)
    config = Kubeconfig(files=files)
    found = False
    for file in files:
        if not file.exists():
            if explicit:
                raise ConfigError(f"kubeconfig {file} does not exist; pass --kubeconfig or set KUBECONFIG")
            continue
        config.merge_file(file)
        found = True
    if not found:
        raise ConfigError(f"none of the KUBECONFIG files exist: {os.environ.get('KUBECONFIG', '')}")
    return config


def cluster_settings(cluster: Entry, where: str) -> tuple[str, TLSConfig]:
    body = cluster.body
    server = str(body.get("server") or "").rstrip("/")
    if not server:
        raise ConfigError(f"{where}: the cluster has no server; set clusters[].cluster.server")
    ca_data = cluster.data("certificate-authority-data", "cluster")
    tls = TLSConfig(
        # As in kubectl, `*-data` overrides the file of the same certificate.
        ca_file=None if ca_data else cluster.path("certificate-authority"),
        ca_data=ca_data,
        insecure=bool(body.get("insecure-skip-tls-verify")),
        server_name=str(body["tls-server-name"]) if body.get("tls-server-name") else None,
    )
    return server, tls


def user_settings(user: Entry, tls: TLSConfig) -> tuple[TLSConfig, Credentials]:
    body = user.body
    cert_data = user.data("client-certificate-data", "user")
    key_data = user.data("client-key-data", "user")
    tls = dataclasses.replace(
        tls,
        cert_file=None if cert_data else user.path("client-certificate"),
        cert_data=cert_data,
        key_file=None if key_data else user.path("client-key"),
        key_data=key_data,
    )
    credentials: Credentials = ANONYMOUS
    if body.get("token"):
        credentials = StaticToken(str(body["token"]))
    elif body.get("tokenFile"):
        credentials = TokenFile(user.path("tokenFile") or "")
    elif body.get("username") or body.get("password"):
        credentials = BasicAuth(str(body.get("username") or ""), str(body.get("password") or ""))
    return tls, credentials


def needs_plugin(user: Entry) -> bool:
    return bool(user.body.get("exec") or user.body.get("auth-provider"))


async def plugin_settings(
    path: str | os.PathLike[str] | None, context: str
) -> tuple[str, TLSConfig, PluginCredentials]:
    """Run kubernetes_asyncio's loader for a user with a credential plugin."""
    from kubernetes_asyncio.client import Configuration
    from kubernetes_asyncio.config import kube_config

    cfg = Configuration()
    config_file = str(path) if path is not None else os.environ.get("KUBECONFIG") or None
    await kube_config.load_kube_config(
        config_file=config_file, context=context, client_configuration=cfg, persist_config=False
    )
    tls = TLSConfig(
        ca_file=cfg.ssl_ca_cert,
        cert_file=cfg.cert_file,
        key_file=cfg.key_file,
        insecure=not cfg.verify_ssl,
        server_name=getattr(cfg, "tls_server_name", None),
    )
    return str(cfg.host).rstrip("/"), tls, PluginCredentials(cfg)
