"""Planning cost: how fast the planners drive a CWM, and what one quick-preset evaluation costs per environment.

Part 1, measured side by side in one run (interleaved jobs in the same sandbox, median of repeats):
  bare loop : step_loop_driver, i.e. `set_state(root)` then `env.step(a)` in a plain Python loop (no checks)
  MCTS      : plan_driver with the paper's MCTS (25 simulations, rollouts of 100 steps), CartPole program
  CEM       : plan_driver with CEM (T = 100, 2 iterations of 100 samples), Pendulum program
Each job reports its own model steps and planning time (measured inside the sandbox child, so the fork and
the program's top level are not counted). The goal is planner steps/s ÷ bare steps/s >= 0.7.

Part 2: the wall time of one quick-preset `evaluate_planning` per environment (10 episodes by default, no
baseline cache): the oracle and random baselines, plus the CWM side. The CWM side uses a program that fails at
every step, so it falls back to random actions and is given up after 5 failures. That times the oracle and random
baselines. A working program is also timed on CartPole, Pendulum and RTFM.

Run: .venv/bin/python benchmarks/bench_planning.py [--repeats 7] [--episodes 10] [--envs CartPole-v1 Ant-v4 ...]
"""
import argparse, os, statistics, sys, tempfile, time, warnings
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CARTPOLE = (ROOT/"data"/"programs"/"CartPole-v1.py").read_text()
RTFM = (ROOT/"data"/"programs"/"rtfm.py").read_text()
sys.path.insert(0, str(ROOT/"tests"))
from test_planning import PENDULUM_OK, FAILS_EVERY_STEP   # noqa: E402  (the tests' programs)


def rates(sb, program, driver_args, bare_args, repeats):
    "Median steps/s of the planner and of the bare loop, interleaved."
    from cwm_nb.planning import SandboxLimits
    lim = SandboxLimits(wall_s=300, cpu_s=300)
    plan, bare = [], []
    for _ in range(repeats):
        for args, out in ((driver_args, plan), (bare_args, bare)):
            r = sb.run(program, "cwm_nb.planning:" + ("plan_driver" if out is plan else "step_loop_driver"),
                       args=args, limits=lim)
            assert r.ok, r.error
            out.append(r.value["model_steps"] / r.value["plan_s"])
            if out is plan: steps = r.value["model_steps"]
    return statistics.median(plan), statistics.median(bare), steps


def part1(repeats):
    from cwm_nb.planning import CEMConfig, MCTSConfig
    from cwm_nb.sandbox import Sandbox
    print("Part 1: CWM steps per second inside the planners vs the bare step loop (same program, same sandbox)")
    print(f"{'planner':8s} {'program':10s} {'planner steps/s':>16s} {'bare steps/s':>13s} {'ratio':>6s}  (goal >= 0.7)")
    with Sandbox() as sb:
        cp = {"state": [0.01, -0.02, 0.03, 0.01], "obs_format": "array", "obs_dtype": "<f4",
              "space": {"kind": "discrete", "n": 2}, "seed": 1}
        mcts = dict(cp, planner="mcts", config=asdict(MCTSConfig()))
        p, b, n = rates(sb, CARTPOLE, mcts, dict(cp, steps=2500), repeats)
        print(f"{'MCTS':8s} {'CartPole':10s} {p:16,.0f} {b:13,.0f} {p / b:6.2f}  ({n} model steps per decision)")
        pe = {"state": [0.9, 0.43, 0.5], "obs_format": "array", "obs_dtype": "<f4",
              "space": {"kind": "continuous", "low": [-2.0], "high": [2.0]}, "seed": 1}
        cem = dict(pe, planner="cem", config=asdict(CEMConfig(horizon=100, iterations=2, samples=100, elites=10)))
        p, b, n = rates(sb, PENDULUM_OK, cem, dict(pe, steps=20000), repeats)
        print(f"{'CEM':8s} {'Pendulum':10s} {p:16,.0f} {b:13,.0f} {p / b:6.2f}  ({n} model steps per decision)")


def part2(episodes, names):
    from cwm_nb.envs import env_names
    from cwm_nb.planning import evaluate_planning
    from cwm_nb.sandbox import Sandbox
    names = names or env_names()
    print(f"\nPart 2: one quick-preset evaluate_planning per environment, {episodes} episodes, no baseline cache")
    print(f"{'environment':27s} {'planner':7s} {'program':9s} {'wall s':>7s} {'oracle':>9s} {'random':>9s} "
          f"{'cwm':>9s} {'R':>6s} {'oracle model steps':>18s}")
    total = 0.0
    with Sandbox() as sb, tempfile.TemporaryDirectory() as cache:
        os.environ["CWM_NB_CACHE"] = cache
        runs = [(n, "fails", FAILS_EVERY_STEP) for n in names]
        runs += [(n, "correct", src) for n, src in (("CartPole-v1", CARTPOLE), ("Pendulum-v1", PENDULUM_OK), ("rtfm", RTFM))
                 if n in names]
        for name, label, src in runs:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                r = evaluate_planning(name, src, episodes=episodes, preset="quick", sandbox=sb, progress=False,
                                      use_cache=False)
            total += r.wall_s
            R = "N/A" if r.normalized_return is None else f"{r.normalized_return:.2f}"
            print(f"{name:27s} {r.planner:7s} {label:9s} {r.wall_s:7.1f} {r.return_oracle:9.1f} {r.return_random:9.1f} "
                  f"{r.return_cwm:9.1f} {R:>6s} {r.model_steps_oracle:18,d}", flush=True)
    print(f"{'total':27s} {'':7s} {'':9s} {total:7.1f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--episodes", type=int, default=10)
    ap.add_argument("--envs", nargs="*", default=None)
    ap.add_argument("--skip-part2", action="store_true")
    a = ap.parse_args()
    t = time.perf_counter()
    part1(a.repeats)
    if not a.skip_part2: part2(a.episodes, a.envs)
    print(f"\nbenchmark wall time: {time.perf_counter() - t:.0f} s")


if __name__ == "__main__":
    main()
