"""How much a sweep gains from running its jobs side by side: the same small grid with 1 and with 2 local workers.

The grid (default: CartPole-v1 x gif-mcts, worldcoder x seeds 0, 1 = 4 runs, budget 1, no planning, 96-token cap)
is first run once to fill a dedicated LLM response cache (`<cache>/bench_sweep/llm_cache.sqlite`, kept between
invocations, so only the first invocation on a machine waits for the model), then timed with each worker count
into a fresh results folder. With a warm cache the LLM is not the bottleneck: a run is the papermill kernel start,
the imports, the program evaluation in the sandbox and the figures, which is CPU work, so the ideal speed-up is
bounded by the free cores (the figure printed is measured on this machine under its current load).

    .venv/bin/python benchmarks/bench_sweep.py [--envs CartPole-v1] [--methods gif-mcts,worldcoder]
                                               [--seeds 0,1] [--workers 1,2] [--executor local] [--llm-cache FILE]

Prints one line per worker count (wall time, runs per minute) and the speed-up of each against the first.
"""
import argparse, os, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CLI = str(Path(sys.executable).parent/"cwm-nb")


def sweep(out: Path, args, workers: int, env: dict) -> float:
    cmd = [CLI, "sweep", "cwmb", "--envs", args.envs, "--methods", args.methods, "--models", "embedded",
           "--budgets", "1", "--seeds", args.seeds, "--plan-preset", "none", "--max-tokens", "96",
           "--executor", args.executor, "--workers", str(workers), "--out", str(out), "--no-progress"]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - t0
    if r.returncode != 0 or " 0 failed" not in r.stdout:
        sys.exit(f"the sweep with {workers} workers failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--envs", default="CartPole-v1")
    ap.add_argument("--methods", default="gif-mcts,worldcoder")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--workers", default="1,2", help="comma list of worker counts to time")
    ap.add_argument("--executor", default="local", choices=("local", "dask", "slurm"))
    ap.add_argument("--llm-cache", default="", help="response cache file to use (default: <cache>/bench_sweep/llm_cache.sqlite)")
    args = ap.parse_args()
    from cwm_nb.core import cache_dir
    from cwm_nb.experiments.index import load_index
    from cwm_nb.experiments.sweeps import plan_sweep
    n_runs = len(plan_sweep(tempfile.mkdtemp(), args.envs, args.methods, "embedded", "1", args.seeds))
    llm_cache = Path(args.llm_cache) if args.llm_cache else cache_dir()/"bench_sweep"/"llm_cache.sqlite"
    llm_cache.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CWM_NB_LLM_CACHE": str(llm_cache)}
    workers = [int(w) for w in args.workers.split(",")]
    print(f"grid: {n_runs} runs ({args.envs} x {args.methods} x seeds {args.seeds}), budget 1, no planning; "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory() as d:
        t = sweep(Path(d)/"warm", args, max(workers), env)
        calls = int(load_index(Path(d)/"warm").model_calls.sum())
        print(f"warm-up (fills the response cache): {t:.1f} s, {calls} model calls", flush=True)
        rows = []
        for w in workers:
            out = Path(d)/f"w{w}"
            t = sweep(out, args, w, env)
            df = load_index(out)
            assert len(df) == n_runs and (df.status == "complete").all() and df.model_calls.sum() == 0
            rows.append((w, t))
            print(f"  {w} worker(s): {t:7.1f} s  ({n_runs / t * 60:5.2f} runs/min)", flush=True)
    base = rows[0][1]
    print(f"\n{'workers':>8} {'wall s':>8} {'runs/min':>9} {'speed-up':>9}")
    for w, t in rows: print(f"{w:>8} {t:8.1f} {n_runs / t * 60:9.2f} {base / t:8.2f}x")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
