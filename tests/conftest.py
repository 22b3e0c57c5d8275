"""Shared pytest fixtures. `embedded_llm`: the embedded model (Gemma 3 270M) served once per test session on
127.0.0.1 and reached over HTTP, without the response cache (wrap it in `CachedLLM` where a test needs one).
`model_cache`: one cache folder per session for the assembled model file; `cache_env`: an environment for a `cwm-nb`
subprocess with a fresh LLM response cache (so model calls really happen) and that shared model folder."""
import os
import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: takes tens of seconds (model loading); still run by plain `pytest`")


@pytest.fixture(scope="session")
def embedded_llm():
    from cwm_nb.llm.embedded import embedded_llm
    model = embedded_llm(max_tokens=64)
    yield model
    model.server.stop()


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory):
    "One cache folder per test session for the assembled model file (the LLM response caches are per test)."
    return tmp_path_factory.mktemp("cwm_nb_cache")


@pytest.fixture
def cache_env(tmp_path_factory, model_cache):
    "A fresh LLM response cache (so model calls really happen) sharing the session's assembled model file."
    d = tmp_path_factory.mktemp("llmcache")
    return {**os.environ, "CWM_NB_CACHE": str(model_cache), "CWM_NB_LLM_CACHE": str(d/"llm_cache.sqlite")}
