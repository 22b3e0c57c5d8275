"""The provider test double (nbs/90c_provider_double.ipynb) over real HTTP: one double per mode, a handful of
requests each with httpx and the `openai` client. Checks that each mode and each fault behaves as the notebook
documents, and that the scripted capable model answers generate and improve prompts differently."""
import json, os, subprocess, sys, textwrap, time
from pathlib import Path
import httpx
import openai
import pytest
from cwm_nb.bench.envs import describe_env
from cwm_nb.testing.capable_model import DRAFT_PROGRAM, ECHO_ANSWER, plant_mistake, planted_mistakes, reference_program
from cwm_nb.testing.provider_replies import LLAMACPP_PREFILL_REJECTED, TEMPLATE_PREFILL_CONFLICT, VLLM_PREFILL_CONFLICT
from cwm_nb.apps.demo import NO_PROGRAM_ANSWER, read_fences
from cwm_nb.testing.provider_options import STYLES, approx_tokens, canonical_sha256, prompt_tokens
from cwm_nb.testing.provider_double import ProviderDouble

ROOT = Path(__file__).resolve().parents[1]
CARTPOLE = describe_env("CartPole-v1")
ASK = "\n\nWrite a Python program with a class `Environment` that imitates this environment."
CORRECT = reference_program("CartPole-v1")
MISTAKEN = plant_mistake(CORRECT, planted_mistakes()["CartPole-v1"])


def generate_messages(prefill=None):
    msgs = [{"role": "system", "content": "You write Python."}, {"role": "user", "content": CARTPOLE + ASK}]
    return msgs + ([{"role": "assistant", "content": prefill}] if prefill is not None else [])


def improve_messages(program):
    user = (CARTPOLE + ASK + "\n\nThis program gets a logged transition wrong:\n\n```python\n" + program
            + "```\n\nFind the mistake and give the corrected program.")
    return [{"role": "user", "content": user}]


def content(r):
    return r.json()["choices"][0]["message"]["content"]


def python_blocks(text):
    return [textwrap.dedent(code) for info, code in read_fences(text.replace("\r\n", "\n"))[0] if info == "python"]


def child_env():
    "Environment for a subprocess that imports this checkout's cwm_nb."
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}


def client(d, **kw):
    return openai.OpenAI(base_url=d.base_url, api_key=kw.pop("api_key", "test"), max_retries=0, timeout=30, **kw)


@pytest.fixture(scope="module")
def openai_double():
    with ProviderDouble("openai", answers="capable") as d:
        yield d


@pytest.fixture(scope="module")
def vllm_double():
    with ProviderDouble("vllm", answers="capable", context_tokens=3000) as d:
        yield d


@pytest.fixture(scope="module")
def llama_double():
    with ProviderDouble("llamacpp-thinking", answers="capable", context_tokens=3000) as d:
        yield d


@pytest.fixture(scope="module")
def reasoning_double():
    with ProviderDouble("reasoning", reasoning_tokens=20) as d:
        yield d


# ---------------------------------------------------------------- openai mode

def test_openai_answers_a_prefill_in_a_new_turn_with_the_planted_mistake(openai_double):
    msgs = generate_messages(prefill="Here is the program:\n\n```python\nimport math\n")
    r = client(openai_double).chat.completions.create(model="gpt-x", messages=msgs, max_tokens=2000)
    text = r.choices[0].message.content
    assert text.startswith("Here is a world model of CartPole-v1")        # not a continuation of the pre-fill
    assert python_blocks(text) == [MISTAKEN] and MISTAKEN != CORRECT
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (prompt_tokens(msgs), approx_tokens(text))
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    last = openai_double.requests()[-1]
    assert last["answer"] == {"kind": "generate", "env": "CartPole-v1", "style": "plain", "program": "mistaken",
                              "mistake": planted_mistakes()["CartPole-v1"]["what"]}


