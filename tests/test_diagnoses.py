"""The cause of a poor run reaches the user: a real `cwm-nb run` (or `cwm-nb agent`) against the provider test double
on 127.0.0.1 ends with closing lines that say what went wrong with the model's answers and what to do, and the run's
metrics.json holds the same diagnoses. Each run has a response cache of its own (`cache_env`), so a cached answer never
hides the endpoint."""
import json, subprocess, sys
from pathlib import Path
from cwm_nb.llm.accounting import diagnosis_lines
from cwm_nb.testing.provider_double import ProviderDouble

ROOT = Path(__file__).resolve().parents[1]
CLI = str(Path(sys.executable).parent/"cwm-nb")


def run_against(double: ProviderDouble, model: str, out: Path, env: dict, *args) -> tuple[list[str], dict]:
    "(stdout lines, metrics.json) of `cwm-nb ARGS --model MODEL` against `double`, results under `out`."
    r = subprocess.run([CLI, *map(str, args), "--model", model, "--base-url", double.base_url, "--out", out],
                       capture_output=True, text=True, env=env, timeout=900, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    [metrics] = list(out.rglob("metrics.json"))
    return r.stdout.splitlines(), json.loads(metrics.read_text())


def closes_with_diagnoses(lines: list[str], m: dict) -> bool:
    "Whether the metrics' diagnoses are the closing lines just before the `results:` line."
    said = diagnosis_lines(m["diagnoses"])
    return bool(said) and lines[-1].startswith("results: ") and lines[-1 - len(said):-1] == said


def test_answers_cut_by_a_small_ollama_window_are_named_with_the_setting_that_raises_it(tmp_path, cache_env):
    """The issue's case: an Ollama server whose 1,280-token window cuts every answer of a CartPole run. The run still
    ends with "every program raised"; now the closing lines say why and name Ollama's own setting."""
    with ProviderDouble("openai", answers="capable", shape="small-context", context_tokens=1280) as d:
        lines, m = run_against(d, "ollama:qwen3", tmp_path/"out", cache_env, "run", "cwmb", "--env", "CartPole-v1",
                               "--budget", 2, "--plan-preset", "none")
    assert m["llm_provider"] == "ollama" and m["server_cut"] == m["llm_calls"] == 2
    [dx] = m["diagnoses"]
    assert (dx["kind"], dx["count"]) == ("server_cut", 2)
    assert "context window" in dx["what"] and "OLLAMA_CONTEXT_LENGTH" in dx["do"] and "--max-tokens" in dx["do"]
    assert any(line.startswith("every program raised") for line in lines)
    assert closes_with_diagnoses(lines, m), lines


def test_a_prompt_refused_by_a_small_vllm_window_is_named_with_vllms_setting(tmp_path, cache_env):
    """vLLM refuses a prompt whose completion cap does not fit its 2,300-token window; the search goes on with a
    shortened prompt, and the closing lines name the refusal and vLLM's --max-model-len."""
    with ProviderDouble("vllm", answers="capable", context_tokens=2300) as d:
        lines, m = run_against(d, "vllm:house-model", tmp_path/"out", cache_env, "run", "cwmb", "--env",
                               "CartPole-v1", "--budget", 2, "--plan-preset", "none")
        statuses = [q["status"] for q in d.requests()]
    assert statuses.count(400) == 1 and m["refused"] == m["refused_context"] == 1
    assert [(x["kind"], x["count"]) for x in m["diagnoses"]] == [("refused_context", 1)]
    assert "--max-model-len" in m["diagnoses"][0]["do"] and "--endpoint-caps context=N" in m["diagnoses"][0]["do"]
    assert closes_with_diagnoses(lines, m), lines


def test_an_apps_run_cut_by_a_small_ollama_window_says_so(tmp_path, cache_env):
    "APPS prompts are short: a 260-token window cuts the answers to one problem."
    with ProviderDouble("openai", answers="capable", shape="small-context", context_tokens=260) as d:
        lines, m = run_against(d, "ollama:qwen3", tmp_path/"out", cache_env, "run", "apps", "--data", "demo",
                               "--problems", "0:1", "--budget", 2)
    assert m["server_cut"] == m["llm_calls"] == 2
    assert [x["kind"] for x in m["diagnoses"]] == ["server_cut"] and "OLLAMA_CONTEXT_LENGTH" in m["diagnoses"][0]["do"]
    assert closes_with_diagnoses(lines, m), lines


def test_an_agent_run_cut_by_a_small_ollama_window_says_so(tmp_path, cache_env):
    "The agent's answers are short: a 160-token window (the double leaves an eighth of it for the answer) cuts them."
    with ProviderDouble("openai", answers="capable", shape="small-context", context_tokens=160) as d:
        lines, m = run_against(d, "ollama:qwen3", tmp_path/"out", cache_env, "agent", "minigrid", "--curriculum",
                               "MiniGrid-Empty-5x5-v0", "--budget", 2, "--max-episodes", 2)
    assert m["server_cut"] == m["llm_calls"] == 2
    assert [x["kind"] for x in m["diagnoses"]] == ["server_cut"] and "OLLAMA_CONTEXT_LENGTH" in m["diagnoses"][0]["do"]
    assert closes_with_diagnoses(lines, m), lines
