"""Sandbox overhead on the hot path: a correct CartPole CWM predicting 1,000 transitions.

Measured side by side in one run (interleaved, median of repeats):
  in-process : exec(compile(source)) + cwm_predict (set_state/step + strict conversion) + to_plain_value
  sandboxed  : Sandbox.run(source, "cwm_nb.sandbox.drivers:cwm_predict", data_key=...) with the data already put
The goal is sandboxed / in-process <= 1.3. Also shown: the same without pre-forking, the plain-list data
format that 14_cwm sends (lists + dtypes), and the round trip of an empty program.

Each isolation mode (--modes) is measured in the same interleaved loop; the empty program's round trip is the fixed
per-job cost, and for landlock the cost of the per-job ruleset is measured apart (fork + restrict_self vs fork).

Run: .venv/bin/python benchmarks/bench_sandbox.py [--repeats 41] [--n 1000] [--modes bwrap,landlock]
"""
import argparse, statistics, time
from pathlib import Path
import numpy as np

# the tests' CartPole program (written from the physics), so the benchmark scores the same code the tests do
CARTPOLE_CWM = (Path(__file__).resolve().parents[1]/'data'/'programs'/'CartPole-v1.py').read_text()


def collect(n: int, seed: int = 0):
    "n CartPole-v1 transitions under a seeded uniform random policy (resets on termination/truncation)."
    import gymnasium as gym
    env = gym.make("CartPole-v1")
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    O, A, NO, R, D = [], [], [], [], []
    for _ in range(n):
        a = np.int64(rng.integers(2))
        nobs, r, term, trunc, _ = env.step(int(a))
        O.append(obs); A.append(a); NO.append(nobs); R.append(float(r)); D.append(bool(term))
        obs = env.reset()[0] if (term or trunc) else nobs
    return O, A, np.array(NO), np.array(R), np.array(D)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=41)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--modes", default="bwrap,landlock", help="isolation modes to compare, comma-separated (bwrap, landlock, none)")
    a = ap.parse_args()
    from cwm_nb.sandbox.jobs import Sandbox
    from cwm_nb.sandbox.programs import run_in_process, to_plain_value, _execute, _resolve_driver

    O, A, NO, R, D = collect(a.n)
    data = {"obs": O, "actions": A}
    plain = {"obs": np.array(O).tolist(), "actions": np.array(A).tolist(), "obs_dtype": "<f4", "action_dtype": "<i8"}

    # sanity: the program is right, and the sandbox returns what the in-process run returns
    ref = run_in_process(CARTPOLE_CWM, "cwm_nb.sandbox.drivers:cwm_predict", data=data)
    assert ref.ok, ref.error
    pred = ref.value["predictions"]
    nx = np.array([p[0] for p in pred]); rw = np.array([p[1] for p in pred]); dn = np.array([p[2] for p in pred])
    acc = np.mean(np.all(np.isclose(nx, NO, rtol=1e-5, atol=1e-5), axis=1) & (rw == R) & (dn == D))
    print(f"CartPole CWM vs gymnasium on {a.n} transitions: all components right on {acc:.1%}")

    drv = _resolve_driver("cwm_nb.sandbox.drivers:cwm_predict")

    def in_process(d):
        t = time.perf_counter()
        to_plain_value(_execute(CARTPOLE_CWM, drv, None, d))
        return time.perf_counter() - t

    modes = [m for m in a.modes.split(",") if m]
    sbs, nofork = {}, {}
    for m in modes:
        t = time.perf_counter(); sb = Sandbox(isolation=m); t_start = time.perf_counter() - t
        t = time.perf_counter(); sb.put_data("cartpole", data); t_put = time.perf_counter() - t
        sb.put_data("cartpole-plain", plain)
        print(f"sandbox: isolation={sb.isolation}, start {t_start * 1e3:.0f} ms, put_data {t_put * 1e3:.1f} ms")
        sbx = sb.run(CARTPOLE_CWM, "cwm_nb.sandbox.drivers:cwm_predict", data_key="cartpole")
        assert sbx.ok and sbx.value == ref.value, sbx.error
        sbs[m], nofork[m] = sb, Sandbox(isolation=m, prefork=False)
        nofork[m].put_data("cartpole", data)

    def sandboxed(s, key, src=CARTPOLE_CWM, driver="cwm_nb.sandbox.drivers:cwm_predict"):
        t = time.perf_counter()
        r = s.run(src, driver, data_key=key)
        dt = time.perf_counter() - t
        assert r.ok, r.error
        return dt

    for _ in range(5):  # warm up every side
        in_process(data)
        for m in modes: sandboxed(sbs[m], "cartpole"); sandboxed(nofork[m], "cartpole")
    T = {"in_process": [], "in_process_plain": []}
    for m in modes: T.update({f"{m}:{k}": [] for k in ("sandboxed", "no_prefork", "plain", "empty")})
    for rep in range(a.repeats):
        T["in_process"].append(in_process(data))
        T["in_process_plain"].append(in_process(plain))
        for m in (modes if rep % 2 == 0 else modes[::-1]):   # alternate the order: no mode always follows another's cleanup
            T[f"{m}:sandboxed"].append(sandboxed(sbs[m], "cartpole"))
            T[f"{m}:no_prefork"].append(sandboxed(nofork[m], "cartpole"))
            T[f"{m}:plain"].append(sandboxed(sbs[m], "cartpole-plain"))
            time.sleep(0.02)   # let the server finish the previous job's cleanup and pre-fork
            T[f"{m}:empty"].append(sandboxed(sbs[m], None, "pass", "cwm_nb.sandbox.programs:exec_only"))
            time.sleep(0.02)   # and let it finish before the next mode's jobs compete for the CPU
    med = {k: statistics.median(v) for k, v in T.items()}
    for m in modes: sbs[m].close(); nofork[m].close()

    print(f"\n{a.n} transitions, median of {a.repeats} interleaved repeats:")
    print(f"  in-process  (exec + set_state/step + to_plain)  {med['in_process'] * 1e3:7.2f} ms"
          f"  ({med['in_process'] / a.n * 1e6:.1f} us/transition); plain-list data {med['in_process_plain'] * 1e3:.2f} ms")
    print(f"  {'mode':9s} {'sandboxed':>10s} {'ratio':>6s} {'paired':>6s} {'no pre-fork':>11s} {'ratio':>6s} "
          f"{'empty job':>9s} {'plain ratio':>11s}")
    for m in modes:
        paired = statistics.median(s / i for s, i in zip(T[f"{m}:sandboxed"], T["in_process"]))
        print(f"  {m:9s} {med[m + ':sandboxed'] * 1e3:8.2f}ms {med[m + ':sandboxed'] / med['in_process']:6.2f} {paired:6.2f} "
              f"{med[m + ':no_prefork'] * 1e3:9.2f}ms {med[m + ':no_prefork'] / med['in_process']:6.2f} "
              f"{med[m + ':empty'] * 1e3:7.2f}ms {med[m + ':plain'] / med['in_process_plain']:11.2f}")
    print("  (ratio: sandboxed / in-process, goal <= 1.3; empty job: the fixed per-job cost, a `pass` program's round trip)")
    if "landlock" in modes: landlock_setup_cost(a.repeats)
    cpu_timer_cost(2 * a.repeats)


