"""Sandbox overhead on the hot path: a correct CartPole CWM predicting 1,000 transitions.

Measured side by side in one run (interleaved, median of repeats):
  in-process : exec(compile(source)) + cwm_predict (set_state/step + strict conversion) + to_plain_value
  sandboxed  : Sandbox.run(source, "cwm_nb.sandbox:cwm_predict", data_key=...) with the data already put
The goal is sandboxed / in-process <= 1.3. Also shown: the same without pre-forking, the plain-list data
format that 06_cwm sends (lists + dtypes), and the round trip of an empty program.

Run: .venv/bin/python benchmarks/bench_sandbox.py [--repeats 41] [--n 1000]
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
    a = ap.parse_args()
    from cwm_nb.sandbox import Sandbox, run_in_process, to_plain_value, _execute, _resolve_driver

    O, A, NO, R, D = collect(a.n)
    data = {"obs": O, "actions": A}
    plain = {"obs": np.array(O).tolist(), "actions": np.array(A).tolist(), "obs_dtype": "<f4", "action_dtype": "<i8"}

    # sanity: the program is right, and the sandbox returns what the in-process run returns
    ref = run_in_process(CARTPOLE_CWM, "cwm_nb.sandbox:cwm_predict", data=data)
    assert ref.ok, ref.error
    pred = ref.value["predictions"]
    nx = np.array([p[0] for p in pred]); rw = np.array([p[1] for p in pred]); dn = np.array([p[2] for p in pred])
    acc = np.mean(np.all(np.isclose(nx, NO, rtol=1e-5, atol=1e-5), axis=1) & (rw == R) & (dn == D))
    print(f"CartPole CWM vs gymnasium on {a.n} transitions: all components right on {acc:.1%}")

    drv = _resolve_driver("cwm_nb.sandbox:cwm_predict")

    def in_process(d):
        t = time.perf_counter()
        to_plain_value(_execute(CARTPOLE_CWM, drv, None, d))
        return time.perf_counter() - t

    t = time.perf_counter(); sb = Sandbox(); t_start = time.perf_counter() - t
    t = time.perf_counter(); sb.put_data("cartpole", data); t_put = time.perf_counter() - t
    sb.put_data("cartpole-plain", plain)
    print(f"sandbox: isolation={sb.isolation}, start {t_start * 1e3:.0f} ms, put_data {t_put * 1e3:.1f} ms")
    sbx = sb.run(CARTPOLE_CWM, "cwm_nb.sandbox:cwm_predict", data_key="cartpole")
    assert sbx.ok and sbx.value == ref.value, sbx.error
    sb_nofork = Sandbox(prefork=False)
    sb_nofork.put_data("cartpole", data)

    def sandboxed(s, key, src=CARTPOLE_CWM, driver="cwm_nb.sandbox:cwm_predict"):
        t = time.perf_counter()
        r = s.run(src, driver, data_key=key)
        dt = time.perf_counter() - t
        assert r.ok, r.error
        return dt

    for _ in range(5):  # warm up both sides
        in_process(data); sandboxed(sb, "cartpole"); sandboxed(sb_nofork, "cartpole")
    T = {k: [] for k in ("in_process", "sandboxed", "sandboxed_no_prefork", "in_process_plain", "sandboxed_plain", "empty")}
    for _ in range(a.repeats):
        T["in_process"].append(in_process(data))
        T["sandboxed"].append(sandboxed(sb, "cartpole"))
        T["sandboxed_no_prefork"].append(sandboxed(sb_nofork, "cartpole"))
        T["in_process_plain"].append(in_process(plain))
        T["sandboxed_plain"].append(sandboxed(sb, "cartpole-plain"))
        time.sleep(0.02)   # let the server finish the previous job's cleanup and pre-fork
        T["empty"].append(sandboxed(sb, None, "pass", "cwm_nb.sandbox:exec_only"))
    med = {k: statistics.median(v) for k, v in T.items()}
    sb.close(); sb_nofork.close()

    print(f"\n{a.n} transitions, median of {a.repeats} interleaved repeats:")
    print(f"  in-process  (exec + set_state/step + to_plain)  {med['in_process'] * 1e3:7.2f} ms"
          f"  ({med['in_process'] / a.n * 1e6:.1f} us/transition)")
    print(f"  sandboxed   (Sandbox.run, cwm_predict)          {med['sandboxed'] * 1e3:7.2f} ms")
    print(f"  sandboxed, no pre-fork                          {med['sandboxed_no_prefork'] * 1e3:7.2f} ms")
    print(f"  empty program round trip (exec_only)            {med['empty'] * 1e3:7.2f} ms")
    print(f"  plain-list data (06_cwm format): in-process {med['in_process_plain'] * 1e3:.2f} ms, "
          f"sandboxed {med['sandboxed_plain'] * 1e3:.2f} ms")
    ratio = med["sandboxed"] / med["in_process"]
    paired = statistics.median(s / i for s, i in zip(T["sandboxed"], T["in_process"]))
    print(f"\nratio sandboxed / in-process            = {ratio:.2f}  (goal <= 1.3); "
          f"median of paired ratios {paired:.2f}; overhead {1e3 * (med['sandboxed'] - med['in_process']):+.2f} ms")
    print(f"ratio without pre-fork / in-process     = {med['sandboxed_no_prefork'] / med['in_process']:.2f}")
    print(f"ratio plain-list data, sandboxed / in-process = {med['sandboxed_plain'] / med['in_process_plain']:.2f}")


if __name__ == "__main__":
    main()
