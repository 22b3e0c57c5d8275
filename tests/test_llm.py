"""Integration tests of cwm_nb.llm: the embedded model over HTTP, seeded determinism, the response cache (also across
processes), retries against a local stand-in server, unreachable endpoints, the transformers backend on the GGUF
weights, alias resolution, and that the server child never outlives its parent."""
import http.server, json, multiprocessing as mp, socket, subprocess, sys, threading, time
from pathlib import Path
import pytest
from cwm_nb.core import CwmNbError
from cwm_nb.llm.client import OpenAICompatibleLLM, render_plain, request_seed
from cwm_nb.llm.demo import ScriptedLLM
from cwm_nb.llm.cache import CachedLLM
from cwm_nb.llm.embedded import EMBEDDED_ALIAS, EmbeddedServer, embedded_model_path
from cwm_nb.llm.inprocess import TransformersLLM
from cwm_nb.llm.models import ModelSpec, get_llm, resolve_model

PREFILL = "```python\ndef square(x):\n"
Q = [{"role": "system", "content": "You are an experienced Python developer."},
     {"role": "user", "content": "Write a Python function that returns the square of x."},
     {"role": "assistant", "content": PREFILL}]


# ---------------------------------------------------------------- a stand-in OpenAI server on 127.0.0.1
class Stub:
    """Answers each POST with the next (status, body) of `script` (the last one repeats); `delay_s` before answering."""
    def __init__(self, script, delay_s=0.0):
        self.script, self.requests, self.paths = list(script), [], []
        stub = self
        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                stub.paths.append(self.path)
                stub.requests.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                status, body = stub.script[min(len(stub.requests), len(stub.script)) - 1]
                time.sleep(delay_s)
                data = json.dumps(body).encode()
                try:
                    self.send_response(status); self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data))); self.end_headers(); self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError): pass
            def log_message(self, *a): pass
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
    def __enter__(self): return self
    def __exit__(self, *a): self.httpd.shutdown(); self.httpd.server_close()

COMPLETION = {"id": "c", "object": "text_completion", "created": 0, "model": "stub",
              "choices": [{"index": 0, "text": "    return x * x\n```", "finish_reason": "stop", "logprobs": None}],
              "usage": {"prompt_tokens": 30, "completion_tokens": 8, "total_tokens": 38}}
CHAT = {"id": "c", "object": "chat.completion", "created": 0, "model": "stub",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "    return x * x\n```"}}],
        "usage": {"prompt_tokens": 30, "completion_tokens": 8, "total_tokens": 38}}
ERR = lambda msg: {"error": {"message": msg, "type": "server_error"}}


def closed_port():
    with socket.socket() as s: s.bind(("127.0.0.1", 0)); return s.getsockname()[1]


# ---------------------------------------------------------------- the embedded model over HTTP
def test_embedded_model_answers_over_http(embedded_llm):
    assert isinstance(embedded_llm, OpenAICompatibleLLM) and embedded_llm.mode == "completion"
    assert embedded_llm.base_url.startswith("http://127.0.0.1:")
    c = embedded_llm.complete(Q, seed=0, draw=0, max_tokens=24)
    assert c.text.startswith(PREFILL) and len(c.text) > len(PREFILL)
    assert c.completion_tokens > 0 and c.prompt_tokens > 10 and not c.cached
    assert c.model == embedded_llm.name == f"embedded:{EMBEDDED_ALIAS}"


def test_seeded_sampling_is_deterministic_and_cache_makes_rerun_free(embedded_llm, tmp_path):
    a = embedded_llm.complete(Q, seed=11, draw=0, max_tokens=24)
    b = embedded_llm.complete(Q, seed=11, draw=0, max_tokens=24)
    assert a.text == b.text  # same seed and draw: the same sample
    texts = {embedded_llm.complete(Q, seed=11, draw=d, max_tokens=24, temperature=1.0).text for d in range(1, 4)}
    assert len(texts) > 1    # other draws are other samples

    cl = CachedLLM(embedded_llm, tmp_path/"cache.sqlite")   # shares the backend's account (`usage`)
    assert cl.usage is embedded_llm.usage
    before = embedded_llm.usage.copy()
    first = cl.complete(Q, seed=11, draw=0, max_tokens=24)
    spent = lambda: embedded_llm.usage - before
    assert (spent().calls, spent().cached_calls) == (1, 0)
    again = cl.complete(Q, seed=11, draw=0, max_tokens=24)
    assert again.cached and again.text == first.text == a.text
    assert (spent().calls, spent().cached_calls) == (1, 1)
    assert spent().prompt_tokens == first.prompt_tokens  # tokens count what was spent

    cl.complete(Q, seed=11, draw=1, max_tokens=24)        # another draw index: another key, a real call
    assert (spent().calls, len(cl.cache)) == (2, 2)
    cl.complete(Q, seed=11, draw=0, max_tokens=25)        # other sampling parameters: another key
    assert spent().calls == 3


