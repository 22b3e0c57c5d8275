"""Embedded model throughput on this machine's cores: one server, or several servers side by side.

A sweep runs several jobs at once and each job starts its own embedded server (llama.cpp). This benchmark serves the
same calls three ways and prints aggregate throughput and its ratio to A, measured side by side in one run:
  A  one server with `cores` threads, the calls one at a time      (a sweep with --workers 1)
  B  `cores` servers with 1 thread each, one caller per server     (--workers = cores: what a sweep on one machine
                                                                    does now, CWM_NB_THREADS = cores / workers)
  C  `cores` servers with 2 threads each, one caller per server    (the sweep's old default: every server kept the
                                                                    embedded default of 2 threads; oversubscribed,
                                                                    and llama.cpp's threads spin while they wait)
The three run one after another within a round, in a rotating order, for `--rounds` rounds; each configuration's
throughput is its total generated tokens / total wall time over the rounds. All configurations get the same calls
(same prompts, seeds and sampling parameters, no response cache); within a server consecutive prompts differ from
their first line on, so no call reuses the previous call's prompt cache. Wall time includes prompt processing.

Usage: .venv/bin/python benchmarks/bench_threads.py [--calls 4*cores] [--rounds 2] [--max-tokens 128]
"""
import argparse, time
from concurrent.futures import ThreadPoolExecutor
from cwm_nb.llm.client import OpenAICompatibleLLM
from cwm_nb.llm.embedded import EmbeddedServer, usable_cpus

TASK = ("Write a Python class `Environment` with `set_state(obs)` and `step(action) -> (next_obs, reward, done)` "
        "for CartPole: a pole on a cart moving along a frictionless track; the observation is (cart position, cart "
        "velocity, pole angle, pole angular velocity); action 0 pushes left, 1 right; reward +1 per step; the "
        "episode ends when the pole leans more than 12 degrees or the cart leaves [-2.4, 2.4].")


def messages(i: int) -> list[dict]:
    return [{"role": "system", "content": f"Call {i}. You write careful, complete Python."},
            {"role": "user", "content": TASK},
            {"role": "assistant", "content": "```python\nimport numpy as np\n\nclass Environment:\n"}]


def serve(servers: int, threads: int, calls: int, max_tokens: int) -> tuple[float, int]:
    "Start `servers` servers with `threads` threads each, spread `calls` calls over them; (wall s, generated tokens)."
    srvs = [EmbeddedServer(n_threads=threads).start() for _ in range(servers)]
    try:
        llms = [OpenAICompatibleLLM(s.url, s.alias, mode="completion", timeout_s=3600.0, max_retries=0,
                                      max_tokens=max_tokens, temperature=1.0, name=f"bench:{s.alias}") for s in srvs]
        for k, m in enumerate(llms): m.complete(messages(-1 - k), seed=0, draw=0)   # warm-up: page in the weights
        def worker(k):
            return sum(llms[k].complete(messages(i), seed=0, draw=i).completion_tokens
                       for i in range(k, calls, servers))
        t0 = time.perf_counter()
        with ThreadPoolExecutor(servers) as ex: toks = sum(ex.map(worker, range(servers)))
        return time.perf_counter() - t0, toks
    finally:
        for s in srvs: s.stop()


def main(calls: int = 0, rounds: int = 2, max_tokens: int = 128):
    cores = usable_cpus()
    calls = calls or 4 * cores                      # every server of B and C gets calls
    configs = [("A", 1, cores), ("B", cores, 1), ("C", cores, 2)]
    res = {tag: [0.0, 0] for tag, _, _ in configs}
    for r in range(rounds):
        for tag, n, t in configs[r % 3:] + configs[:r % 3]:   # rotate the order: drifting load hits all alike
            wall, toks = serve(n, t, calls, max_tokens)
            res[tag][0] += wall; res[tag][1] += toks
            print(f"round {r} {tag}: {n} server(s) x {t} thread(s): {calls} calls, {toks} generated tokens in "
                  f"{wall:.1f} s -> {toks / wall:.1f} tokens/s, {60 * calls / wall:.1f} calls/min", flush=True)
    base = res["A"][1] / res["A"][0]
    print(f"\n{cores} CPUs, embedded Gemma 3 270M, max_tokens {max_tokens}, {calls} calls x {rounds} rounds per configuration")
    for tag, n, t in configs:
        print(f"throughput {tag} / A = {res[tag][1] / res[tag][0] / base:.2f}   ({n} server(s) x {t} thread(s); "
              f"{res[tag][1] / res[tag][0]:.1f} tokens/s, {60 * calls * rounds / res[tag][0]:.1f} calls/min)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=0, help="calls per configuration and round; 0: 4 x CPUs")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=128)
    main(**{k.replace("-", "_"): v for k, v in vars(ap.parse_args()).items()})
