"""Every answer shape of issue 28, measured end to end against the provider test double (cwm_nb.testing.provider_double).

For each `--shape` of the double, the main job at budget 2 (`cwm-nb run cwmb --env CartPole-v1 --method gif-mcts
--budget 2`, or `--budget N`) runs against it with a fresh response cache; then the same command runs again, same cache, against a
double restarted on the same port with shape `plain`, into a new run folder, as a user reruns after the server is fixed. The table gives the LLM calls, the
requests the double got and its retries, the failed calls, the accuracy, what the response cache holds afterwards
(answers by finish_reason and by where they were found), the tokens and cost recorded (and the calls whose tokens
were estimated), and the rerun's requests and accuracy. At budget 2 both calls are generate calls (so at budget 3,
measured), whose scripted answer carries a planted mistake: a shape read right scores that program's accuracy (0.337
on the search part of CartPole's buffer), one read wrong 0.0.

The numbers are the double's: its answers are scripted (the reference CartPole program, with a planted mistake in
generate answers), so they measure how the workbook reads each shape, not any model.

    .venv/bin/python benchmarks/bench_answer_shapes.py [--shapes plain,harmony,...]
    CWM_NB_CODE=/path/to/other/checkout .venv/bin/python benchmarks/bench_answer_shapes.py   # the same with other code
"""
import argparse, json, os, sqlite3, subprocess, sys, tempfile, time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE = os.environ.get("CWM_NB_CODE") or str(ROOT)   # the checkout whose cwm_nb is measured
sys.path.insert(0, CODE)
from cwm_nb.testing.provider_double import ProviderDouble  # noqa: E402

CLI = str(Path(sys.executable).parent/"cwm-nb")

#: shape: (double mode, --model, extra double options); the model names the server family the shape comes from
RUNS = {
    "plain": ("openai", "openai:gpt-4o", {}),
    "reasoning-content": ("vllm", "vllm:Qwen/Qwen3-8B", {}),
    "reasoning-field": ("vllm", "vllm:Qwen/Qwen3-8B", {}),
    "harmony": ("openai", "openai:gpt-oss-20b", {}),
    "harmony-draft": ("openai", "openai:gpt-oss-20b", {}),
    "harmony-bare": ("openai", "openai:gpt-oss-20b", {}),
    "content-parts": ("openai", "openai:magistral-medium", {}),
    "small-context": ("openai", "ollama:qwen3", {"context_tokens": 1280}),
    "gateway-error": ("openai", "openai:gpt-4o", {}),
    "event-stream": ("openai", "openai:gpt-4o", {}),
    "event-stream-always": ("openai", "openai:gpt-4o", {}),
    "usage-input-output": ("openai", "openai:gpt-4o", {}),
    "usage-none": ("openai", "openai:gpt-4o", {}),
    # five more, from public reports (the double's table in 90b_provider_replies names them)
    "tool-call": ("openai", "openai:gpt-oss-20b", {}),
    "keepalive-comments": ("openai", "openai:gpt-4o", {}),
    "html-page": ("openai", "openai:gpt-4o", {}),
    "event-stream-early-finish": ("openai", "openai:gpt-4o", {}),
    "native-finish-length": ("openai", "openai:gpt-4o", {}),
}


BUDGET = 2


def run_once(d, model: str, out: Path, env: dict) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.perf_counter()
    r = subprocess.run([CLI, "run", "cwmb", "--env", "CartPole-v1", "--method", "gif-mcts", "--budget", str(BUDGET),
                        "--seed", "0", "--model", model, "--base-url", d.base_url, "--out", str(out),
                        "--plan-preset", "none"], capture_output=True, text=True, env=env, cwd=ROOT)
    return r, time.perf_counter() - t0