def test_openai_improve_prompt_gets_sections_and_the_correct_program(openai_double):
    text = client(openai_double).chat.completions.create(model="m", messages=improve_messages(MISTAKEN)).choices[0].message.content
    assert text.index("## Diagnosis") < text.index("## Plan") < text.index("## Corrected program")
    assert python_blocks(text) == [CORRECT]
    assert openai_double.requests()[-1]["answer"]["kind"] == "improve"


def test_openai_stop_and_max_tokens(openai_double):
    body = {"model": "m", "messages": generate_messages(), "stop": ["```"], "temperature": 0.7, "top_p": 0.9, "seed": 3}
    r = httpx.post(f"{openai_double.base_url}/chat/completions", json=body)
    assert r.status_code == 200 and "```" not in content(r) and content(r).startswith("Here is a world model")
    assert r.json()["choices"][0]["finish_reason"] == "stop"
    for key in ("max_tokens", "max_completion_tokens"):
        r = httpx.post(f"{openai_double.base_url}/chat/completions", json={"model": "m", "messages": generate_messages(), key: 10})
        assert (len(content(r)), r.json()["choices"][0]["finish_reason"], r.json()["usage"]["completion_tokens"]) == (40, "length", 10)


def test_openai_rejects_unknown_arguments(openai_double):
    r = httpx.post(f"{openai_double.base_url}/chat/completions",
                   json={"model": "m", "messages": generate_messages("```python\n"), "continue_final_message": True})
    assert r.status_code == 400
    assert r.json() == {"error": {"message": "Unrecognized request argument supplied: continue_final_message",
                                  "type": "invalid_request_error", "param": None, "code": None}}
    with pytest.raises(openai.BadRequestError):
        client(openai_double).chat.completions.create(model="m", messages=generate_messages(), extra_body={"top_k": 5})


def test_openai_completions_endpoint_continues_an_open_block(openai_double):
    r = httpx.post(f"{openai_double.base_url}/completions",
                   json={"model": "m", "prompt": CARTPOLE + ASK + "\n\n```python\nimport math\n", "max_tokens": 2000})
    choice = r.json()["choices"][0]
    assert r.json()["object"] == "text_completion" and choice["finish_reason"] == "stop"
    assert "import math\n" + choice["text"].split("```")[0] == MISTAKEN


def test_unknown_route_is_404(openai_double):
    r = httpx.post(f"{openai_double.base_url}/embeddings", json={})
    assert r.status_code == 404 and r.json()["error"]["message"] == "Invalid URL (POST /v1/embeddings)"


# ---------------------------------------------------------------- vllm mode

def test_vllm_continues_only_with_both_extra_fields(vllm_double):
    prefill = "Here is the program:\n\n```python\nimport math\n"
    c = client(vllm_double)
    cont = c.chat.completions.create(model="m", messages=generate_messages(prefill), max_tokens=1500,
                                     extra_body={"continue_final_message": True, "add_generation_prompt": False})
    whole = prefill + cont.choices[0].message.content
    assert python_blocks(whole) == [MISTAKEN] and cont.choices[0].finish_reason == "stop"
    new_turn = c.chat.completions.create(model="m", messages=generate_messages(prefill), max_tokens=1500)
    assert new_turn.choices[0].message.content.startswith("Here is a world model")
    ignored = c.chat.completions.create(model="m", messages=generate_messages(), max_tokens=1500, extra_body={"top_k": 5})
    assert ignored.choices[0].message.content.startswith("Here is a world model")   # vLLM ignores fields it does not know


@pytest.mark.parametrize("extra, message", [
    ({"continue_final_message": True, "add_generation_prompt": True}, VLLM_PREFILL_CONFLICT),
    ({"continue_final_message": True}, TEMPLATE_PREFILL_CONFLICT)])
def test_vllm_prefill_conflicts(vllm_double, extra, message):
    r = httpx.post(f"{vllm_double.base_url}/chat/completions", json={"messages": generate_messages("```python\n"), **extra})
    assert r.status_code == 400
    assert r.json() == {"error": {"message": message, "type": "BadRequestError", "param": None, "code": 400}}


