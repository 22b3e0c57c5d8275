"""The path to capable models, end to end, against the provider test double (cwm_nb.testing.provider_double: a local
OpenAI-compatible server in its own process that imitates OpenAI, vLLM, llama.cpp with a thinking template and
OpenAI reasoning models, with their documented errors and injectable faults, and a scripted capable model that
writes the reference programs of data/programs with a planted mistake for generate prompts). The double proves
mechanisms; none of its numbers is a result."""
import hashlib, json, subprocess, sys
from pathlib import Path
import pytest
from cwm_nb.llm.models import get_llm
from cwm_nb.search import prompts as P
from cwm_nb.core import CwmNbError
from cwm_nb.testing.provider_double import ProviderDouble

ROOT = Path(__file__).resolve().parents[1]
CLI = str(Path(sys.executable).parent/"cwm-nb")
PROGRAMS = ROOT/"data"/"programs"
PLANTED = json.loads((PROGRAMS/"planted_mistakes.json").read_text())


def cli(*args, env=None, timeout=900):
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)


def reference(env: str) -> str:
    return (PROGRAMS/f"{env}.py").read_text()


def metrics(out: Path, env: str, method: str, model: str) -> dict:
    return json.loads((out/"cwmb"/env/method/model.replace(":", "_")/"seed0"/"metrics.json").read_text())


def answered(double) -> list[dict]:
    return [r for r in double.requests() if r["path"].endswith("/completions")]


@pytest.fixture(scope="module")
def openai_double():
    with ProviderDouble("openai", answers="capable", idle_timeout=1800) as d: yield d


# ------------------------------------------------------------ the main job over OpenAI's chat behaviour
@pytest.mark.parametrize("method", ["gif-mcts", "worldcoder", "zero-shot-cot"])
def test_main_job_over_the_chat_path(method, openai_double, tmp_path, cache_env):
    """A chat endpoint that starts a new turn and applies `stop`: GIF-MCTS and WorldCoder reach accuracy 1.0 and
    R = 1 on CartPole within 6 calls; zero-shot CoT, which never shows the model a program, keeps the planted
    mistake. (Before the request shapes, every generate answer was cut to nothing by stop=["```"].)"""
    r = cli("run", "cwmb", "--env", "CartPole-v1", "--method", method, "--model", "openai:gpt-4o",
            "--base-url", openai_double.base_url, "--budget", 6, "--seed", 0, "--out", tmp_path,
            "--plan-preset", "quick", "--plan-episodes", 3, env=cache_env)
    assert r.returncode == 0, r.stderr[-3000:]
    m = metrics(tmp_path, "CartPole-v1", method, "openai:gpt-4o")
    from cwm_nb.bench import cwm, replay
    mistaken = reference("CartPole-v1").replace(PLANTED["CartPole-v1"]["old"], PLANTED["CartPole-v1"]["new"])
    searched = replay.split_by_episode(replay.load_buffer("CartPole-v1"), m["holdout"], m["holdout_seed"]).search
    planted = cwm.evaluate_program(mistaken, searched).accuracy   # accuracy is the search part's (a fifth held out)
    if method == "zero-shot-cot":
        assert m["accuracy"] == pytest.approx(planted) and 0 < planted < 1
        assert m["llm_calls"] == 6
    else:
        assert m["accuracy"] == 1.0 and m["exact_replay"] == 1.0 and m["normalized_return"] == 1.0
    assert m["llm_calls"] <= 6 and m["failed_calls"] == 0 and m["refused"] == 0
    # what went over the wire: no trailing assistant message, no stop string
    for req in answered(openai_double)[-m["model_calls"]:]:
        assert req["body"]["messages"][-1]["role"] == "user" and "stop" not in req["body"]


def test_sweep_of_the_three_methods_over_the_discrete_environments(openai_double, tmp_path, cache_env):
    """`cwm-nb sweep` of GIF-MCTS, WorldCoder and zero-shot CoT over the six discrete environments through the
    chat path, then `cwm-nb figures`: the paper's Table 2 layout has non-zero rows of ours."""
    r = cli("sweep", "cwmb", "--envs", "discrete", "--methods", "gif-mcts,worldcoder,zero-shot-cot",
            "--models", "openai:gpt-4o", "--base-url", openai_double.base_url, "--budgets", 6, "--seeds", 0,
            "--out", tmp_path/"sweep", "--plan-episodes", 2, "--workers", 2, "--no-progress", env=cache_env,
            timeout=2400)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    import pandas as pd
    df = pd.read_parquet(tmp_path/"sweep"/"index.parquet")
    assert len(df) == 18 and (df.status == "complete").all()
    by = df.groupby("method").accuracy.mean()
    assert (by > 0).all() and by["gif-mcts"] > by["zero-shot-cot"] and by["worldcoder"] > by["zero-shot-cot"]
    f = cli("figures", tmp_path/"sweep", "--out", tmp_path/"figs", env=cache_env, timeout=900)
    assert f.returncode == 0, f.stderr[-3000:]
    t2 = pd.read_csv(next((tmp_path/"figs").glob("*t2*.csv")))
    ours = t2[~t2.astype(str).apply(lambda c: c.str.contains("published")).any(axis=1)]
    assert len(ours) and (ours.filter(like="accuracy").apply(pd.to_numeric, errors="coerce").fillna(0) > 0).any().any()


