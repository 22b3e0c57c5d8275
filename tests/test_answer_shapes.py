"""Every answer shape a real server gives becomes a program (issue 28): the provider test double
(cwm_nb.testing.provider_double, `shape=`) puts the scripted capable model's answer where one kind of server puts it
(reasoning fields, Harmony channels, content parts, a gateway's failed answer, event streams, a small context
window, usage in other names or none), and the workbook's HTTP backend and program extraction read it. The double
proves mechanisms; none of its numbers is a result."""
from pathlib import Path
import pytest
from cwm_nb.bench import envs
from cwm_nb.llm.models import get_llm
from cwm_nb.search import prompts as P
from cwm_nb.core import CwmNbError
from cwm_nb.testing.provider_double import ProviderDouble
from cwm_nb.testing.capable_model import plant_mistake, planted_mistakes, reference_program

CORRECT = reference_program("CartPole-v1")
MISTAKEN = plant_mistake(CORRECT, planted_mistakes()["CartPole-v1"])


def generate():
    "GIF-MCTS's generate prompt for CartPole (its pre-fill opens the program's code block)."
    return P.generate_messages(envs.describe_env("CartPole-v1"), contract=P.CWM_CONTRACT)


def answered(d):
    return [r for r in d.requests() if r["path"].endswith("/completions")]


# (double mode, model name, shape, where the workbook finds the answer)
WHERE = [
    ("vllm", "vllm:Qwen/Qwen3-8B", "reasoning-content", "reasoning_content"),
    ("vllm", "vllm:Qwen/Qwen3-8B", "reasoning-field", "reasoning"),
    ("openai", "openai:gpt-oss-20b", "harmony", "content, harmony final channel"),
    ("openai", "openai:gpt-oss-20b", "harmony-draft", "content, harmony final channel"),
    ("openai", "openai:gpt-oss-20b", "harmony-bare", "content, harmony final channel (markers stripped)"),
    ("openai", "openai:magistral-medium", "content-parts", "content parts"),
    ("openai", "openai:gpt-4o", "event-stream-always", "content (event stream)"),
]


@pytest.mark.parametrize("mode,model,shape,source", WHERE, ids=[w[2] for w in WHERE])
def test_the_program_is_found_wherever_the_server_put_it(mode, model, shape, source, tmp_path):
    """The generate answer's program (the planted mistake) is extracted whole from each shape, and where it was
    found is recorded. Before: accuracy 0.0 (reasoning fields, Harmony), the analysis draft (harmony-draft), a
    TypeError (content parts), an empty answer (event stream)."""
    with ProviderDouble(mode, answers="capable", shape=shape) as d:
        llm = get_llm(model, base_url=d.base_url, cache=tmp_path/"c.sqlite")
        c = llm.complete(generate(), max_tokens=3000)
    assert P.extract_code(c.text).strip("\n") == MISTAKEN.strip("\n")
    assert c.source == source and c.finish_reason == "stop"
    assert "<|" not in c.text and "assistantfinal" not in c.text     # markers never reach the parser


def test_every_request_says_stream_false_and_a_streaming_default_is_not_taken(tmp_path):
    """A server that streams unless told not to: the request says "stream": false and gets one JSON answer."""
    with ProviderDouble("openai", answers="capable", shape="event-stream") as d:
        c = get_llm("openai:gpt-4o", base_url=d.base_url, cache=False).complete(generate())
        sent = answered(d)[-1]["body"]
    assert sent["stream"] is False and c.source == "content"
    assert P.extract_code(c.text).strip("\n") == MISTAKEN.strip("\n")


def test_a_gateway_error_is_retried_counted_and_never_cached(tmp_path):
    """HTTP 200 with finish_reason "error", half the text and null token counts (every odd request): retried like a
    5xx; only the healthy answer is cached. With no retries left the call fails, nothing is cached, and the same
    call made again asks the server again instead of replaying a fragment."""
    with ProviderDouble("openai", answers="capable", shape="gateway-error") as d:
        llm = get_llm("openai:gpt-4o", base_url=d.base_url, cache=tmp_path/"g.sqlite", backoff_s=0.01)
        c = llm.complete(generate())
        assert (llm.usage.retries, llm.usage.calls, len(llm.cache)) == (1, 1, 1)
        assert c.finish_reason == "stop" and P.extract_code(c.text).strip("\n") == MISTAKEN.strip("\n")
        once = get_llm("openai:gpt-4o", base_url=d.base_url, cache=tmp_path/"h.sqlite", max_retries=0)
        with pytest.raises(CwmNbError, match="gave up"):
            once.complete(generate())                               # request 3: a failed answer
        assert len(once.cache) == 0
        again = once.complete(generate())                           # request 4: asked again, answered
        assert not again.cached and again.finish_reason == "stop"
        assert [q["fault"] for q in answered(d)] == ["gateway-error", None, "gateway-error", None]


