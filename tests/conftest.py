"""Shared pytest fixtures. `embedded_llm`: the embedded model (Gemma 3 270M) served once per test session on
127.0.0.1 and reached over HTTP, without the response cache (wrap it in `CachedLLM` where a test needs one)."""
import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: takes tens of seconds (model loading); still run by plain `pytest`")


@pytest.fixture(scope="session")
def embedded_llm():
    from cwm_nb import llm as L
    model = L.embedded_llm(max_tokens=64)
    yield model
    model.server.stop()