def test_outage_mid_run_resumes_without_repeating_a_request(tmp_path, cache_env):
    """The endpoint goes down after 3 answers: the run stops with a clear error, keeping its checkpoint; run again
    after the endpoint is back, it finishes and no answered request is sent twice."""
    with ProviderDouble("openai", answers="capable", outage_after=2, retry_after=0.05) as d:
        args = ("run", "cwmb", "--env", "Taxi-v3", "--method", "gif-mcts", "--model", "openai:gpt-4o",
                "--base-url", d.base_url, "--budget", 6, "--seed", 0, "--out", tmp_path, "--plan-preset", "none")
        r1 = cli(*args, env={**cache_env, "CWM_NB_LLM_RETRIES": "1"})
        assert r1.returncode == 2 and "kept failing" in r1.stderr and "rerun the same command" in r1.stderr
        d.restart(outage_after=None)
        r2 = cli(*args, env=cache_env)
        assert r2.returncode == 0, r2.stderr[-3000:]
        ok = [q["sha256"] for q in answered(d) if q["status"] == 200 and q["delivered"]]
    m = metrics(tmp_path, "Taxi-v3", "gif-mcts", "openai:gpt-4o")
    assert len(ok) == len(set(ok)) == m["model_calls"]                 # nothing delivered twice
    assert m["llm_calls"] == m["model_calls"] + m["cached_calls"] and m["llm_calls"] >= 3


# ------------------------------------------------------------ request shapes learned from refusals
def search(llm, env="CartPole-v1", method="worldcoder", budget=4, tmp=None, **kw):
    from cwm_nb.experiments.metrics import run_cwmb_search
    return run_cwmb_search(env=env, method=method, model="test-double", budget=budget, out=str(tmp),
                           plan_preset="none", llm=llm, progress=False, **kw)


def test_reasoning_model_parameters(tmp_path):
    """An OpenAI reasoning model refuses max_tokens, a non-default temperature/top_p and stop (HTTP 400). A known
    name is asked right the first time; an unknown one is corrected after one refusal and the correction kept."""
    with ProviderDouble("reasoning", answers="capable") as d:
        known = get_llm("openai:o4-mini", base_url=d.base_url, cache=tmp_path/"a.sqlite", max_tokens=4000)
        run = search(known, tmp=tmp_path/"a")
        assert run.metrics["accuracy"] == 1.0 and run.metrics["request_adjustments"] == []
        assert all(q["status"] == 200 for q in answered(d))
        n = len(answered(d))
        other = get_llm("openai:house-reasoner", base_url=d.base_url, cache=tmp_path/"b.sqlite", max_tokens=4000)
        run = search(other, tmp=tmp_path/"b")
        assert run.metrics["accuracy"] == 1.0
        assert set(run.metrics["request_adjustments"]) == {"max_tokens sent as max_completion_tokens",
            "temperature and top_p left to the model's defaults"}
        statuses = [q["status"] for q in answered(d)[n:]]
        assert statuses.count(400) == 2 and statuses[2:].count(400) == 0   # refused twice, once per parameter
        body = answered(d)[-1]["body"]
        assert "max_tokens" not in body and "temperature" not in body and "stop" not in body


def test_llamacpp_thinking_template_refuses_the_prefill(tmp_path):
    """llama-server with a thinking template refuses a trailing assistant message; the pre-fill moves into the
    user turn once, and the answers' <think> drafts are not taken for the program."""
    with ProviderDouble("llamacpp-thinking", answers="capable") as d:
        llm = get_llm("llamacpp:qwen3", base_url=d.base_url, cache=tmp_path/"c.sqlite")
        run = search(llm, tmp=tmp_path/"r")
        statuses = [q["status"] for q in answered(d)]
    assert run.metrics["accuracy"] == 1.0
    assert run.metrics["request_adjustments"] == ["pre-fill moved into the user turn"] and statuses.count(400) == 1


