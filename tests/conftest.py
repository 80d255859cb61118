"""The core's tests never load whatever plugins happen to be installed."""

import pytest

from edgebyoc import plugins


@pytest.fixture(autouse=True)
def _no_installed_plugins(monkeypatch):
    monkeypatch.setenv(plugins.ENV_LOAD, "")
    monkeypatch.delenv(plugins.ENV_DISABLE, raising=False)
    monkeypatch.delenv(plugins.ENV_STRICT, raising=False)
    plugins.reset_default_registry()
    yield
    plugins.reset_default_registry()


@pytest.fixture(scope="session")
def small_model_path(tmp_path_factory):
    import onnx

    from edgebyoc.testing.models import small_convnet

    path = tmp_path_factory.mktemp("models") / "small_convnet.onnx"
    onnx.save(small_convnet(), path)
    return path


@pytest.fixture(scope="session")
def small_compiled(small_model_path):
    """The small conv net compiled once for the host (no plugin registry involved)."""
    import edgebyoc
    from edgebyoc.plugins import PluginRegistry

    return edgebyoc.compile(small_model_path, registry=PluginRegistry(search_path=[]))
