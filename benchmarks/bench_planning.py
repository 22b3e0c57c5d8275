"""Planning cost: how fast the planners drive a CWM, and what one quick-preset evaluation costs per environment.

Part 0: how long a message takes to wake the process reading the pipe, with a blocking read and with the sessions'
polling first (`SPIN_S`), side by side.

Part 1: CWM model steps per second inside the planners ÷ the bare step loop of the same program in the same sandbox.
  bare loop : step_loop_driver, i.e. `set_state(root)` then `env.step(a)` in a plain Python loop (no checks), in a
              sandbox session of its own (one long-lived process, as a planning session has)
  MCTS      : plan_driver with the paper's MCTS (25 simulations, rollouts of 100 steps), CartPole program
  CEM       : plan_driver with CEM (T = 100, 2 iterations of 100 samples), Pendulum program
MCTS and CEM run as `evaluate_planning` runs them: one sandbox session per episode, the model side kept alive. MCTS
plans in this process: the session's job is the model side alone, it streams the tape of its search and this
process replays it (`decide_in_session`, nbs/15a_plan_session.ipynb; the job and this process on CPUs apart). CEM's
planner runs in the job, one call per decision. Steps/s are the planner's model steps over its own planning time
(its `plan_s`), or over the parent's wall time of the decisions ("parent"). Beside the default: for MCTS, the
planner in the job as before (`session, the job's planner`), and its variants: calls through the fork server (a
session whose pipes were not passed), the generic search (`fast_search` off), no polling between the planner and the
model side (`spin_s` 0), the job not polling for the parent's next call (`poll=False`; every session is direct: this
process writes its calls to the job and reads its answers, the fork server is not on the way, 03_sandbox); one-shot
jobs (the model side forked and the program loaded for every decision), and the same planner in this process (no
isolation) with each search.

This machine's speed changes by up to 2x within seconds, so the variants are interleaved in short blocks (MCTS: 20
decisions, about 0.12 s; CEM: 1 decision, about 0.1 s) and each block is divided by the mean rate of the two
bare-loop blocks beside it (a bare block in the same place: sandbox or this process). A ratio is the median over
rounds of those block ratios, with its quartiles; "ms/decision" is the median time of a decision. The goals:
>= 0.7 for the default MCTS and CEM sessions over their own planning time, and >= 0.8 for the default MCTS session
over the parent's wall time (issue #35's P2, "the same, over the parent's wall time" in the MCTS table).

Part 2: the wall time of one quick-preset `evaluate_planning` per environment (10 episodes by default, no
baseline cache): the oracle and random baselines, plus the CWM side. The CWM side uses a program that fails at
every step, so it falls back to random actions and is given up after 5 failures. That times the oracle and random
baselines. A working program is also timed on CartPole, Pendulum and RTFM.

Run: .venv/bin/python benchmarks/bench_planning.py [--rounds 30] [--episodes 10] [--envs CartPole-v1 Ant-v4 ...] [--skip-part2]
     [--modes bwrap,landlock]
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


def wake_latency(spin: float, rounds: int = 300, gap_s: float = 0.0005) -> float:
    """Median microseconds from the planner's write of 8 bytes to the model side's `_read_n` returning them, with
    `spin` seconds of polling (0: a blocking read). The writer is busy `gap_s` between messages, about the time between
    two pieces of an MCTS tape."""
    from cwm_nb.bench.plan_driver import _read_n
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
    from cwm_nb.sandbox.syscalls import SPIN_S
    print("Part 0: waking the other side of a pipe (a message every 0.5 ms, median of 300)")
    print(f"  blocking read: {wake_latency(0.0):6.1f} µs   polling first (SPIN_S = {SPIN_S * 1e3:g} ms): {wake_latency(SPIN_S):6.1f} µs\n")


class Blocks:
    "Rates of interleaved blocks: each variant block against the mean of the bare blocks before and after it."
    def __init__(self): self.ratios, self.rates, self.last_bare, self.pending = {}, {}, None, []

    def bare(self, rate: float) -> None:
        for name, r in self.pending: self.ratios.setdefault(name, []).append(r / ((self.last_bare + rate) / 2))
        self.last_bare, self.pending = rate, []
        self.rates.setdefault("bare", []).append(rate)

    def variant(self, name: str, rate: float) -> None:
        self.pending.append((name, rate)); self.rates.setdefault(name, []).append(rate)

    def row(self, name: str, label: str, steps: float) -> str:
        q = statistics.quantiles(self.ratios[name], n=4) if len(self.ratios[name]) > 1 else [self.ratios[name][0]] * 3
        rate = statistics.median(self.rates[name])
        return f"  {label:44s} {q[1]:6.2f}   {q[0]:5.2f}-{q[2]:<5.2f} {rate:11,.0f} {1e3 * steps / rate:12.2f}"


def measure(sb, program, static, roots, rounds, per_block, bare_steps) -> tuple[Blocks, float]:
    "Interleaved blocks of every variant for `rounds` rounds: (the blocks, median model steps per decision)."
    from cwm_nb.sandbox.programs import SandboxLimits
    from cwm_nb.bench.plan_driver import _plan, _program_model
    from cwm_nb.bench.plan_session import decide_in_session
    lim = SandboxLimits(wall_s=600, cpu_s=10**5)
    mcts = static["planner"] == "mcts"   # the generic search is MCTS's alone
    variants = {"session": {}, **({"job plans": {}, "generic": {"fast_search": False}} if mcts else {}),
                "no polling": {"spin_s": 0.0}}
    here = {**static, "model_only": True}   # MCTS's default: this process plans, the job is the model side (15b)
    planned_here = "session" if mcts else None   # the variant this process plans
    over_wall = {"session": "parent", "job plans": "job plans parent", "job waits": "job waits parent",
                 "server": "server parent"}   # the variants also timed over the parent's wall time
    sessions = {}
    for name, extra in variants.items():
        caller = name == planned_here
        first, s = sb.open_session(program, "cwm_nb.bench.plan_driver:plan_driver", args={**(here if caller else static), **extra},
                                   limits=lim, poll=True, apart=caller)   # as evaluate_planning opens it (15b)
        assert s is not None and (not caller or s.direct), first.error
        sessions[name] = s
    first, s = sb.open_session(program, "cwm_nb.bench.plan_driver:plan_driver", args=static, limits=lim,
                               poll=False)   # the default session, its job not polling for the next call
    assert s is not None, first.error
    sessions["job waits"] = s
    from cwm_nb.sandbox.jobs import SandboxSession   # the default session, its calls run by the fork server (the
    first, sid, pipes = sb._submit(program, "cwm_nb.bench.plan_driver:plan_driver", static, None, lim,   # path of a
                                   session=True, poll=True)                                             # session whose
    assert sid is not None and first.ok, first.error                                                   # pipes could
    if pipes is not None: pipes.close()                                                                 # not be passed)
    sessions["server"] = SandboxSession(sb, sid, lim, None, True)
    bare_args = {"state": roots[0], "obs_format": "array", "obs_dtype": "<f4", "space": static["space"], "seed": 1,
                 "steps": bare_steps}
    first, bare = sb.open_session(program, "cwm_nb.bench.plan_driver:step_loop_driver", args={**bare_args, "session": True}, limits=lim)
    assert bare is not None, first.error
    model = _program_model(_load(program), static)   # the program loaded once in this process, as in a session
    blocks, per_decision, k = Blocks(), [], 0

    def decisions():
        nonlocal k
        out = [{"state": roots[(k + j) % len(roots)], "obs_dtype": "<f4", "root_actions": None, "seed": k + j}
               for j in range(per_block)]
        k += per_block
        return out

    def sandbox_bare():
        r = bare.call({"seed": k}); assert r.ok, r.error
        blocks.bare(r.value["model_steps"] / r.value["plan_s"])

    for rnd in range(rounds):
        sandbox_bare()
        order = list(sessions.items())   # each variant in turn right after the bare block: no place favours one
        for name, s in order[rnd % len(order):] + order[:rnd % len(order)]:
            steps = plan = wall = 0.0
            for c in decisions():
                t = time.perf_counter()
                r = decide_in_session(s, program, here, c) if name == planned_here else s.call(c)
                wall += time.perf_counter() - t
                assert r.ok, r.error
                steps += r.value["model_steps"]; plan += r.value["plan_s"]
                if name == "session": per_decision.append(r.value["model_steps"])
            blocks.variant(name, steps / plan)
            if name in over_wall: blocks.variant(over_wall[name], steps / wall)
            sandbox_bare()
        c = decisions()[0]   # one-shot: a job per decision (forked, the program loaded)
        r = sb.run(program, "cwm_nb.bench.plan_driver:plan_driver", args={**static, **c, "session": False}, limits=lim)
        assert r.ok, r.error
        blocks.variant("one-shot", r.value["model_steps"] / r.value["plan_s"])
        sandbox_bare()
    local = Blocks()   # the same planner in this process, against the bare loop in this process
    for _ in range(rounds):
        local.bare(_local_bare(program, bare_args))
        for name, extra in (("in-process", {}), ("in-process generic", {"fast_search": False}))[:2 if mcts else 1]:
            steps = plan = 0.0
            for c in decisions():
                v = _plan(model, {**static, **extra, **c, "session": False})
                steps += v["model_steps"]; plan += v["plan_s"]
            local.variant(name, steps / plan)
            local.bare(_local_bare(program, bare_args))
    for s in (*sessions.values(), bare): s.close()
    blocks.ratios.update(local.ratios); blocks.rates.update({n: v for n, v in local.rates.items() if n != "bare"})
    return blocks, statistics.median(per_decision)


def _local_bare(program: str, args: dict) -> float:
    from cwm_nb.sandbox.programs import run_in_process
    v = run_in_process(program, "cwm_nb.bench.plan_driver:step_loop_driver", args=args).value
    return v["model_steps"] / v["plan_s"]


def part1(rounds, mode="auto"):
    from cwm_nb.bench.planning import CEMConfig, MCTSConfig
    from cwm_nb.bench.plan_driver import _fast_search
    from cwm_nb.sandbox.jobs import Sandbox
    print(f"Part 1: CWM model steps per second inside the planners ÷ the bare step loop (same program, same sandbox); "
          f"median of {rounds} rounds of interleaved blocks, quartiles beside")
    print(f"  compiled MCTS loop: {'built' if _fast_search({}) else 'NOT BUILT (every row uses the generic search)'}")
    rng = random.Random(0)
    rows = [("session", "session (default)"), ("parent", "  the same, over the parent's wall time"),
            ("job plans", "session, the job's planner (before)"), ("job plans parent", "  the same, over the parent's wall time"),
            ("job waits", "session, job not polling for calls"), ("job waits parent", "  the same, over the parent's wall time"),
            ("server", "session, calls through the fork server"), ("server parent", "  the same, over the parent's wall time"),
            ("generic", "session, generic search"), ("no polling", "session, planner and model side not polling"),
            ("one-shot", "one-shot jobs (fork and load per decision)"), ("in-process", "in this process, no isolation"),
            ("in-process generic", "in this process, generic search")]
    with Sandbox(isolation=mode) as sb:
        print(f"  isolation: {sb.isolation}")
        space = {"kind": "discrete", "n": 2}
        roots = [[rng.uniform(-0.05, 0.05) for _ in range(4)] for _ in range(40)]
        static = {"planner": "mcts", "config": asdict(MCTSConfig()), "obs_format": "array", "space": space,
                  "valid_actions": False, "session": True, "decision_cpu_s": 60}
        b, n = measure(sb, CARTPOLE, static, roots, rounds, per_block=20, bare_steps=12000)
        print(f"\nMCTS, CartPole: {n:,.0f} model steps per decision, bare loop {statistics.median(b.rates['bare']):,.0f} steps/s (median)")
        print(f"  {'':44s} {'ratio':>6s}   {'quartiles':11s} {'steps/s':>11s} {'ms/decision':>12s}   (goals: >= 0.7; >= 0.8 over the parent's wall time; default: compiled loop, planner and model side polling)")
        for name, label in rows: print(b.row(name, label, n))
        space = {"kind": "continuous", "low": [-2.0], "high": [2.0]}
        roots = [[math.cos(a), math.sin(a), rng.uniform(-1, 1)] for a in (rng.uniform(-3, 3) for _ in range(40))]
        static = {"planner": "cem", "config": asdict(CEMConfig(horizon=100, iterations=2, samples=100, elites=10)),
                  "obs_format": "array", "space": space, "valid_actions": False, "session": True, "decision_cpu_s": 60}
        b, n = measure(sb, PENDULUM_OK, static, roots, max(rounds // 2, 2), per_block=1, bare_steps=20000)
        print(f"\nCEM, Pendulum: {n:,.0f} model steps per decision, bare loop {statistics.median(b.rates['bare']):,.0f} steps/s (median)")
        print(f"  {'':44s} {'ratio':>6s}   {'quartiles':11s} {'steps/s':>11s} {'ms/decision':>12s}   (goal >= 0.7; default: polling)")
        for name, label in rows:
            if "generic" not in name and "job plans" not in name: print(b.row(name, label, n))


def part2(episodes, names):
    from cwm_nb.bench.envs import env_names
    from cwm_nb.bench.oracle import evaluate_planning
    from cwm_nb.sandbox.jobs import Sandbox
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
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--episodes", type=int, default=10)
    ap.add_argument("--envs", nargs="*", default=None)
    ap.add_argument("--skip-part2", action="store_true")
    ap.add_argument("--modes", default="auto", help="isolation modes of part 1, comma-separated (bwrap, landlock, none; auto: the default)")
    a = ap.parse_args()
    t = time.perf_counter()
    part0()
    for mode in a.modes.split(","): part1(a.rounds, mode)
    if not a.skip_part2: part2(a.episodes, a.envs)
    print(f"\nbenchmark wall time: {time.perf_counter() - t:.0f} s")


if __name__ == "__main__":
    main()
