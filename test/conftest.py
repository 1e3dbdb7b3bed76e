"""Shared by every test tier: the llmaz.envtest fixtures.

control_plane, kubeconfig, namespace and admin_api_client; see llmaz.envtest.pytest_plugin.
"""

pytest_plugins = ["llmaz.envtest.pytest_plugin"]
