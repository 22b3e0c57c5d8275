"""What behavioural tests change in a search (issue #34): `cwm-nb sweep --set tests=false,true` against the provider
test double, and the cost of the tests per evaluation.

The endpoint is the provider test double (`cwm_nb.testing.provider_double`: a real HTTP server on 127.0.0.1, OpenAI's
chat shape) with the scripted capable model: it answers a generate prompt with the environment's reference program
with a mistake planted in it (`data/programs/planted_mistakes.json`), an improve or fix prompt with the reference
program, and the test-writing prompt with the stand-in tests of `data/programs/tests/<env>.py` (each file holds one
wrong test, which the real environment drops). The sweep is the real command, run as a subprocess; its runs plan
with the quick preset. The numbers are the double's: they show the mechanism and its cost, not a model's quality.

    .venv/bin/python benchmarks/behaviour_tests.py [--envs CartPole-v1,MountainCar-v0,Taxi-v3] [--seeds 0,1,2]
        [--budget 5] [--plan-episodes 3] [--out /tmp/behaviour-tests]

Prints one row per (environment, tests) averaged over the seeds: accuracy on the search part and on the held-out
part, the open-loop rollout error at K = 5 (held-out part), the normalized return R, the calls spent on tests, and
the sandbox time per program evaluation (seconds, `evaluate_s` of the search over the programs it ran); then the
tests the real environment dropped, with why.
"""
import argparse, json, os, subprocess, sys, tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def evaluations(tree: dict) -> int:
    "Programs a search ran in the sandbox: its nodes with a program, less the repeats it did not run again."
    return sum(1 for n in tree["nodes"] if n.get("program_sha"))


def rollout_k(metrics: dict, k: int = 5):
    "The held-out part's mean state error of open-loop rollouts at K = k (None when not measured)."
    r = ((metrics.get("rollouts") or {}).get("heldout") or {})
    return ((r.get("horizons") or {}).get(str(k)) or {}).get("state_error")


def side_by_side(envs: list[str], repeats: int) -> None:
    "Seconds per evaluation of each environment's reference program, without and with its stand-in tests, timed in turn."
    import statistics, time
    from cwm_nb.bench import behaviour_tests as bt, cwm, replay
    from cwm_nb.core import data_dir
    print("\nsandbox seconds per evaluation of the reference program (median of %d, timed in turn):" % repeats)
    print(f"{'env':16s} {'buffer':>10s} {'+ tests':>10s} {'ratio':>7s} {'check':>8s}")
    for env_name in envs:
        buf = replay.load_buffer(env_name)
        prog = (data_dir()/"programs"/f"{env_name}.py").read_text()
        t0 = time.perf_counter()
        check = bt.check_tests((data_dir()/"programs"/"tests"/f"{env_name}.py").read_text(), env_name, buf)
        t_check = time.perf_counter() - t0
        plain, tested = [], []
        for _ in range(repeats):
            t0 = time.perf_counter(); cwm.evaluate_program(prog, buf); t1 = time.perf_counter()
            bt.score_tests(check, prog, buf); t2 = time.perf_counter()
            plain.append(t1 - t0); tested.append(t2 - t0)
        p, t = statistics.median(plain), statistics.median(tested)
        print(f"{env_name:16s} {p:10.3f} {t:10.3f} {t / p:7.2f} {t_check:8.3f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--envs", default="CartPole-v1,MountainCar-v0,Taxi-v3")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--budget", type=int, default=5)
    ap.add_argument("--plan-episodes", type=int, default=3)
    ap.add_argument("--out", default="")
    ap.add_argument("--rules", default="product,tiebreak", help="tests_rule values to run with tests on")
    ap.add_argument("--repeats", type=int, default=5, help="timed evaluations per program, side by side")
    a = ap.parse_args()
    from cwm_nb.testing.provider_double import ProviderDouble
    out = Path(a.out or tempfile.mkdtemp(prefix="behaviour-tests-"))
    env = {**os.environ, "CWM_NB_LLM_CACHE": str(out/"llm_cache.sqlite")}   # an answer cache of its own
    rules = a.rules.split(",")
    grids = [["--set", "tests=false,true", "--set", f"tests_rule={rules[0]}"]] + [
        ["--set", "tests=true", "--set", f"tests_rule={r}"] for r in rules[1:]]
    with ProviderDouble("openai", answers="capable") as d:
        for grid in grids:
            cmd = [str(Path(sys.executable).parent/"cwm-nb"), "sweep", "cwmb", "--envs", a.envs, "--methods",
                   "gif-mcts", "--models", "vllm:house-model", "--base-url", d.base_url, "--seeds", a.seeds,
                   "--budgets", str(a.budget), *grid, "--holdout", "0.2", "--plan-preset", "quick",
                   "--plan-episodes", str(a.plan_episodes), "--workers", "1", "--no-progress", "--out", str(out)]
            print("$", " ".join(cmd[1:]).replace(d.base_url, "<double>"), flush=True)
            r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
            if r.returncode != 0:
                print(r.stdout[-3000:], r.stderr[-3000:]); return r.returncode
    rows, dropped = {}, {}
    for m_path in sorted(out.rglob("metrics.json")):
        m = json.loads(m_path.read_text())
        rd = m_path.parent
        tree = json.loads((rd/"tree.json").read_text())
        timing = json.loads((rd/"checkpoint.json").read_text())["timing"]
        opts = (m.get("definition") or {}).get("method_config") or {}
        on = (opts.get("tests_rule") or "product") if m.get("tests_written") is not None else "off"
        if on != "off":
            check = json.loads((rd/"tests_check.json").read_text())
            dropped[m["env"]] = [(v["name"], v.get("message")) for v in check["verdicts"] if v["real"] == "fail"]
        n_eval = max(evaluations(tree), 1)
        row = dict(accuracy=m["accuracy"], heldout=m.get("heldout_accuracy"), rollout_k5=rollout_k(m),
                   R=m.get("normalized_return"), test_calls=1 if m.get("tests_written") is not None else 0,
                   kept=m.get("tests_kept"), passed=m.get("tests_passed"), calls=m["llm_calls"],
                   eval_s=timing["evaluate_s"] / n_eval)
        rows.setdefault((m["env"], on), []).append(row)
    def mean(xs):
        xs = [x for x in xs if isinstance(x, (int, float))]
        return sum(xs) / len(xs) if xs else None
    fmt = lambda v: "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)
    cols = ["accuracy", "heldout", "rollout_k5", "R", "calls", "test_calls", "kept", "passed", "eval_s"]
    print(f"\n{'env':16s} {'tests':9s} {'runs':4s} " + " ".join(f"{c:>10s}" for c in cols))
    for (env_name, on), rs in sorted(rows.items()):
        print(f"{env_name:16s} {on:9s} {len(rs):4d} " + " ".join(f"{fmt(mean([r[c] for r in rs])):>10s}" for c in cols))
    print("\n(eval_s: the search's sandbox seconds per program it ran; the one-time check of the tests on the real "
          "environment is apart, tests_check_s in the checkpoint's timing)")
    side_by_side(a.envs.split(","), a.repeats)
    print("\ntests the real environment dropped:")
    for env_name, ds in sorted(dropped.items()):
        for name, msg in ds: print(f"  {env_name}: {name}: {msg}")
    print(f"\nruns in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