def cpu_timer_cost(n: int) -> None:
    """A fixed cost found in every job: the first finite RLIMIT_CPU of a freshly forked, server-sized process starts
    its CPU timer (slow on a VM); the pre-forked child now does that while it waits (fork_server._arm_cpu_timer)."""
    import os, resource as R, gc
    import cwm_nb.sandbox.drivers, cwm_nb.sandbox.fork_server   # what a server holds (numpy, the job runner, the drivers)
    gc.collect(); gc.freeze()
    def one(pre: bool) -> float:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            if pre: R.setrlimit(R.RLIMIT_CPU, (1 << 30, R.RLIM_INFINITY)); time.sleep(0.005)
            t = time.perf_counter(); R.setrlimit(R.RLIMIT_CPU, (10, 11))
            os.write(w, repr(time.perf_counter() - t).encode()); os._exit(0)
        os.close(w); dt = float(os.read(r, 100)); os.waitpid(pid, 0); os.close(r)
        return dt
    cold, pre = [], []
    for _ in range(n): cold.append(one(False)); pre.append(one(True))
    q = lambda v: f"mean {statistics.mean(v) * 1e3:.3f} ms, 90th percentile {sorted(v)[int(0.9 * len(v))] * 1e3:.3f} ms"
    print(f"\nsetting the job's RLIMIT_CPU in a fresh fork: first time {q(cold)}; timer started in advance {q(pre)}")


def landlock_setup_cost(repeats: int) -> None:
    "What the per-job Landlock ruleset costs: restrict_self timed inside forked children (the pre-forked child pays it)."
    import os, tempfile
    from cwm_nb.sandbox.landlock import make_policy, restrict_self, set_no_new_privs
    from cwm_nb.sandbox.jobs import _landlock_read_paths
    from cwm_nb.sandbox.fork_server import SYSTEM_READ
    policy, d = make_policy(_landlock_read_paths() + list(SYSTEM_READ), ["/dev/null"]), tempfile.mkdtemp()
    def one() -> float:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            set_no_new_privs()
            t = time.perf_counter(); restrict_self(policy, d)
            os.write(w, repr(time.perf_counter() - t).encode()); os._exit(0)
        os.close(w); dt = float(os.read(r, 100)); os.waitpid(pid, 0); os.close(r)
        return dt
    v = [one() for _ in range(repeats)]
    print(f"\nLandlock per job: restrict_self with {len(policy.read) + len(policy.read_write) + 2} path rules, "
          f"median {statistics.median(v) * 1e6:.0f} us (in the pre-forked child, before the job arrives)")


if __name__ == "__main__":
    main()