def test_vllm_context_window(vllm_double):
    msgs = generate_messages()
    p = prompt_tokens(msgs)
    r = httpx.post(f"{vllm_double.base_url}/chat/completions", json={"messages": msgs, "max_tokens": 3000 - p + 1})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == (
        f"This model's maximum context length is 3000 tokens. However, you requested 3001 tokens ({p} in the "
        f"messages, {3000 - p + 1} in the completion). Please reduce the length of the messages or completion.")
    ok = httpx.post(f"{vllm_double.base_url}/chat/completions", json={"messages": msgs, "max_tokens": 3000 - p})
    assert ok.status_code == 200


# ---------------------------------------------------------------- llamacpp-thinking mode

def test_llamacpp_rejects_a_prefill_while_thinking(llama_double):
    r = httpx.post(f"{llama_double.base_url}/chat/completions", json={"messages": generate_messages("```python\n")})
    assert r.status_code == 400
    assert r.json() == {"error": {"code": 400, "message": LLAMACPP_PREFILL_REJECTED, "type": "invalid_request_error"}}
    off = httpx.post(f"{llama_double.base_url}/chat/completions",
                     json={"messages": generate_messages("```python\n"), "chat_template_kwargs": {"enable_thinking": False}})
    assert off.status_code == 200 and ("```python\n" + content(off)).startswith("```python\n" + MISTAKEN + "```")


def test_llamacpp_thinks_with_a_wrong_draft_first(llama_double):
    text = content(httpx.post(f"{llama_double.base_url}/chat/completions", json={"messages": generate_messages()}))
    assert text.startswith("<think>\n") and text.index("</think>") < text.index("Here is a world model")
    assert python_blocks(text) == [DRAFT_PROGRAM, MISTAKEN]   # the first block is the wrong draft


def test_llamacpp_context_window(llama_double):
    big = [{"role": "user", "content": "x" * 12000}]
    r = httpx.post(f"{llama_double.base_url}/chat/completions", json={"messages": big})
    p = prompt_tokens(big)
    assert r.status_code == 400
    assert r.json() == {"error": {"code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": p, "n_ctx": 3000,
                                  "message": f"request ({p} tokens) exceeds the available context size (3000 tokens), try increasing it"}}
    near = [{"role": "user", "content": CARTPOLE + ASK + "y" * (4 * (3000 - prompt_tokens(generate_messages()[1:])) - 400)}]
    r = httpx.post(f"{llama_double.base_url}/chat/completions", json={"messages": near})
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "length"
    assert r.json()["usage"]["total_tokens"] == 3000


# ---------------------------------------------------------------- reasoning mode

@pytest.mark.parametrize("extra, param, code", [
    ({"max_tokens": 100}, "max_tokens", "unsupported_parameter"),
    ({"temperature": 0.2}, "temperature", "unsupported_value"),
    ({"top_p": 0.5}, "top_p", "unsupported_value"),
    ({"stop": ["```"]}, "stop", "unsupported_parameter")])
def test_reasoning_model_refusals(reasoning_double, extra, param, code):
    r = httpx.post(f"{reasoning_double.base_url}/chat/completions", json={"model": "o3", "messages": generate_messages(), **extra})
    assert r.status_code == 400
    err = r.json()["error"]
    assert (err["param"], err["code"], err["type"]) == (param, code, "invalid_request_error")
    if param == "max_tokens":
        assert err["message"] == ("Unsupported parameter: 'max_tokens' is not supported with this model. "
                                  "Use 'max_completion_tokens' instead.")
    if param == "temperature":
        assert err["message"] == ("Unsupported value: 'temperature' does not support 0.2 with this model. "
                                  "Only the default (1) value is supported.")


def test_reasoning_model_usage_and_endpoints(reasoning_double):
    r = client(reasoning_double).chat.completions.create(model="o3", messages=generate_messages(), temperature=1,
                                                         max_completion_tokens=100)
    assert r.choices[0].message.content == ECHO_ANSWER
    assert r.usage.completion_tokens_details.reasoning_tokens == 20
    assert r.usage.completion_tokens == 20 + approx_tokens(ECHO_ANSWER)
    with pytest.raises(openai.NotFoundError):
        client(reasoning_double).completions.create(model="o3", prompt="x")


