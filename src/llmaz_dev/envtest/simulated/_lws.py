"""Running the LeaderWorkerSet controller as a local process, its admission webhooks included.

LWS needs its webhooks: the pod webhook labels each pod with its group and worker index, and the LWS pod
controller creates a group's worker StatefulSet only from those labels. In a cluster they are served behind the
`lws-webhook-service` Service with certificates its own cert-controller manages. Here nothing routes to a
Service, so:
- the controller's built-in certificate management is off (`internalCertManagement.enable: false`) and it serves
  a certificate signed by a CA generated here, for 127.0.0.1, on a free loopback port;
- the webhook configurations (the four webhooks of LWS's `config/webhook`, with its pod `objectSelector` patch)
  call that port by URL with this CA as their caBundle;
- leader election and the metrics endpoint are off (one replica, nothing scrapes it).
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from llmaz.certs.pki import new_ca, new_serving_cert

WEBHOOK_CONFIGURATION_NAME = "lws-local"
_LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
_LWS_RULE = {
    "apiGroups": ["leaderworkerset.x-k8s.io"],
    "apiVersions": ["v1"],
    "operations": ["CREATE", "UPDATE"],
    "resources": ["leaderworkersets"],
}
_POD_RULE = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}
_POD_SELECTOR = {"matchExpressions": [{"key": _LWS_NAME_LABEL, "operator": "Exists"}]}
POD_WEBHOOK_PATH = "/mutate--v1-pod"


def write_serving_certificate(cert_dir: Path) -> bytes:
    """Write tls.crt/tls.key for 127.0.0.1 into `cert_dir`; return the PEM of the CA that signed them."""
    now = datetime.now(UTC)
    ca = new_ca(now, "lws-local-webhook-ca", "llmaz-e2e")
    serving = new_serving_cert(ca, now, ["localhost"], ["127.0.0.1"])
    cert_dir.mkdir(parents=True, exist_ok=True)
    (cert_dir / "tls.crt").write_bytes(serving.cert_pem)
    (cert_dir / "tls.key").touch(mode=0o600)
    (cert_dir / "tls.key").write_bytes(serving.key_pem)
    return ca.cert_pem


def write_configuration(path: Path, webhook_port: int, probe_port: int, cert_dir: Path) -> Path:
    """The controller's `--config` file (API config.lws.x-k8s.io/v1alpha1)."""
    configuration = {
        "apiVersion": "config.lws.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{probe_port}"},
    }
    path.write_text(yaml.safe_dump(configuration))
    return path


def webhook_configurations(port: int, ca_pem: bytes) -> list[dict[str, Any]]:
    """The mutating and validating configurations, calling https://127.0.0.1:<port> by URL."""
    bundle = base64.b64encode(ca_pem).decode()

    def webhook(name: str, path: str, rule: dict[str, Any], selector: dict[str, Any] | None) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "name": name,
            "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle},
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "rules": [rule],
        }
        if selector is not None:
            entry["objectSelector"] = selector
        return entry

    def configuration(kind: str, verb: str) -> dict[str, Any]:
        return {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": kind,
            "metadata": {"name": WEBHOOK_CONFIGURATION_NAME},
            "webhooks": [
                webhook(
                    f"{verb[0]}leaderworkerset.kb.io",
                    f"/{verb}-leaderworkerset-x-k8s-io-v1-leaderworkerset",
                    _LWS_RULE,
                    None,
                ),
                webhook(f"{verb[0]}pod.kb.io", f"/{verb}--v1-pod", _POD_RULE, _POD_SELECTOR),
            ],
        }

    return [
        configuration("MutatingWebhookConfiguration", "mutate"),
        configuration("ValidatingWebhookConfiguration", "validate"),
    ]