def cached(path: Path) -> str:
    "What the response cache holds: answers by finish_reason, and by where they were found."
    if not path.exists(): return "-"
    with sqlite3.connect(path) as c: rows = [json.loads(r[0]) for r in c.execute("SELECT response FROM completions")]
    answers = [r for r in rows if "refused" not in r]
    fin = Counter(str(r.get("finish_reason")) for r in answers)
    src = Counter(r.get("source", "?") for r in answers)
    short = lambda cnt: ",".join(f"{k}x{n}" for k, n in sorted(cnt.items()))
    refused = len(rows) - len(answers)
    return f"{len(answers)}: {short(fin)}; {short(src)}" + (f" +{refused} refusals" if refused else "")


def metrics(out: Path) -> dict:
    p = next(out.rglob("metrics.json"), None)
    return json.loads(p.read_text()) if p else {}


def measure(shape: str, tmp: Path) -> dict:
    mode, model, extra = RUNS[shape]
    cache = tmp/shape/"cache.sqlite"
    env = {**os.environ, "CWM_NB_LLM_CACHE": str(cache), "PYTHONPATH": CODE}
    with ProviderDouble(mode, answers="capable", shape=shape, retry_after=0.05, **extra) as d:
        r, wall = run_once(d, model, tmp/shape/"out", env)
        sent = [q for q in d.requests() if q["path"].endswith("/completions")]
        held = cached(cache)
        before = len(d.requests())
        d.restart(shape="plain")   # the server fixed, on the same port: the same endpoint for the response cache
        r2, _ = run_once(d, model, tmp/shape/"rerun", env)   # a new run folder, the same response cache
        resent = [q for q in d.requests()[before:] if q["path"].endswith("/completions")]
    m, m2 = metrics(tmp/shape/"out"), metrics(tmp/shape/"rerun")
    lines = r.stderr.strip().splitlines()
    last_err = next((l for l in lines if "error:" in l), lines[-1] if lines else "")[:200] if r.returncode else ""
    return dict(shape=shape, model=model, rc=r.returncode, wall_s=wall, calls=m.get("llm_calls"), requests=len(sent),
                retries=m.get("retries"), failed=m.get("failed_calls"), accuracy=m.get("accuracy"),
                tokens=(m.get("prompt_tokens"), m.get("completion_tokens")), cost=m.get("cost_usd"),
                estimated=m.get("estimated_token_calls"),
                cached=held, rerun_requests=len(resent), rerun_accuracy=m2.get("accuracy"),
                error=last_err, best_error=(m.get("best_error") or "")[:160])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default=",".join(RUNS), help="comma-separated shapes of the double (default: all)")
    ap.add_argument("--budget", type=int, default=2, help="LLM calls per run (default 2)")
    a = ap.parse_args()
    global BUDGET
    BUDGET = a.budget
    print(f"code measured: {CODE}; budget {BUDGET}")
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for s in a.shapes.split(","):
            rows.append(measure(s.strip(), Path(d)))
            x = rows[-1]
            print(f"{x['shape']:20s} {x['model']:24s} rc={x['rc']} calls={x['calls']} requests={x['requests']} "
                  f"retries={x['retries']} failed={x['failed']} accuracy={x['accuracy']} tokens={x['tokens']} "
                  f"cost={x['cost']} estimated={x['estimated']} wall={x['wall_s']:.0f}s | cached {x['cached']} | rerun: requests="
                  f"{x['rerun_requests']} accuracy={x['rerun_accuracy']}", flush=True)
            if x["error"]: print(f"    error: {x['error']}")
            if x["best_error"]: print(f"    best program's error: {x['best_error']}")
    print("\n| shape | model | LLM calls | requests | retries | failed | accuracy | tokens (prompt, completion) | cost USD | estimated "
          "| cached answers (finish_reason; source) | rerun: requests, accuracy |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for x in rows:
        acc = "stopped (rc %d)" % x["rc"] if x["rc"] else x["accuracy"]
        print(f"| {x['shape']} | {x['model']} | {x['calls']} | {x['requests']} | {x['retries']} | {x['failed']} | {acc} "
              f"| {x['tokens']} | {x['cost']} | {x['estimated']} | {x['cached']} | {x['rerun_requests']}, {x['rerun_accuracy']} |")


if __name__ == "__main__":
    main()
