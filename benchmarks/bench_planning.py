"""Planning cost: how fast the planners drive a CWM, and what one quick-preset evaluation costs per environment.

Part 0: how long a message takes to wake the process reading the pipe, with a blocking read and with the sessions'
polling first (`SPIN_S`), side by side.

Part 1, measured side by side in one run (interleaved in the same sandbox, median of repeats):
  bare loop : step_loop_driver, i.e. `set_state(root)` then `env.step(a)` in a plain Python loop (no checks)
  MCTS      : plan_driver with the paper's MCTS (25 simulations, rollouts of 100 steps), CartPole program
  CEM       : plan_driver with CEM (T = 100, 2 iterations of 100 samples), Pendulum program
MCTS and CEM run as the planner runs them in `evaluate_planning`: one sandbox session per episode, one call per
decision (40 decisions from different roots), the model side kept alive; steps/s are the planner's model steps
over its own planning time (inside) and over the parent's wall time of the calls (parent). For comparison, the
same decisions as one-shot jobs (the model side forked and the program loaded for every decision, as before
sessions). The bare loop's time is measured inside its job, around the loop only, beside each repeat; a ratio is
the median over repeats of planner steps/s ÷ the bare steps/s of the same repeat. The goal is >= 0.7. Each repeat
also runs the session with SPIN_S = 0 (no polling before a blocking read), to show what polling buys.

Part 2: the wall time of one quick-preset `evaluate_planning` per environment (10 episodes by default, no
baseline cache): the oracle and random baselines, plus the CWM side. The CWM side uses a program that fails at
every step, so it falls back to random actions and is given up after 5 failures. That times the oracle and random
baselines. A working program is also timed on CartPole, Pendulum and RTFM.

Run: .venv/bin/python benchmarks/bench_planning.py [--repeats 7] [--episodes 10] [--envs CartPole-v1 Ant-v4 ...] [--skip-part2]
"""
import argparse, math, os, random, statistics, struct, sys, tempfile, time, warnings
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CARTPOLE = (ROOT/"data"/"programs"/"CartPole-v1.py").read_text()
RTFM = (ROOT/"data"/"programs"/"rtfm.py").read_text()
sys.path.insert(0, str(ROOT/"tests"))
from test_planning import PENDULUM_OK, FAILS_EVERY_STEP   # noqa: E402  (the tests' programs)


def _load(source: str) -> dict:
    "The namespace of a trusted program run in this process (the benchmark's own shipped programs only)."
    ns: dict = {}
    exec(compile(source, "<cwm-program>", "exec"), ns)
    return ns


def session_rates(sb, program, static, roots, repeats, bare_args):
    """Median over repeats, measured side by side: planner steps/s over the decisions of one session (the planner's
    own plan_s; and the parent's wall time per call), of one-shot jobs (fork and load per decision), and the bare loop."""
    from cwm_nb.planning import SandboxLimits
    lim = SandboxLimits(wall_s=300, cpu_s=300)
    from cwm_nb.sandbox import run_in_process
    from cwm_nb.plan_driver import _plan, _program_model
    inside, outside, oneshot, bare, per_decision, local, blocking = [], [], [], [], [], [], []

    def session(args):   # (model steps, planner's plan_s, parent's wall s) over the decisions of one session
        first, s = sb.open_session(program, "cwm_nb.planning:plan_driver", args=args, limits=SandboxLimits(wall_s=300, cpu_s=10**5))
        assert s is not None, first.error
        steps = plan = wall = 0.0
        for k, root in enumerate(roots):
            t = time.perf_counter()
            r = s.call({"state": root, "obs_dtype": "<f4", "root_actions": None, "seed": k})
            wall += time.perf_counter() - t
            assert r.ok, r.error
            steps += r.value["model_steps"]; plan += r.value["plan_s"]
        s.close()
        return steps, plan, wall

    for _ in range(repeats):
        steps, plan, wall = session(static)
        inside.append(steps / plan); outside.append(steps / wall); per_decision.append(steps / len(roots))
        steps, plan, _ = session({**static, "spin_s": 0.0})   # both sides block at once on an empty pipe (no polling)
        blocking.append(steps / plan)
        steps = plan = 0.0
        for k, root in enumerate(roots[:3]):
            r = sb.run(program, "cwm_nb.planning:plan_driver", args={**static, "session": False, "state": root,
                                                                      "obs_dtype": "<f4", "root_actions": None, "seed": k}, limits=lim)
            assert r.ok, r.error
            steps += r.value["model_steps"]; plan += r.value["plan_s"]
        oneshot.append(steps / plan)
        r = sb.run(program, "cwm_nb.planning:step_loop_driver", args=bare_args, limits=lim)
        assert r.ok, r.error
        bare.append(r.value["model_steps"] / r.value["plan_s"])
        steps = plan = 0.0   # the ceiling: the same decisions in this process (the program loaded once, as in a
        model = _program_model(_load(program), static)   # session), no isolation, against the bare loop here
        for k, root in enumerate(roots):
            v = _plan(model, {**static, "session": False, "state": root, "obs_dtype": "<f4", "root_actions": None, "seed": k})
            steps += v["model_steps"]; plan += v["plan_s"]
        v = run_in_process(program, "cwm_nb.planning:step_loop_driver", args=bare_args).value
        local.append((steps / plan) / (v["model_steps"] / v["plan_s"]))
    med = statistics.median   # ratios per repeat (each against the bare loop measured beside it), then their median
    ratio = lambda xs: med(x / b for x, b in zip(xs, bare))
    return med(inside), med(outside), med(oneshot), med(bare), med(per_decision), med(local), \
        ratio(inside), ratio(outside), ratio(oneshot), ratio(blocking)


