"""Test helpers for the runtime and controllers: a clock the test steps, an in-memory informer.

Each helper documents what it does not do. Production code never imports this package.
"""

from llmaz_dev.testing.clock import FakeClock
from llmaz_dev.testing.informer import FakeInformer, FakeInformerSource, FakeStore

__all__ = ["FakeClock", "FakeInformer", "FakeInformerSource", "FakeStore"]
