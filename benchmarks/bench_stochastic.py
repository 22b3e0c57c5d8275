"""Random worlds, measured side by side in one run: the scores of three programs on slippery FrozenLake and on
Blackjack (the exact-distribution reference, one that ignores the randomness, one with a wrong distribution), what
asking for the distributions costs an evaluation of 1,000 transitions, what the two hidden-state passes add to the
determinism check, and the planner's normalized return with the exact-distribution programs.

Buffers: 1,000 uniform-random transitions of FrozenLake-v1 (default, slippery) and Blackjack-v1 (sab=True) from
`cwm_nb.bench.replay.gym_buffer`, seed 0, plus Blackjack's shipped 14-transition buffer. Programs: `data/programs/`, the
variants in `data/programs/stochastic/variants.json`. Evaluation in the shared sandbox; times are medians of
interleaved repeats.

Planning: Blackjack with `evaluate_planning` (the sandboxed planner, MCTS with chance nodes; oracle and random the
same seeded episodes). FrozenLake is not in the benchmark registry, so its planning runs here, in this process, with
the trusted reference program as the model (`ProgramModel`): the same `mcts_search` with the program's model, with a
model that draws from the environment's own P table (the oracle: the same planner with the real dynamics), and the
uniform random policy, on the same seeded episodes of the real environment.

Run: .venv/bin/python benchmarks/bench_stochastic.py [--repeats 5] [--episodes 1000] [--fl-episodes 100] [--no-planning]
"""
import argparse, json, random, statistics, sys, time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT/"data"/"programs"
VARIANTS = json.loads((PROGRAMS/"stochastic"/"variants.json").read_text())


def source(name, variant=None):
    src = (PROGRAMS/VARIANTS[name]["file"]).read_text()
    for old, new in (VARIANTS[name][variant]["edits"] if variant else []): src = src.replace(old, new)
    return src


class TableModel:
    "The oracle's model of a toy-text environment: set_state(s) / step(a) drawn from the environment's own P[s][a]."
    def __init__(self, P, seed):
        self.P, self.rng, self.steps, self.valid_actions = P, random.Random(seed), 0, None
    def set_state(self, s): self.s = int(s)
    def step(self, a):
        table, u, acc = self.P[self.s][int(a)], self.rng.random(), 0.0
        for p, s, r, d in table:
            acc += p
            if u < acc: break
        self.s, self.steps = int(s), self.steps + 1
        return int(s), float(r), bool(d)


def _fmt(x): return "undefined (oracle = random)" if x is None else f"{x:.2f}"


def play(env, decide, episodes, seed):
    "Mean undiscounted return of `decide(obs, k) -> action` over `episodes` seeded episodes of `env`."
    total = 0.0
    for k in range(episodes):
        obs, _ = env.reset(seed=seed + k)
        while True:
            obs, r, term, trunc, _ = env.step(decide(obs, k))
            total += r
            if term or trunc: break
    return total / episodes