def wake_latency(spin: float, rounds: int = 300, gap_s: float = 0.0005) -> float:
    """Median microseconds from the planner's write of 8 bytes to the model side's `_read_n` returning them, with
    `spin` seconds of polling (0: a blocking read). The writer is busy `gap_s` between messages, about the time between
    two pieces of an MCTS tape."""
    from cwm_nb.plan_driver import _read_n
    a_r, a_w = os.pipe(); b_r, b_w = os.pipe()
    pid = os.fork()
    if pid == 0:   # the reader: stamps the time its read returned
        try:
            os.close(a_w); os.close(b_r)
            while _read_n(a_r, 8, spin) is not None: os.write(b_w, struct.pack("<d", time.perf_counter()))
        finally: os._exit(0)
    os.close(a_r); os.close(b_w)
    lat = []
    for _ in range(rounds):
        t = time.perf_counter(); os.write(a_w, b"x" * 8)
        lat.append(struct.unpack("<d", os.read(b_r, 8))[0] - t)
        end = time.perf_counter() + gap_s
        while time.perf_counter() < end: pass
    os.close(a_w); os.close(b_r); os.waitpid(pid, 0)
    return statistics.median(lat) * 1e6


def part0():
    from cwm_nb.plan_driver import SPIN_S
    print("Part 0: waking the other side of a pipe (a message every 0.5 ms, median of 300)")
    print(f"  blocking read: {wake_latency(0.0):6.1f} µs   polling first (SPIN_S = {SPIN_S * 1e3:g} ms): {wake_latency(SPIN_S):6.1f} µs\n")


def part1(repeats, decisions=40):
    from cwm_nb.planning import CEMConfig, MCTSConfig
    from cwm_nb.sandbox import Sandbox
    print("Part 1: CWM steps per second inside the planners vs the bare step loop (same program, same sandbox, "
          f"interleaved, median of {repeats})")
    print("  session (inside): the planner's own plan_s over the decisions of one episode's session (the program loaded once)")
    print("  session (parent): the parent's wall time per decision call (server round trip included)")
    print("  one-shot: one sandbox job per decision, as before sessions (the model side forked and loaded each time)")
    print("  in-process: the ratio of the same planner with the program loaded once in this process (no isolation), the ceiling")
    print("  no polling: the session's ratio with SPIN_S = 0 (each side blocks on an empty pipe at once), measured beside it")
    print(f"{'planner':8s} {'program':9s} {'steps/dec':>9s} {'bare':>9s} {'session in':>10s} {'ratio':>6s} "
          f"{'session par':>11s} {'ratio':>6s} {'one-shot':>9s} {'ratio':>6s} {'in-process':>10s} {'no polling':>10s}  (goal >= 0.7)")
    rng = random.Random(0)
    with Sandbox() as sb:
        space = {"kind": "discrete", "n": 2}
        roots = [[rng.uniform(-0.05, 0.05) for _ in range(4)] for _ in range(decisions)]
        static = {"planner": "mcts", "config": asdict(MCTSConfig()), "obs_format": "array", "space": space,
                  "valid_actions": False, "session": True, "decision_cpu_s": 60}
        bare = {"state": roots[0], "obs_format": "array", "obs_dtype": "<f4", "space": space, "seed": 1, "steps": 25000}
        i, o, one, b, n, loc, ri, ro, r1, rb = session_rates(sb, CARTPOLE, static, roots, repeats, bare)
        print(f"{'MCTS':8s} {'CartPole':9s} {n:9,.0f} {b:9,.0f} {i:10,.0f} {ri:6.2f} {o:11,.0f} {ro:6.2f} "
              f"{one:9,.0f} {r1:6.2f} {loc:10.2f} {rb:10.2f}")
        space = {"kind": "continuous", "low": [-2.0], "high": [2.0]}
        roots = [[math.cos(a), math.sin(a), rng.uniform(-1, 1)] for a in (rng.uniform(-3, 3) for _ in range(decisions))]
        static = {"planner": "cem", "config": asdict(CEMConfig(horizon=100, iterations=2, samples=100, elites=10)),
                  "obs_format": "array", "space": space, "valid_actions": False, "session": True, "decision_cpu_s": 60}
        bare = {"state": roots[0], "obs_format": "array", "obs_dtype": "<f4", "space": space, "seed": 1, "steps": 40000}
        i, o, one, b, n, loc, ri, ro, r1, rb = session_rates(sb, PENDULUM_OK, static, roots, repeats, bare)
        print(f"{'CEM':8s} {'Pendulum':9s} {n:9,.0f} {b:9,.0f} {i:10,.0f} {ri:6.2f} {o:11,.0f} {ro:6.2f} "
              f"{one:9,.0f} {r1:6.2f} {loc:10.2f} {rb:10.2f}")


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
    part0()
    part1(a.repeats)
    if not a.skip_part2: part2(a.episodes, a.envs)
    print(f"\nbenchmark wall time: {time.perf_counter() - t:.0f} s")


if __name__ == "__main__":
    main()