def _write_answers(path, worker, n):
    llm = CachedLLM(ScriptedLLM(lambda m, d: f"w{worker} d{d}"), path)
    for d in range(n): llm.complete([{"role": "user", "content": f"q{worker}"}], draw=d)


def test_cache_is_shared_safely_between_processes(tmp_path):
    path, n = tmp_path/"shared.sqlite", 25
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_write_answers, args=(path, w, n)) for w in range(4)]
    for p in procs: p.start()
    for p in procs: p.join(120)
    assert [p.exitcode for p in procs] == [0]*4
    reader = CachedLLM(ScriptedLLM([]), path)  # an empty script raises if it is ever called
    assert len(reader.cache) == 4*n
    assert reader.complete([{"role": "user", "content": "q3"}], draw=7).text == "w3 d7"
    assert (reader.usage.calls, reader.usage.cached_calls) == (0, 1)


# ---------------------------------------------------------------- retries and failures
def test_rate_limit_is_retried_with_exponential_backoff():
    with Stub([(429, ERR("slow down")), (429, ERR("slow down")), (200, COMPLETION)]) as s:
        llm = OpenAICompatibleLLM(s.url, "stub", mode="completion", backoff_s=0.05, price=(1.0, 2.0))
        waits = []
        llm.sleep = lambda w: (waits.append(w), time.sleep(w))
        c = llm.complete(Q, seed=2, draw=5)
    assert len(s.requests) == 3 and s.paths == ["/v1/completions"]*3
    assert c.text == PREFILL + "    return x * x\n```" and c.finish_reason == "stop"
    assert 0.75*0.05 <= waits[0] <= 1.25*0.05 and 0.75*0.1 <= waits[1] <= 1.25*0.1
    assert s.requests[-1]["prompt"] == render_plain(Q) and s.requests[-1]["seed"] == request_seed(2, 5)
    assert (llm.usage.calls, llm.usage.retries, llm.usage.prompt_tokens, llm.usage.completion_tokens) == (1, 2, 30, 8)
    assert llm.usage.cost_usd == pytest.approx((30*1.0 + 8*2.0) / 1e6)


def test_server_errors_give_up_after_the_retry_limit():
    with Stub([(500, ERR("boom"))]) as s:
        llm = OpenAICompatibleLLM(s.url, "stub", max_retries=3, backoff_s=0.01)
        with pytest.raises(CwmNbError, match="kept failing after 4 attempts") as e:
            llm.complete(Q)
    assert len(s.requests) == 4 and s.url in str(e.value) and "boom" in str(e.value)
    assert "What to do" in str(e.value)


def test_timeouts_are_retried_then_reported():
    with Stub([(200, COMPLETION)], delay_s=1.0) as s:
        llm = OpenAICompatibleLLM(s.url, "stub", mode="completion", timeout_s=0.2, max_retries=1, backoff_s=0.01)
        with pytest.raises(CwmNbError, match="timed out"):
            llm.complete(Q)
        assert len(s.requests) == 2


def test_client_errors_are_not_retried():
    with Stub([(401, ERR("bad key"))]) as s:
        with pytest.raises(CwmNbError, match="API key"):
            OpenAICompatibleLLM(s.url, "stub", backoff_s=0.01).complete(Q)
        assert len(s.requests) == 1


def test_unreachable_endpoint_names_the_url():
    url = f"http://127.0.0.1:{closed_port()}/v1"
    t0 = time.monotonic()
    with pytest.raises(CwmNbError) as e:
        OpenAICompatibleLLM(url, "m", backoff_s=0.01).complete(Q)
    assert url in str(e.value) and "cannot reach" in str(e.value) and "--base-url" in str(e.value)
    assert time.monotonic() - t0 < 10


def test_chat_mode_continues_the_prefill_where_the_endpoint_can():
    with Stub([(200, CHAT)]) as s:
        c = OpenAICompatibleLLM(s.url, "stub", mode="chat", provider="vllm").complete(
            Q, max_tokens=50, temperature=0.3, stop=["\n\n"])
    req = s.requests[0]
    assert s.paths == ["/v1/chat/completions"] and req["messages"] == Q
    assert (req["max_tokens"], req["temperature"], req["top_p"], req["stop"]) == (50, 0.3, 0.8, ["\n\n"])
    assert (req["continue_final_message"], req["add_generation_prompt"]) == (True, False)
    assert c.text == PREFILL + "    return x * x\n```"


def test_chat_mode_moves_the_prefill_where_the_endpoint_starts_a_new_turn():
    with Stub([(200, CHAT)]) as s:
        OpenAICompatibleLLM(s.url, "stub", mode="chat").complete(Q, stop=["```"])
    req = s.requests[0]
    assert [m["role"] for m in req["messages"]] == ["system", "user"] and "stop" not in req
    assert req["messages"][1]["content"].endswith("starts with these lines:\n\n```python\ndef square(x):\n```")


