"""Embedded model throughput on this machine's cores: one server, or several servers side by side.

A sweep runs several jobs at once and each job starts its own embedded server (llama.cpp). This benchmark serves the
same set of calls three ways, one after the other in one run, and prints aggregate throughput and its ratio to A:
  A  one server with `cores` threads, the calls one at a time                      (a sweep with --workers 1)
  B  `cores` servers with 1 thread each, one caller per server at the same time    (--workers = cores, what a sweep
                                                                                     on this machine now does)
  C  `cores` servers with `cores` threads each, one caller per server              (the sweep's old default:
                                                                                     oversubscribed, llama.cpp's
                                                                                     threads spin while they wait)
Every call has a fresh prompt (the call number comes first, so no server reuses a cached prompt prefix) and the same
sampling parameters; throughput = generated tokens of all calls / wall time of the whole configuration (prompt
processing included). No response cache.

Usage: .venv/bin/python benchmarks/bench_threads.py [--calls 8] [--max-tokens 128]
"""
import argparse, os, time
from concurrent.futures import ThreadPoolExecutor
from cwm_nb import llm as L

TASK = ("Write a Python class `Environment` with `set_state(obs)` and `step(action) -> (next_obs, reward, done)` "
        "for CartPole: a pole on a cart moving along a frictionless track; the observation is (cart position, cart "
        "velocity, pole angle, pole angular velocity); action 0 pushes left, 1 right; reward +1 per step; the "
        "episode ends when the pole leans more than 12 degrees or the cart leaves [-2.4, 2.4].")


def messages(i: int, tag: str) -> list[dict]:
    return [{"role": "system", "content": f"Call {tag}-{i}. You write careful, complete Python."},
            {"role": "user", "content": TASK},
            {"role": "assistant", "content": "```python\nimport numpy as np\n\nclass Environment:\n"}]


def serve(tag: str, servers: int, threads: int, calls: int, max_tokens: int) -> tuple[float, int]:
    "Start `servers` servers with `threads` threads each, spread `calls` calls over them; (wall s, generated tokens)."
    srvs = [L.EmbeddedServer(n_threads=threads).start() for _ in range(servers)]
    try:
        llms = [L.OpenAICompatibleLLM(s.url, s.alias, mode="completion", timeout_s=3600.0, max_retries=0,
                                      max_tokens=max_tokens, temperature=1.0, name=f"bench:{s.alias}") for s in srvs]
        for k, m in enumerate(llms): m.complete(messages(-1 - k, tag), seed=0, draw=0)   # warm-up: page in the weights
        def worker(k):
            return sum(llms[k].complete(messages(i, tag), seed=0, draw=i).completion_tokens
                       for i in range(k, calls, servers))
        t0 = time.perf_counter()
        with ThreadPoolExecutor(servers) as ex: toks = sum(ex.map(worker, range(servers)))
        return time.perf_counter() - t0, toks
    finally:
        for s in srvs: s.stop()


def main(calls: int = 8, max_tokens: int = 128):
    cores = os.cpu_count() or 1
    configs = [("A", 1, cores), ("B", cores, 1), ("C", cores, cores)]
    res = {}
    for tag, n, t in configs:
        wall, toks = serve(tag, n, t, calls, max_tokens)
        res[tag] = (wall, toks)
        print(f"{tag}: {n} server(s) x {t} thread(s): {calls} calls, {toks} generated tokens in {wall:.1f} s "
              f"-> {toks / wall:.1f} tokens/s, {60 * calls / wall:.1f} calls/min", flush=True)
    base = res["A"][1] / res["A"][0]
    print(f"\n{cores} cores, embedded Gemma 3 270M, max_tokens {max_tokens}, {calls} calls per configuration")
    for tag, n, t in configs:
        print(f"throughput {tag} / A = {res[tag][1] / res[tag][0] / base:.2f}   ({n} x {t} threads)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=128)
    main(**{k.replace("-", "_"): v for k, v in vars(ap.parse_args()).items()})
