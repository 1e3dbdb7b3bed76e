"""Where the API server is and how to authenticate, loaded with kubernetes_asyncio's config loaders.

Only kubernetes_asyncio's configuration loading is used (kubeconfig files, in-cluster service account); the
transport is our own aiohttp session. Loaders are always given a private `Configuration`, so nothing here
installs a process-wide default.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kubernetes_asyncio.client import Configuration
from kubernetes_asyncio.config import incluster_config, kube_config

_SA_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


@dataclass(slots=True)
class RestConfig:
    """Connection settings for `Client`.

    `qps`/`burst` configure the client-side token buckets, one per resource as controller-runtime's one REST
    client per kind (default 50 qps, burst 100 each: generous, because API Priority and Fairness on the server
    is the real protection; client-go's own default of 5/10 throttles a busy controller). A single bucket for
    all kinds made a converging manager wait on its own limiter while the API server idled (bench/README.md).
    `qps <= 0` disables client-side limiting. `timeout` bounds every non-watch request
    (default 30 s); watches are bounded by their server-side timeoutSeconds plus `watch_timeout_margin`.
    """

    host: str
    configuration: Any = None  # kubernetes_asyncio Configuration: holds credentials, refreshes tokens
    qps: float = 50.0
    burst: int = 100
    timeout: float = 30.0
    watch_timeout_margin: float = 30.0
    # No bytes on an open watch for this long means a half-open connection (the server sends bookmarks about
    # every minute), so the watch is ended and re-opened from the last resourceVersion.
    watch_inactivity_timeout: float = 70.0
    # Retries of 429 / Retry-After responses before the error is raised.
    max_retries: int = 5
    max_retry_after: float = 10.0
    user_agent: str = "llmaz"
    extra_headers: dict[str, str] = field(default_factory=dict)

    @property
    def host_label(self) -> str:
        """host:port, the `host` label of the REST client metrics."""
        return urlsplit(self.host).netloc or self.host

    def ssl_context(self) -> ssl.SSLContext | bool:
        cfg = self.configuration
        if cfg is None:
            return True  # aiohttp's default verification (or plain HTTP, where it is unused)
        ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
        if cfg.cert_file:
            ctx.load_cert_chain(cfg.cert_file, keyfile=cfg.key_file)
        if not cfg.verify_ssl:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx

    @property
    def tls_server_name(self) -> str | None:
        return getattr(self.configuration, "tls_server_name", None) if self.configuration else None

    async def auth_headers(self) -> dict[str, str]:
        """The Authorization header for the next request; re-read each time so refreshed tokens apply."""
        cfg = self.configuration
        if cfg is None:
            return {}
        settings = await cfg.auth_settings()
        bearer = settings.get("BearerToken")
        if bearer and bearer.get("value"):
            return {"Authorization": str(bearer["value"])}
        if cfg.username or cfg.password:
            return {"Authorization": str(cfg.get_basic_auth_token())}
        return {}


async def from_kubeconfig(path: str | os.PathLike[str] | None = None, context: str | None = None) -> RestConfig:
    """Load a kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)."""
    cfg = Configuration()
    config_file = str(path) if path is not None else os.environ.get("KUBECONFIG") or None
    await kube_config.load_kube_config(
        config_file=config_file, context=context, client_configuration=cfg, persist_config=False
    )
    return RestConfig(host=str(cfg.host), configuration=cfg)


def in_cluster() -> RestConfig:
    """The pod's service account: token (re-read as it rotates), CA and KUBERNETES_SERVICE_HOST/PORT."""
    cfg = Configuration()
    incluster_config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    return RestConfig(host=str(cfg.host), configuration=cfg)


async def load(kubeconfig: str | os.PathLike[str] | None = None, context: str | None = None) -> RestConfig:
    """An explicit kubeconfig if given, else in-cluster when running in a pod, else the default kubeconfig."""
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
        return in_cluster()
    return await from_kubeconfig(kubeconfig, context)


def in_cluster_namespace(default: str = "default") -> str:
    """The namespace of this pod's service account, or `default` outside a cluster."""
    try:
        return _SA_NAMESPACE_FILE.read_text().strip() or default
    except OSError:
        return default
