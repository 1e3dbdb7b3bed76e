"""The installed dependencies are the ones the code was written against.

xds-protos (the Endpoint Picker's Envoy API) ships its own, older copy of opentelemetry-proto's modules in the same
package directory, and whichever of the two installs last wins. `make install` and the Dockerfiles install
opentelemetry-proto again over it; this fails, naming the fix, when that step is missing.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
from pathlib import Path

OTEL_PROTO_MODULES = ("opentelemetry/proto/common/v1/common_pb2.py", "opentelemetry/proto/trace/v1/trace_pb2.py")


def test_opentelemetry_proto_modules_are_its_own_not_an_older_copy() -> None:
    dist = importlib.metadata.distribution("opentelemetry-proto")
    recorded = {str(f): f for f in dist.files or ()}
    for name in OTEL_PROTO_MODULES:
        entry = recorded[name]
        assert entry.hash is not None
        digest = (
            base64.urlsafe_b64encode(hashlib.sha256(Path(entry.locate()).read_bytes()).digest()).rstrip(b"=").decode()
        )
        assert digest == entry.hash.value, (
            f"{name} is not opentelemetry-proto {dist.version}'s own (another package overwrote it): "
            "run `make install` again, which reinstalls opentelemetry-proto last"
        )