# ---------------------------------------------------------------- the transformers backend
@pytest.mark.slow
def test_transformers_backend_generates_from_the_gguf():
    p = embedded_model_path()
    hf = TransformersLLM(p.parent, gguf_file=p.name)
    a = hf.complete(Q, seed=3, draw=0, max_tokens=4)
    b = hf.complete(Q, seed=3, draw=0, max_tokens=4)
    assert a.text.startswith(PREFILL) and 0 < a.completion_tokens <= 4 and a.prompt_tokens > 10
    assert a.text == b.text
    assert hf.sampling_params()["top_k"] == 100 and hf.sampling_params()["max_tokens"] == 1500  # paper defaults
    assert hf.prompt_text(Q) == render_plain(Q)  # this GGUF has no chat template
    # with a template, the pre-fill is continued in place (no end-of-turn marker after it)
    hf.tokenizer.chat_template = "{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}[/end]{% endfor %}"
    hf.use_chat_template = True
    assert hf.prompt_text(Q).endswith("[assistant]" + PREFILL)
    assert hf.prompt_text(Q[:2]).endswith("[/end]")


# ---------------------------------------------------------------- names
def test_aliases_and_provider_strings(monkeypatch, tmp_path):
    R = resolve_model
    assert R("gpt-4-turbo") == ModelSpec("openai", "gpt-4-turbo", "https://api.openai.com/v1")
    assert R("GPT-4o").model == "gpt-4o" and R("gpt-4o-mini").provider == "openai"
    assert R("llama-3-70b") == ModelSpec("hf", "meta-llama/Meta-Llama-3-70B-Instruct")
    assert R("llama-3-8b", base_url="http://gpu-box:8000/v1") == \
        ModelSpec("vllm", "meta-llama/Meta-Llama-3-8B-Instruct", "http://gpu-box:8000/v1")
    assert R("vllm:org/m").base_url == "http://127.0.0.1:8000/v1"
    assert R("ollama:llama3").base_url == "http://127.0.0.1:11434/v1"
    assert R("llamacpp:g", "http://127.0.0.1:9/v1").base_url == "http://127.0.0.1:9/v1"
    assert R("embedded").provider == "embedded"
    with pytest.raises(CwmNbError, match="provider:name"): R("gpt5")
    with pytest.raises(CwmNbError, match="unknown model"): R("foo:bar")

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(CwmNbError, match="OPENAI_API_KEY"): get_llm("gpt-4o")
    monkeypatch.setenv("MY_KEY", "sk-test")
    llm = get_llm("gpt-4-turbo", api_key_env="MY_KEY", cache=tmp_path/"c.sqlite")
    assert isinstance(llm, CachedLLM) and llm.cache.path == tmp_path/"c.sqlite"
    assert llm.inner.name == "openai:gpt-4-turbo" and llm.price == (10.0, 30.0)
    local = get_llm("ollama:llama3", cache=False)       # a local server needs no key
    assert isinstance(local, OpenAICompatibleLLM) and local.price is None
    hf = get_llm("hf:/models/x/model.gguf", cache=False)  # not loaded until the first call
    assert isinstance(hf, TransformersLLM) and (hf.model_id, hf.gguf_file) == ("/models/x", "model.gguf")
    assert get_llm(hf) is hf


def test_get_llm_embedded_uses_the_http_path_and_the_cache(embedded_llm, tmp_path):
    llm = get_llm("embedded", cache=tmp_path/"c.sqlite", max_tokens=8)
    assert isinstance(llm.inner, OpenAICompatibleLLM) and llm.inner.server is embedded_llm.server
    a = llm.complete(Q, seed=1); b = llm.complete(Q, seed=1)
    assert a.text == b.text and (llm.usage.calls, llm.usage.cached_calls) == (1, 1)


# ---------------------------------------------------------------- the server process
CHILD = """
import sys, time
from cwm_nb.llm.embedded import EmbeddedServer
s = EmbeddedServer().start()
print(s.proc.pid, s.log_path, flush=True)
time.sleep(600)
"""

def running(pid):
    "True while `pid` exists and is not a zombie."
    try: return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError): return False

def test_server_is_stopped_when_its_parent_is_killed():
    parent = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    try:
        pid, log = parent.stdout.readline().split(maxsplit=1)
        server_pid, log = int(pid), Path(log.strip())
        assert log.exists()
        assert running(server_pid)
        parent.kill(); parent.wait()
        for _ in range(100):
            if not running(server_pid): break
            time.sleep(0.1)
        else: pytest.fail("the model server outlived its killed parent")
        assert not log.exists()  # and it cleaned up its log
    finally:
        if parent.poll() is None: parent.kill()


def test_context_manager_stops_the_server():
    with EmbeddedServer() as s:
        pid = s.proc.pid
        import httpx
        assert httpx.get(f"{s.url}/models").status_code == 200
    assert not s.alive and not running(pid)