# ---------------------------------------------------------------- faults

def test_fault_statuses_in_order_with_retry_after():
    with ProviderDouble("openai", faults="408:2,429:1,503:1", retry_after=7) as d:
        rs = [httpx.post(f"{d.base_url}/chat/completions", json={"model": "m", "messages": generate_messages()})
              for _ in range(5)]
        assert [r.status_code for r in rs] == [408, 408, 429, 503, 200]
        assert [r.headers.get("retry-after") for r in rs[:4]] == [None, None, "7", "7"]
        assert rs[2].json()["error"]["code"] == "rate_limit_exceeded"
        assert [e["fault"] for e in d.requests()] == ["status"] * 4 + [None]
        d.restart(faults="429:1")
        with pytest.raises(openai.RateLimitError):
            client(d).chat.completions.create(model="m", messages=generate_messages())


def test_error_bodies_and_resets():
    with ProviderDouble("vllm", error_body=2, reset=1) as d:
        url, body = f"{d.base_url}/chat/completions", {"messages": generate_messages()}
        first, second = httpx.post(url, json=body), httpx.post(url, json=body)
        assert (first.status_code, second.status_code) == (200, 200)
        assert (first.json()["choices"], second.json()["choices"]) == (None, [])
        assert set(first.json()["error"]) == {"message", "type", "param", "code"}
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
            httpx.post(url, json=body)
        assert content(httpx.post(url, json=body)) == ECHO_ANSWER
        assert [(e["status"], e["fault"]) for e in d.requests()] == [(200, "error_body"), (200, "error_body"),
                                                                    (None, "reset"), (200, None)]


def test_outage_and_restart_on_the_same_port():
    with ProviderDouble("openai", outage_after=2, retry_after=0) as d:
        c = client(d)
        for _ in range(2): c.chat.completions.create(model="m", messages=generate_messages())
        with pytest.raises(openai.InternalServerError):
            c.chat.completions.create(model="m", messages=generate_messages())
        assert httpx.get(f"{d.base_url}/models").status_code == 503
        port, pid = d.port, d.pid
        d.restart()
        assert (d.port, d.pid != pid) == (port, True)
        assert c.chat.completions.create(model="m", messages=generate_messages()).choices[0].message.content == ECHO_ANSWER
        assert [e["status"] for e in d.requests()] == [200, 200, 503, 503, 200]


def test_latency_delays_the_answer():
    with ProviderDouble("openai", latency=30) as d:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{d.base_url}/chat/completions", json={"model": "m", "messages": generate_messages()}, timeout=0.5)


def test_api_key_and_models():
    with ProviderDouble("openai", api_key="sk-test-secret-1234", models="alpha,beta") as d:
        with pytest.raises(openai.AuthenticationError) as e:
            client(d, api_key="sk-wrong-key-9999").chat.completions.create(model="alpha", messages=generate_messages())
        assert e.value.body["code"] == "invalid_api_key"
        c = client(d, api_key="sk-test-secret-1234")
        assert [m.id for m in c.models.list()] == ["alpha", "beta"]
        with pytest.raises(openai.NotFoundError) as e:
            c.chat.completions.create(model="gamma", messages=generate_messages())
        assert e.value.body["code"] == "model_not_found"
        assert c.chat.completions.create(model="beta", messages=generate_messages()).model == "beta"


# ---------------------------------------------------------------- the capable model

def test_capable_model_on_other_environments_and_planted_mistakes_file(tmp_path):
    (tmp_path/"CartPole-v1.py").write_text(CORRECT)
    line = next(l for l in CORRECT.splitlines() if "TAU" in l and "=" in l)
    (tmp_path/"planted_mistakes.json").write_text(json.dumps(
        {"CartPole-v1": {"old": line, "new": line.replace("0.02", "0.05"), "what": "the time step is 0.05 s"}}))
    with ProviderDouble("openai", answers="capable", programs=str(tmp_path)) as d:
        c = client(d)
        text = c.chat.completions.create(model="m", messages=generate_messages()).choices[0].message.content
        assert python_blocks(text) == [CORRECT.replace(line, line.replace("0.02", "0.05"))]
        taxi = [{"role": "user", "content": describe_env("Taxi-v3") + ASK}]
        assert c.chat.completions.create(model="m", messages=taxi).choices[0].message.content == NO_PROGRAM_ANSWER.format(env="Taxi-v3")
        assert [e["answer"]["env"] for e in d.requests()] == ["CartPole-v1", "Taxi-v3"]


