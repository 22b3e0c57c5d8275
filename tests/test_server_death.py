"""A dead model server is a crash, not a slow network: the real embedded server (llama-cpp-python on 127.0.0.1) is
killed mid-request; it is restarted and the run goes on, the restart counted (also in a run's metrics), or, past its
restarts, the error names the signal, the log and what to do. Answered calls stay in the response cache either way."""
import os, signal, threading, time
from pathlib import Path
import pytest
from cwm_nb.llm.client import OpenAICompatibleLLM
from cwm_nb.llm.cache import CachedLLM
from cwm_nb.llm.embedded import EmbeddedServer
from cwm_nb.core import CwmNbError

LONG = [{"role": "user", "content": "Count from 1 to 500, one number per line."}]
SHORT = [{"role": "user", "content": "Say hello."}]


def _llm(srv, cache):
    "The embedded model on `srv`, as `embedded_llm` makes it, in a response cache of its own."
    base = OpenAICompatibleLLM(srv.url, srv.alias, mode="completion", timeout_s=600.0, max_retries=2,
                                 name=f"embedded:{srv.alias}", max_tokens=16)
    base.server = srv
    return CachedLLM(base, cache)


def _kill_during_next_request(srv, sig, delay_s=0.7):
    "Send `sig` to the server `delay_s` after the next request starts (it is then generating)."
    pid = srv.proc.pid
    t = threading.Timer(delay_s, lambda: os.kill(pid, sig)); t.start()
    return t, pid


@pytest.mark.slow
def test_a_server_killed_mid_request_is_restarted_and_the_call_answered(tmp_path):
    with EmbeddedServer(n_threads=1, max_restarts=1) as srv:
        llm = _llm(srv, tmp_path/"c.sqlite")
        first = llm.complete(SHORT, seed=0, draw=0)
        port = srv.port
        t, pid = _kill_during_next_request(srv, signal.SIGSEGV)
        t0 = time.monotonic()
        second = llm.complete(LONG, seed=0, draw=1, max_tokens=200, temperature=0.0)
        t.join()
        assert time.monotonic() - t0 > 0.7        # the kill landed while the call ran
        assert second.completion_tokens > 0 and not second.cached
        assert (llm.usage.server_restarts, srv.restarts, srv.port) == (1, 1, port)   # same port: clients unchanged
        assert srv.alive and srv.proc.pid != pid
        death = srv.deaths[0]
        assert death["status"] == "killed by SIGSEGV (segmentation fault)"
        assert "Fatal Python error: Segmentation fault" in Path(death["log"]).read_text()   # the dead one's log is kept
        assert llm.complete(SHORT, seed=0, draw=0).cached                                  # answered calls stay cached
        Path(death["log"]).unlink()


@pytest.mark.slow
def test_a_server_dead_past_its_restarts_is_an_error_naming_signal_and_log(tmp_path):
    srv = EmbeddedServer(n_threads=1, max_restarts=0).start()
    try:
        llm = _llm(srv, tmp_path/"c.sqlite")
        first = llm.complete(SHORT, seed=0, draw=0)
        log = srv.log_path
        t, _ = _kill_during_next_request(srv, signal.SIGKILL)
        with pytest.raises(CwmNbError) as e:
            llm.complete(LONG, seed=0, draw=1, max_tokens=200, temperature=0.0)
        t.join()
        msg = str(e.value)
        assert "the embedded model server died: killed by SIGKILL" in msg
        assert str(log) in msg and log.exists()                       # its log, kept
        assert "out-of-memory" in e.value.todo and "answered calls are cached" in e.value.todo
        assert "kept failing" not in msg and "connection" not in msg.lower()
        again = llm.complete(SHORT, seed=0, draw=0)                   # answered before the death: from the cache
        assert again.cached and again.text == first.text
        log.unlink()
    finally: srv.stop()


def _metrics_of_a_run_whose_server_dies_once(tmp_path, monkeypatch, run):
    "The `metrics.json` of `run(llm)` (a run's output) on the embedded server, killed (SIGKILL) after the first call."
    from cwm_nb.experiments.metrics import write_metrics
    import json
    monkeypatch.setenv("CWM_NB_LLM_CACHE", str(tmp_path/"c.sqlite"))
    with EmbeddedServer(n_threads=1) as srv:
        llm = _llm(srv, tmp_path/"c.sqlite")
        def kill_after_first_call():
            while llm.usage.calls < 1: time.sleep(0.01)
            os.kill(srv.proc.pid, signal.SIGKILL)
        killer = threading.Thread(target=kill_after_first_call, daemon=True); killer.start()
        out = run(llm)
        killer.join(5)
        write_metrics(out)
        for d in srv.deaths: Path(d["log"]).unlink(missing_ok=True)
    return json.loads((out.run_dir/"metrics.json").read_text())


def _restart_is_diagnosed(metrics: dict):
    "The restart is among the run's diagnoses, with what to do, and so among the closing lines a command prints."
    from cwm_nb.llm.accounting import diagnosis_lines
    [dx] = [d for d in metrics["diagnoses"] if d["kind"] == "server_restarts"]
    assert dx["count"] == 1 and "restarted 1 time" in dx["what"] and "free memory" in dx["do"]
    assert f"warning: {dx['what']}" in diagnosis_lines(metrics["diagnoses"])


@pytest.mark.slow
def test_a_restart_during_a_run_is_counted_in_its_metrics(tmp_path, monkeypatch):
    from cwm_nb.experiments.metrics import run_cwmb_search
    metrics = _metrics_of_a_run_whose_server_dies_once(tmp_path, monkeypatch, lambda llm: run_cwmb_search(
        "CartPole-v1", method="gif-mcts", model="embedded", budget=3, seed=0, out=tmp_path/"results", max_tokens=48,
        plan_preset="none", llm=llm, progress=False))
    assert metrics["server_restarts"] == 1 and metrics["llm_calls"] == 3
    _restart_is_diagnosed(metrics)


@pytest.mark.slow
def test_a_restart_during_an_apps_run_is_counted_in_its_metrics(tmp_path, monkeypatch):
    from cwm_nb.experiments.metrics import run_apps_search
    metrics = _metrics_of_a_run_whose_server_dies_once(tmp_path, monkeypatch, lambda llm: run_apps_search(
        "demo", problems="0:1", method="gif-mcts", model="embedded", budget=3, out=tmp_path/"results", max_tokens=48, llm=llm, progress=False))
    assert metrics["server_restarts"] == 1 and metrics["llm_calls"] == 3   # counted per problem, over every session
    _restart_is_diagnosed(metrics)