def test_an_answer_cut_by_a_small_context_window_says_so(tmp_path):
    """Ollama with a small window (1,280 of the double's tokens: the 1,072-token prompt leaves room for 208) cuts the
    answer far below the cap: the reason names the window and how to raise it for Ollama, not --max-tokens; the cut
    answer is used but not cached."""
    with ProviderDouble("openai", answers="capable", shape="small-context", context_tokens=1280) as d:
        llm = get_llm("ollama:qwen3", base_url=d.base_url, cache=tmp_path/"s.sqlite")
        c = llm.complete(generate(), max_tokens=4096)
    assert c.finish_reason == "length" and c.completion_tokens == 208
    assert "context window" in c.cut and "OLLAMA_CONTEXT_LENGTH" in c.cut and "cannot help" in c.cut
    assert len(llm.cache) == 0      # not cached: a rerun after the window is raised asks again


@pytest.mark.parametrize("shape", ["usage-input-output", "usage-none"])
def test_usage_in_any_naming_and_estimated_where_none(shape, tmp_path):
    """input_tokens/output_tokens are read; no usage at all is estimated and said to be; the cost is never 0."""
    with ProviderDouble("openai", answers="capable", shape=shape) as d:
        llm = get_llm("openai:gpt-4o", base_url=d.base_url, cache=False)
        c = llm.complete(generate())
    assert c.prompt_tokens > 500 and c.completion_tokens > 200 and llm.usage.cost_usd > 0
    assert (c.tokens_estimated, llm.usage.estimated_calls) == ((False, 0) if shape == "usage-input-output" else (True, 1))


# ------------------------------------------------------------ five more shapes from public reports (2025-2026)
MORE = [
    ("tool-call", "tool_calls", "tool_calls"),                                   # microsoft/graphrag #2278
    ("keepalive-comments", "content", "stop"),                                   # router-for-me/CLIProxyAPI #417
    ("event-stream-early-finish", "content (event stream)", "stop"),             # open-webui/open-webui #16377
]


@pytest.mark.parametrize("shape,source,finish", MORE, ids=[m[0] for m in MORE])
def test_more_shapes_give_the_program(shape, source, finish, tmp_path):
    with ProviderDouble("openai", answers="capable", shape=shape) as d:
        c = get_llm("openai:gpt-4o", base_url=d.base_url, cache=tmp_path/"c.sqlite").complete(generate())
    assert (c.source, c.finish_reason) == (source, finish)
    assert P.extract_code(c.text).strip("\n") == MISTAKEN.strip("\n")


def test_a_gateway_stop_over_a_native_max_tokens_is_a_cut_answer(tmp_path):
    """finish_reason "stop" with native_finish_reason "MAX_TOKENS" (reVrost/go-openrouter #43): the half answer is
    a `length` answer with its reason, not a finished one."""
    with ProviderDouble("openai", answers="capable", shape="native-finish-length") as d:
        c = get_llm("openai:gpt-4o", base_url=d.base_url, cache=False).complete(generate(), max_tokens=1500)
    assert c.finish_reason == "length" and "cannot help" in c.cut


def test_an_html_page_at_http_200_stops_at_once_naming_the_base_url(tmp_path):
    """A proxy's sign-in page with HTTP 200 (sipeed/picoclaw #1075): one request, a clear error, nothing cached."""
    with ProviderDouble("openai", answers="capable", shape="html-page") as d:
        llm = get_llm("openai:gpt-4o", base_url=d.base_url, cache=tmp_path/"c.sqlite")
        with pytest.raises(CwmNbError, match="HTML page") as e:
            llm.complete(generate())
        assert len(answered(d)) == 1 and len(llm.cache) == 0 and "--base-url" in e.value.todo


def test_the_main_job_says_when_its_token_counts_are_estimates(tmp_path):
    "A server that reports no usage: the closing line of `cwm-nb run` says the tokens are estimates (the double's answers)."
    import os, subprocess, sys
    cli = str(Path(sys.executable).parent/"cwm-nb")
    env = {**os.environ, "CWM_NB_LLM_CACHE": str(tmp_path/"cache.sqlite"), "OPENAI_API_KEY": "sk-test-double"}
    with ProviderDouble("openai", answers="capable", shape="usage-none") as d:
        r = subprocess.run([cli, "run", "cwmb", "--env", "CartPole-v1", "--budget", "1", "--model", "openai:gpt-4o",
                            "--base-url", d.base_url, "--out", str(tmp_path/"out"), "--plan-preset", "none"],
                           capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "(estimates: no token counts from the server for 1 of the calls)" in r.stdout, r.stdout
