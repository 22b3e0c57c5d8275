"""The chat path to capable models, measured against the provider test double (cwm_nb.testing.provider_double).

1. The main job (`cwm-nb run cwmb --env CartPole-v1 --method gif-mcts --budget 10`) over an OpenAI-like chat
   endpoint played by the double's scripted capable model: calls answered, retries, wall time; once with a clean
   endpoint and once with a flaky one (HTTP 408, 429 and 503 with Retry-After, an HTTP 200 error body, a reset).
2. The share of a GIF-MCTS iteration spent outside the LLM call when every answer takes `--latency` seconds
   (default 1 s; goal <= 5 %), measured in process on CartPole with the sandboxed evaluator.
3. An outage mid-run: the endpoint answers 3 requests, then 503 until it is restarted; the run stops, is run
   again, and the number of answered requests sent twice is counted (goal 0).

The double's numbers are not results of any model: they measure the workbook's own overhead and behaviour.

    .venv/bin/python benchmarks/bench_chat_path.py [--latency 1.0] [--budget 10]
"""
import argparse, json, os, subprocess, sys, tempfile, time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from cwm_nb.testing.provider_double import ProviderDouble  # noqa: E402

CLI = str(Path(sys.executable).parent/"cwm-nb")


def run_cli(*args, env):
    t0 = time.perf_counter()
    r = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, env=env, cwd=ROOT)
    return r, time.perf_counter() - t0


def main_job(tmp: Path, budget: int, **faults) -> dict:
    env = {**os.environ, "CWM_NB_LLM_CACHE": str(tmp/"cache.sqlite")}
    with ProviderDouble("openai", answers="capable", retry_after=0.5, **faults) as d:
        r, wall = run_cli("run", "cwmb", "--env", "CartPole-v1", "--method", "gif-mcts", "--model", "openai:gpt-4o",
                          "--base-url", d.base_url, "--budget", budget, "--seed", 0, "--out", tmp/"out",
                          "--plan-preset", "quick", "--plan-episodes", 3, env=env)
        sent = len([q for q in d.requests() if q["path"].endswith("/completions")])
    if r.returncode: sys.exit(f"the main job failed:\n{r.stderr[-3000:]}")
    m = json.loads(next((tmp/"out").rglob("metrics.json")).read_text())
    return dict(command_s=wall, requests=sent, **{k: m[k] for k in ("llm_calls", "model_calls", "retries", "accuracy",
                                                                 "normalized_return", "search_s", "wall_s")})


def outside_share(latency: float, budget: int, tmp: Path) -> dict:
    from cwm_nb.bench import cwm, envs, replay
    from cwm_nb.llm.models import get_llm
    from cwm_nb.search.gif_mcts import GIFMCTS, GIFMCTSConfig
    from cwm_nb.sandbox.jobs import get_sandbox
    buf, sb = replay.load_buffer("Taxi-v3"), get_sandbox()
    with ProviderDouble("openai", answers="capable", latency=latency) as d:
        llm = get_llm("openai:gpt-4o", base_url=d.base_url, cache=tmp/"share.sqlite")
        s = GIFMCTS(llm, lambda src: cwm.evaluate_program(src, buf, sandbox=sb), envs.describe_env("Taxi-v3"),
                    GIFMCTSConfig(), seed=0, checkpoint=tmp/"share.json", progress=False)
        t0 = time.perf_counter(); res = s.run(budget); total = time.perf_counter() - t0
    t = res.timing
    return dict(calls=res.llm_calls, total_s=total, llm_s=t["llm_s"], evaluate_s=t["evaluate_s"],
                search_s=t["search_s"], checkpoint_s=t["checkpoint_s"], outside=(total - t["llm_s"]) / total)


def outage(tmp: Path) -> dict:
    env = {**os.environ, "CWM_NB_LLM_CACHE": str(tmp/"cache.sqlite"), "CWM_NB_LLM_RETRIES": "2"}
    with ProviderDouble("openai", answers="capable", outage_after=3, retry_after=0.2) as d:
        args = ("run", "cwmb", "--env", "Taxi-v3", "--method", "gif-mcts", "--model", "openai:gpt-4o", "--base-url",
                d.base_url, "--budget", 8, "--seed", 0, "--out", tmp/"out", "--plan-preset", "none")
        r1, _ = run_cli(*args, env=env)
        d.restart(outage_after=None)
        r2, _ = run_cli(*args, env=env)
        answered = [q["sha256"] for q in d.requests() if q["path"].endswith("/completions") and q["status"] == 200 and q["delivered"]]
    m = json.loads(next((tmp/"out").rglob("metrics.json")).read_text())
    return dict(first_exit=r1.returncode, second_exit=r2.returncode, answered=len(answered),
                repeated=sum(n - 1 for n in Counter(answered).values()), llm_calls=m["llm_calls"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--latency", type=float, default=1.0, help="seconds the double waits before each answer")
    ap.add_argument("--budget", type=int, default=10, help="LLM calls of the searches")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        clean = main_job(d/"clean", a.budget)
        flaky = main_job(d/"flaky", a.budget, faults="408:1,429:1,503:1", error_body=1, reset=1)
        share = outside_share(a.latency, a.budget, d/"share")
        out = outage(d/"outage")
    print("1. main job over the chat path (CartPole-v1, gif-mcts, budget %d, seed 0, quick planning, 3 episodes)" % a.budget)
    for name, r in (("clean endpoint", clean), ("flaky endpoint", flaky)):
        print(f"   {name:15s} calls {r['llm_calls']} (model {r['model_calls']}), HTTP requests {r['requests']}, "
              f"retries {r['retries']}, accuracy {r['accuracy']:.3f}, R {r['normalized_return']}, "
              f"search {r['search_s']:.1f} s, search and scoring {r['wall_s']:.1f} s, the command {r['command_s']:.1f} s "
              "(kernel start, planning and figures included)")
    print(f"2. GIF-MCTS on Taxi-v3 with {a.latency:g} s per answer: {share['calls']} calls in {share['total_s']:.2f} s; "
          f"LLM {share['llm_s']:.2f} s, evaluation {share['evaluate_s']:.3f} s, search {share['search_s']:.3f} s, "
          f"checkpoint {share['checkpoint_s']:.3f} s; outside the LLM call {100 * share['outside']:.2f} % (goal <= 5 %)")
    print(f"3. outage after 3 answers: first run exit {out['first_exit']}, second run exit {out['second_exit']}, "
          f"{out['llm_calls']} calls in all, {out['answered']} answered requests, {out['repeated']} sent twice (goal 0)")


if __name__ == "__main__":
    main()