def frozenlake_planning(episodes, seed=0, simulations=200, rollout_steps=30):
    import gymnasium as gym
    from cwm_nb.bench.planning import MCTSConfig, mcts_search, normalized_return
    from cwm_nb.bench.plan_driver import ProgramModel
    cfg = MCTSConfig(simulations=simulations, rollout_steps=rollout_steps)
    env = gym.make("FrozenLake-v1")
    def program_model(src):
        ns = {}; exec(compile(src, "<reference>", "exec"), ns)   # our own reference program: trusted
        return ProgramModel(ns["Environment"](), obs_format="int", n_actions=4)
    def mcts(model):
        rng = np.random.default_rng(seed)
        def decide(obs, k):
            if hasattr(model, "reseed"): model.reseed(int(rng.integers(2**31)))
            return mcts_search(model, int(obs), range(4), cfg, rng).action
        return decide
    rng_r = np.random.default_rng(seed)
    out = {"random": play(env, lambda o, k: int(rng_r.integers(4)), episodes, seed),
           "oracle": play(env, mcts(TableModel(env.unwrapped.P, seed)), episodes, seed)}
    for v in (None, "ignores_randomness"):
        out[v or "exact"] = play(env, mcts(program_model(source("FrozenLake-v1", v))), episodes, seed)
    out["R exact"] = normalized_return(out["exact"], out["random"], out["oracle"])
    out["R ignores_randomness"] = normalized_return(out["ignores_randomness"], out["random"], out["oracle"])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--episodes", type=int, default=1000, help="Blackjack planning episodes per policy")
    ap.add_argument("--fl-episodes", type=int, default=100, help="FrozenLake planning episodes per policy")
    ap.add_argument("--no-planning", action="store_true", help="skip the planning part (minutes)")
    a = ap.parse_args()
    from cwm_nb.bench.cwm import evaluate_program
    from cwm_nb.bench.program_runs import run_on_buffer
    from cwm_nb.bench.rollouts import check_determinism
    from cwm_nb.bench.replay import gym_buffer, load_buffer
    from cwm_nb.sandbox.jobs import get_sandbox
    sb = get_sandbox()
    bufs = {"FrozenLake-v1": gym_buffer("FrozenLake-v1", 1000, seed=0),
            "Blackjack-v1": gym_buffer("Blackjack-v1", 1000, seed=0),
            "Blackjack-v1 (shipped, 14)": load_buffer("Blackjack-v1")}
    print("scores (accuracy, outcome probability, log-likelihood; the log floored at 1e-6)")
    print(f"  {'buffer':28s} {'program':20s} {'accuracy':>9s} {'outcome p':>10s} {'log-lik':>9s} {'likelihood':>10s}")
    for label, buf in bufs.items():
        name = label.split(" ")[0]
        for v in (None, "ignores_randomness", "wrong_distribution"):
            ev = evaluate_program(source(name, v), buf, sandbox=sb)
            assert not ev.bug, ev.error
            print(f"  {label:28s} {v or 'exact':20s} {ev.accuracy:9.4f} {ev.outcome_probability:10.4f} {ev.log_likelihood:9.4f} "
                  f"{np.exp(ev.log_likelihood):10.4f}")

    print(f"\nevaluation time on 1,000 transitions, the exact program (median of {a.repeats}, interleaved)")
    for name in ("FrozenLake-v1", "Blackjack-v1"):
        src, buf, t = source(name), bufs[name], {True: [], False: []}
        evaluate_program(src, buf, sandbox=sb)   # warm: the data is sent once per sandbox
        for _ in range(a.repeats):
            for d in (False, True):
                t0 = time.perf_counter(); evaluate_program(src, buf, sandbox=sb, distributions=d); t[d].append(time.perf_counter() - t0)
        m0, m1 = statistics.median(t[False]), statistics.median(t[True])
        print(f"  {name:14s} step only {1e3 * m0:7.1f} ms   with step_distribution {1e3 * m1:7.1f} ms   ratio {m1 / m0:.2f}")

    print(f"\ndeterminism check: the two old passes (repeat, after_other) against all four (+ twice, fresh); median of {a.repeats}")
    cart = load_buffer("CartPole-v1")
    for name, src, buf in (("CartPole-v1 (494)", (PROGRAMS/"CartPole-v1.py").read_text(), cart),
                           ("FrozenLake-v1 (1000)", source("FrozenLake-v1"), bufs["FrozenLake-v1"])):
        first = run_on_buffer(sb, src, buf, "cwm_nb.sandbox.drivers:cwm_predict").value
        t = {2: [], 4: []}
        for _ in range(a.repeats):
            for k, passes in ((2, ("repeat", "after_other")), (4, ("repeat", "after_other", "twice", "fresh"))):
                t0 = time.perf_counter()
                check_determinism(src, buf, first["predictions"], sandbox=sb, distributions=first.get("distributions"), passes=passes)
                t[k].append(time.perf_counter() - t0)
        m2, m4 = statistics.median(t[2]), statistics.median(t[4])
        print(f"  {name:22s} 2 passes {1e3 * m2:7.1f} ms   4 passes {1e3 * m4:7.1f} ms   ratio {m4 / m2:.2f}")

    if a.no_planning: return
    print(f"\nplanning with the exact-distribution programs (Blackjack {a.episodes}, FrozenLake {a.fl_episodes} episodes per policy)")
    from cwm_nb.bench.oracle import evaluate_planning
    for v in (None, "ignores_randomness"):
        pr = evaluate_planning("Blackjack-v1", source("Blackjack-v1", v), episodes=a.episodes, preset="quick", seed=0, progress=False)
        print(f"  Blackjack-v1  {v or 'exact':20s} return {pr.return_cwm:+.3f}  random {pr.return_random:+.3f}  "
              f"oracle {pr.return_oracle:+.3f}  normalized return R = {_fmt(pr.normalized_return)}  (quick preset, sandboxed)")
    fl = frozenlake_planning(a.fl_episodes)
    for v in ("exact", "ignores_randomness"):
        print(f"  FrozenLake-v1 {v:20s} return {fl[v]:+.3f}  random {fl['random']:+.3f}  oracle {fl['oracle']:+.3f}  "
              f"normalized return R = {_fmt(fl['R ' + v])}  (MCTS 200 simulations, rollouts of 30, in process)")


if __name__ == "__main__":
    main()
