"""APPS harness overhead per test: the sandboxed harness against a bare `subprocess.run` of the same program.

Measured side by side in one run (interleaved rounds, medians):
  sandboxed : cwm_nb.apps.harness.evaluate_solution(source, problem): one sandbox job per evaluation, one forked
              process per test, outputs judged in this process (strict and apps_compat)
  bare      : for each test, subprocess.run([sys.executable, file], input=..., capture_output=True, timeout=4)
              and the same strict comparison, without any sandbox
Both columns are milliseconds per test; the ratio is sandboxed / bare (below 1: the harness is cheaper than
starting a fresh interpreter per test). Programs: the reference solutions of the stdin problems shipped in
data/apps_demo, and one made-up problem with --n-tests tests.

Run: .venv/bin/python benchmarks/bench_apps_harness.py [--rounds 7] [--n-tests 50]
"""
import argparse, random, statistics, subprocess, sys, tempfile, time
from pathlib import Path


def bare_run(path: str, problem) -> float:
    "Seconds for running every test of `problem` as `python file` with the input on stdin, plus the comparison."
    from cwm_nb.apps.harness import strict_match
    t = time.perf_counter()
    for inp, exp in zip(problem.inputs, problem.outputs):
        r = subprocess.run([sys.executable, path], input=inp, capture_output=True, text=True, timeout=4)
        strict_match(r.stdout, exp)
    return time.perf_counter() - t


def sandboxed_run(source: str, problem, sandbox) -> float:
    from cwm_nb.apps.harness import evaluate_solution
    t = time.perf_counter()
    ev = evaluate_solution(source, problem, sandbox=sandbox)
    dt = time.perf_counter() - t
    assert ev.perfect, ev.summary()
    return dt


def made_up_problem(n: int):
    "A pair-sums problem (the first demo problem's task) with `n` random tests."
    from cwm_nb.apps.problems import demo_problems, problem_from_fields
    base = demo_problems()[0]
    rng = random.Random(0)
    ins, outs = [], []
    for _ in range(n):
        pairs = [(rng.randint(-10**9, 10**9), rng.randint(-10**9, 10**9)) for _ in range(rng.randint(1, 100))]
        ins.append(f"{len(pairs)}\n" + "".join(f"{a} {b}\n" for a, b in pairs))
        outs.append("".join(f"{a + b}\n" for a, b in pairs))
    return problem_from_fields(f"pairs{n}", base.question, {"inputs": ins, "outputs": outs}, solutions=base.solutions)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds per program (median reported)")
    ap.add_argument("--n-tests", type=int, default=50, help="tests of the made-up problem")
    a = ap.parse_args()
    from cwm_nb.apps.problems import demo_problems
    from cwm_nb.sandbox.jobs import Sandbox

    cases = [(p.problem_id, p) for p in demo_problems() if p.kind == "stdin"]
    cases.append((f"made-up ({a.n_tests} tests)", made_up_problem(a.n_tests)))
    with Sandbox() as sb, tempfile.TemporaryDirectory() as d:
        print(f"sandbox isolation: {sb.isolation}; python: {sys.executable}")
        sandboxed_run(cases[0][1].solutions[0], cases[0][1], sb)   # warm-up: the server imports cwm_nb.apps.problems once
        rows, tot_s, tot_b, tot_n = [], 0.0, 0.0, 0
        for name, p in cases:
            src = p.solutions[0]
            path = str(Path(d)/f"{p.problem_id}.py"); Path(path).write_text(src)
            s_times, b_times = [], []
            for r in range(a.rounds):
                pair = [("s", lambda: sandboxed_run(src, p, sb)), ("b", lambda: bare_run(path, p))]
                if r % 2: pair.reverse()
                for k, f in pair: (s_times if k == "s" else b_times).append(f())
            s, b = statistics.median(s_times), statistics.median(b_times)
            rows.append((name, p.n_tests, 1000 * s / p.n_tests, 1000 * b / p.n_tests, s / b))
            tot_s += s; tot_b += b; tot_n += p.n_tests
    print(f"{'problem':24} {'tests':>5} {'sandboxed ms/test':>18} {'bare ms/test':>13} {'ratio':>7}")
    for name, n, s, b, ratio in rows: print(f"{name:24} {n:5d} {s:18.2f} {b:13.2f} {ratio:7.3f}")
    print(f"{'all':24} {tot_n:5d} {1000 * tot_s / tot_n:18.2f} {1000 * tot_b / tot_n:13.2f} {tot_s / tot_b:7.3f}")


if __name__ == "__main__":
    main()
