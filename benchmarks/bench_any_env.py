"""Environments outside the benchmark, measured: what the model is told, the buffer, a hand-written program's score,
and the planner's normalized return.

For each environment: the first lines of the description the model sees (generated from the environment), the replay
buffer's size and its collection time (the first `cached_buffer` call, which collects and saves into a fresh cache)
beside the time of the second call (read back from the cache), the accuracy of a hand-written program on that buffer
(in the sandbox), and the normalized return R of the planner with that program (`evaluate_planning`, quick preset),
or why there is no oracle.

Environments: FrozenLake-v1 (toy text, is_slippery=False), MountainCarContinuous-v0 (classic control, CEM), the
corridor of tests/toy_envs.py (an entry point of one's own), and LunarLander-v3 when Box2D is installed (extra
`box2d`; no hand-written program: its description, buffer and oracle only).

Run: .venv/bin/python benchmarks/bench_any_env.py [--episodes 5] [--seed 0]
"""
import argparse, os, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT/"tests")]

MCC_CWM = '''import math
import numpy as np

class Environment:
    "MountainCarContinuous-v0: gymnasium's update rule, written by hand."
    def set_state(self, obs):
        self.pos, self.vel = float(obs[0]), float(obs[1])

    def step(self, action):
        a = float(np.asarray(action).ravel()[0])
        force = min(max(a, -1.0), 1.0)
        vel = min(max(self.vel + force * 0.0015 - 0.0025 * math.cos(3 * self.pos), -0.07), 0.07)
        pos = min(max(self.pos + vel, -1.2), 0.6)
        if pos == -1.2 and vel < 0: vel = 0.0
        done = pos >= 0.45 and vel >= 0
        self.pos, self.vel = float(np.float32(pos)), float(np.float32(vel))
        return np.array([pos, vel], dtype=np.float32), (100.0 if done else 0.0) - a * a * 0.1, done
'''


def cases():
    yield "FrozenLake-v1", {"is_slippery": False}, (ROOT/"tests"/"toy_frozenlake_cwm.py").read_text()
    yield "MountainCarContinuous-v0", None, MCC_CWM
    yield "toy_envs:Corridor", None, (ROOT/"tests"/"toy_corridor_cwm.py").read_text()
    try:
        import Box2D  # noqa: F401
        yield "LunarLander-v3", None, None
    except ImportError:
        print("LunarLander-v3: skipped, Box2D is not installed (pip install -e '.[box2d]')\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=5, help="real episodes per policy for R")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    os.environ["CWM_NB_CACHE"] = tempfile.mkdtemp()      # a fresh cache: the first call collects
    from cwm_nb.bench.envs import resolve_env
    from cwm_nb.bench.replay import cached_buffer, summarize_buffer
    from cwm_nb.bench.cwm import evaluate_program
    from cwm_nb.bench.oracle import evaluate_planning
    from cwm_nb.bench.oracle import oracle_problem
    for env, kwargs, program in cases():
        spec = resolve_env(env, kwargs)
        print(f"== {spec.name}  (id/entry point {spec.gym_id or spec.entry_point}, kwargs {spec.make_kwargs}, "
              f"planner {spec.planner}, horizon {spec.horizon})")
        print("   description, first lines:")
        for line in spec.description.splitlines()[:4]: print("   | " + line)
        t0 = time.perf_counter(); buf = cached_buffer(spec, a.seed); t1 = time.perf_counter()
        cached_buffer(spec, a.seed); t2 = time.perf_counter()
        s = summarize_buffer(buf)
        print(f"   buffer: {s['transitions']} transitions, {s['episodes']} episodes ({s['terminated']} terminated, "
              f"{s['truncated']} truncated); collected in {t1 - t0:.3f} s, read back in {t2 - t1:.4f} s")
        if program is None:
            why = oracle_problem(spec)
            print(f"   no hand-written program; oracle: {'available' if why is None else 'none, because ' + why}\n")
            continue
        ev = evaluate_program(program, buf)
        pr = evaluate_planning(spec, program, episodes=a.episodes, preset="quick", seed=a.seed, progress=False)
        r = "n/a" if pr.normalized_return is None else f"{pr.normalized_return:.3f}"
        ro = "n/a" if pr.return_oracle is None else f"{pr.return_oracle:.2f}"
        print(f"   hand-written program: accuracy {ev.accuracy:.4f}, exact replay {ev.exact_replay:.4f}")
        print(f"   planning ({pr.planner}, quick, {a.episodes} episodes): returns CWM {pr.return_cwm:.2f}, random "
              f"{pr.return_random:.2f}, oracle {ro}; R = {r}" + (f" [{pr.oracle_note}]" if pr.oracle_note else "")
              + f"; {pr.wall_s:.1f} s\n")


if __name__ == "__main__":
    main()
