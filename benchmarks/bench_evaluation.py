"""What the extra checks of a final evaluation cost: evaluate_program on 1,000 CartPole transitions, plain (the
paper's accuracy, what a search pays for every program) against with the determinism check (two more sandbox
jobs) and the open-loop rollouts (one more), measured side by side in one run (interleaved, median of repeats).

The 1,000 transitions are the first 1,000 of CartPole buffers collected with `collect_buffer` (the shipped
collection plan) for seeds 1, 2, ... (the shipped buffer has 494). The program is the shipped reference CWM.

Run: .venv/bin/python benchmarks/bench_evaluation.py [--repeats 9] [--transitions 1000]
"""
import argparse, statistics, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CARTPOLE = (ROOT/"data"/"programs"/"CartPole-v1.py").read_text()


def cartpole_transitions(n: int):
    "The first `n` transitions of CartPole buffers of seeds 1, 2, ... (episodes renumbered in order)."
    import numpy as np
    from cwm_nb.bench.replay import ReplayBuffer, collect_buffer
    parts, total, seed = [], 0, 1
    while total < n:
        b = collect_buffer("CartPole-v1", seed)
        parts.append(b); total += len(b); seed += 1
    cat = lambda k: np.concatenate([getattr(b, k) for b in parts])
    episode = np.concatenate([b.episode + 1000 * i for i, b in enumerate(parts)])
    buf = ReplayBuffer(cat("obs"), cat("actions"), cat("next_obs"), cat("rewards"), cat("terminated"), cat("truncated"),
                       episode, meta=dict(parts[0].meta, seed=list(range(1, seed))))
    return buf.select(range(n)), seed - 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--transitions", type=int, default=1000)
    a = ap.parse_args()
    from cwm_nb.bench.cwm import evaluate_program
    from cwm_nb.sandbox.jobs import Sandbox
    buf, seeds = cartpole_transitions(a.transitions)
    kinds = {"plain": {}, "+ determinism": dict(determinism=True), "+ rollouts": dict(rollouts=True),
             "+ both": dict(determinism=True, rollouts=True)}
    times = {k: [] for k in kinds}
    with Sandbox() as sb:
        ev = evaluate_program(CARTPOLE, buf, sandbox=sb, determinism=True, rollouts=True)   # warm up; the buffer is sent once
        for _ in range(a.repeats):
            for k, kw in kinds.items():
                t = time.perf_counter(); evaluate_program(CARTPOLE, buf, sandbox=sb, **kw); times[k].append(time.perf_counter() - t)
    print(f"evaluate_program of the reference CartPole CWM on {len(buf)} transitions ({ev.rollouts['n_rollouts']} episodes, "
          f"collection seeds 1-{seeds}); accuracy {ev.accuracy:.4f}, deterministic {ev.deterministic}; "
          f"median of {a.repeats}, interleaved")
    base = statistics.median(times["plain"])
    for k, v in times.items():
        m = statistics.median(v)
        print(f"  {k:15s} {m * 1e3:8.1f} ms   x {m / base:5.2f}")


if __name__ == "__main__":
    main()
