"""Shared by every test tier: the llmaz_dev.envtest fixtures, and the Hypothesis profiles.

control_plane, kubeconfig, namespace and admin_api_client; see llmaz_dev.envtest.pytest_plugin.

Hypothesis: "dev" (the default) runs few examples per property so that a local run stays quick; "ci", loaded when
CI=true, runs the full search. Choose another with `pytest --hypothesis-profile=<name>`.
"""

import os

from hypothesis import settings

pytest_plugins = ["llmaz_dev.envtest.pytest_plugin"]

settings.register_profile("dev", max_examples=50)
settings.register_profile("ci", max_examples=1000, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI", "").lower() == "true" else "dev")