def test_rotating_styles_all_hold_the_program():
    with ProviderDouble("openai", answers="capable", style="rotate") as d:
        texts = [content(httpx.post(f"{d.base_url}/chat/completions", json={"model": "m", "messages": improve_messages(MISTAKEN)}))
                 for _ in STYLES]
        assert [e["answer"]["style"] for e in d.requests()] == list(STYLES)
    by_style = dict(zip(STYLES, texts))
    assert all(CORRECT in python_blocks(t) for t in texts)
    assert python_blocks(by_style["plain"]) == [CORRECT] and "\r" not in by_style["plain"]
    assert by_style["think"].startswith("<think>\n") and python_blocks(by_style["think"])[0] == DRAFT_PROGRAM
    assert "<think>" not in by_style["think-close-only"] and by_style["think-close-only"].count("</think>") == 1
    assert "~~~python\n" in by_style["tilde"] and "```" not in by_style["tilde"]
    assert "\n   ```python\n   import math\n" in by_style["list"]
    assert by_style["crlf"].count("\r\n") == by_style["crlf"].count("\n") > 0
    usage = python_blocks(by_style["usage-after"])
    assert usage[0] == CORRECT and len(usage[1]) > len(CORRECT) and "class Environment" not in usage[1]


# ---------------------------------------------------------------- process, log and command line

def test_request_log_format(openai_double):
    body = {"model": "m", "messages": generate_messages(), "seed": 11}
    httpx.post(f"{openai_double.base_url}/chat/completions", json=body)
    e = openai_double.requests()[-1]
    assert set(e) == {"n", "time", "method", "path", "status", "fault", "sha256", "body", "answer", "delivered"}
    assert e["delivered"] is True
    assert (e["method"], e["path"], e["status"], e["fault"], e["body"]) == ("POST", "/v1/chat/completions", 200, None, body)
    assert e["sha256"] == canonical_sha256(body) and isinstance(e["time"], float)


def test_stops_after_idle_timeout():
    d = ProviderDouble("openai", idle_timeout=0.5)
    assert d.proc.wait(timeout=60) == 0
    assert "no request for 0.5 s" in d.stderr()


def test_stops_when_its_parent_dies():
    script = ("import json, os\nfrom cwm_nb.testing.provider_double import ProviderDouble\nd = ProviderDouble('openai')\n"
              "print(json.dumps(d.base_url), flush=True)\nos._exit(0)\n")
    env = child_env()
    url = json.loads(subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                                    timeout=120, check=True).stdout)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try: httpx.get(f"{url}/models", timeout=2)
        except httpx.TransportError: return
        time.sleep(0.1)
    pytest.fail("the double still answers a minute after its parent died")


def test_command_line(tmp_path):
    ready = tmp_path/"url"
    env = child_env()
    p = subprocess.Popen([sys.executable, "-m", "cwm_nb.testing.provider_double", "--mode", "llamacpp-thinking", "--port", "0",
                          "--ready-file", str(ready), "--log", str(tmp_path/"log.jsonl")],
                         env=env, stdout=subprocess.PIPE, text=True)
    try:
        url = p.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1") and ready.read_text().strip() == url
        r = httpx.post(f"{url}/completions", json={"prompt": "Say hi"})
        assert r.json()["choices"][0]["text"] == "\n\n" + ECHO_ANSWER
        assert json.loads((tmp_path/"log.jsonl").read_text())["path"] == "/v1/completions"
    finally:
        p.terminate(); p.wait(10)
    bad = subprocess.run([sys.executable, "-m", "cwm_nb.testing.provider_double", "--faults", "200:1"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "bad fault" in bad.stderr
