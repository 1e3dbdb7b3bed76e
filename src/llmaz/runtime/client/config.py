"""Where the API server is and how to authenticate: a kubeconfig file or the pod's service account.

Kubeconfig parsing lives in `kubeconfig`, TLS material and per-request credentials in `credentials`; the transport
is our own aiohttp session. Nothing here installs a process-wide default.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from llmaz.runtime.client import kubeconfig as _kubeconfig
from llmaz.runtime.client.credentials import ANONYMOUS, ConfigError, Credentials, TLSConfig, TokenFile

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
_SA_NAMESPACE_FILE = SERVICE_ACCOUNT_DIR / "namespace"


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
    tls: TLSConfig = field(default_factory=TLSConfig)
    credentials: Credentials = ANONYMOUS
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
    _ssl_context: ssl.SSLContext | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def host_label(self) -> str:
        """host:port, the `host` label of the REST client metrics."""
        return urlsplit(self.host).netloc or self.host

    def ssl_context(self) -> ssl.SSLContext | bool:
        """Built once: the loaders build it to check the certificates, the transport then reuses it."""
        if self.tls.is_default:
            return True  # aiohttp's default verification (or plain HTTP, where it is unused)
        if self._ssl_context is None:
            self._ssl_context = self.tls.ssl_context()
        return self._ssl_context

    @property
    def tls_server_name(self) -> str | None:
        return self.tls.server_name

    async def auth_headers(self) -> dict[str, str]:
        """The Authorization header for the next request; asked each time so rotated tokens apply."""
        return await self.credentials.headers()


async def from_kubeconfig(path: str | os.PathLike[str] | None = None, context: str | None = None) -> RestConfig:
    """Load a kubeconfig file (default: the $KUBECONFIG list, then ~/.kube/config); merge rules in `kubeconfig`."""
    merged = _kubeconfig.read(path)
    name, cluster, user = merged.select(context)
    config: RestConfig
    if _kubeconfig.needs_plugin(user):
        host, tls, plugin = await _kubeconfig.plugin_settings(path, name)
        config = RestConfig(host=host, tls=tls, credentials=plugin)
    else:
        server, tls = _kubeconfig.cluster_settings(cluster, f"kubeconfig context {name!r}")
        tls, credentials = _kubeconfig.user_settings(user, tls)
        config = RestConfig(host=server, tls=tls, credentials=credentials)
    config.ssl_context()  # unreadable certificates fail here, naming the field, not on the first request
    return config


def in_cluster(service_account_dir: Path = SERVICE_ACCOUNT_DIR) -> RestConfig:
    """The pod's service account: token (re-read as it rotates), CA and KUBERNETES_SERVICE_HOST/PORT."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise ConfigError("not in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must both be set")
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    token = TokenFile(service_account_dir / "token")
    token.refresh()  # fail now, with the path, rather than on the first request
    ca = service_account_dir / "ca.crt"
    if not ca.exists():
        raise ConfigError(f"service account CA {ca} does not exist")
    config = RestConfig(host=f"https://{host}:{port}", tls=TLSConfig(ca_file=str(ca)), credentials=token)
    config.ssl_context()  # fail now on an unreadable CA
    return config


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