def test_small_context_window_shortens_prompts_and_a_resume_repeats_no_refusal(tmp_path):
    """Humanoid's improve prompt (~35,000 characters) against an 8,192-token vLLM server whose window the
    workbook does not know: the first refusal teaches the window, the prompts are shortened, the search goes on;
    a resumed search with a fresh LLM object replays the cached refusal instead of sending it again."""
    from cwm_nb.experiments.metrics import run_cwmb_search
    with ProviderDouble("vllm", answers="capable", context_tokens=8192) as d:
        mk = lambda: get_llm("vllm:house-model", base_url=d.base_url, cache=tmp_path/"v.sqlite")
        run = search(mk(), env="Humanoid-v4", method="worldcoder", budget=3, tmp=tmp_path/"h")
        first = answered(d)
        assert [q["status"] for q in first].count(400) >= 1 and run.metrics["compacted_calls"] >= 1
        assert run.metrics["llm_calls"] == 3
        refused = {q["sha256"] for q in first if q["status"] == 400}
        run2 = search(mk(), env="Humanoid-v4", method="worldcoder", budget=5, tmp=tmp_path/"h")   # resume to 5
        later = answered(d)[len(first):]
    assert run2.metrics["llm_calls"] == 5
    assert not refused & {q["sha256"] for q in later}            # no refused request sent again
    assert not {q["sha256"] for q in first if q["status"] == 200} & {q["sha256"] for q in later}


def test_known_context_window_needs_no_refusal(tmp_path):
    with ProviderDouble("vllm", answers="capable", context_tokens=8192) as d:
        llm = get_llm("vllm:meta-llama/Meta-Llama-3-70B-Instruct", base_url=d.base_url, cache=tmp_path/"k.sqlite")
        assert llm.caps.context_tokens == 8192
        run = search(llm, env="Humanoid-v4", method="gif-mcts", budget=2, tmp=tmp_path/"k")
        assert [q["status"] for q in answered(d)] == [200, 200] and run.metrics["llm_calls"] == 2


# ------------------------------------------------------------ faults that waiting cures, and those it does not
def test_transient_faults_are_retried_and_counted(tmp_path):
    with ProviderDouble("openai", faults="408:2,429:1,503:1", error_body=2, reset=1, retry_after=0.05) as d:
        llm = get_llm("openai:gpt-4o", base_url=d.base_url, cache=False, backoff_s=0.01, max_retries=8)
        c = llm.complete([dict(role="user", content="hello")])
        assert c.text and llm.usage.retries == 7 and llm.usage.calls == 1
        assert [q["fault"] for q in answered(d)][:7] == ["status"] * 4 + ["error_body"] * 2 + ["reset"]


def test_error_bodies_that_persist_and_fatal_statuses_give_clear_errors(tmp_path):
    with ProviderDouble("openai", error_body=50) as d:
        llm = get_llm("openai:gpt-4o", base_url=d.base_url, cache=False, backoff_s=0.01, max_retries=2)
        with pytest.raises(CwmNbError, match="HTTP 200 without an answer") as e:
            llm.complete([dict(role="user", content="hello")])
        assert "kept failing after 3 attempts" in str(e.value)
    with ProviderDouble("openai", api_key="right", models="gpt-4o") as d:
        with pytest.raises(CwmNbError, match="refused the API key"):
            get_llm("openai:gpt-4o", base_url=d.base_url, cache=False).complete([dict(role="user", content="x")])
        assert len(answered(d)) == 1


def test_unknown_model_stops_at_the_first_call(tmp_path, monkeypatch):
    with ProviderDouble("openai", models="gpt-4o") as d:
        llm = get_llm("openai:gpt-5-nano", base_url=d.base_url, cache=False)
        with pytest.raises(CwmNbError, match="404"):
            search(llm, tmp=tmp_path)
        assert len(answered(d)) == 1


# ------------------------------------------------------------ answers as capable models write them
def test_every_answer_style_gives_the_program(tmp_path):
    """Reasoning blocks (with only the closing tag too), tildes, fences in list items, CRLF, a longer usage
    script after the program: the program extracted from each improve answer is the reference program."""
    from cwm_nb.bench import envs
    desc, ref = envs.describe_env("CartPole-v1"), reference("CartPole-v1")
    msgs = P.improve_messages(desc, ref.replace(PLANTED["CartPole-v1"]["old"], PLANTED["CartPole-v1"]["new"]),
                              "(a failing transition)", contract=P.CWM_CONTRACT)
    with ProviderDouble("openai", answers="capable", style="rotate") as d:
        llm = get_llm("openai:gpt-4o", base_url=d.base_url, cache=False)
        got = {}
        for draw in range(7):
            c = llm.complete(msgs, draw=draw)
            got[answered(d)[-1]["answer"]["style"]] = P.parse_answer(c.text)[1]
    assert set(got) == {"plain", "think", "think-close-only", "tilde", "list", "crlf", "usage-after"}
    for style, code in got.items():
        assert code is not None and P.defines_environment(code), style
        assert code.strip() in ref, style      # the reference program (the double leaves out its module docstring)
