"""End to end: `cwm-nb sweep` with the real embedded model and real papermill runs, on the local executor, a Dask
LocalCluster, an external `dask scheduler` + `dask worker` (whose jobs carry their whole definition: a generated
environment, a buffer and a description file), and submitit; a sweep killed half-way and rerun; the results index;
bad input refused before anything starts. A real SLURM is in test_slurm.py.

The tests share one LLM response cache (module fixture): the first sweep asks the model, the later ones test the
orchestration and get the same prompts answered from the cache. Each run uses budget 1, no planning after the search
and a small completion cap, so that one run is one short model call."""
import json, os, signal, socket, subprocess, sys, time
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
CLI = str(Path(sys.executable).parent/"cwm-nb")
DASK = str(Path(sys.executable).parent/"dask")
ENVS = ("CartPole-v1", "rtfm")
METHODS = ("gif-mcts", "worldcoder")
SEEDS = (0, 1)
GRID = ("--envs", ",".join(ENVS), "--methods", ",".join(METHODS), "--models", "embedded", "--budgets", "1",
        "--seeds", ",".join(map(str, SEEDS)))
GRID_SEED0 = (*GRID[:-2], "--seeds", "0")   # the same grid for seed 0 alone: half the runs
SHORT = ("--plan-preset", "none", "--max-tokens", "96")
COLUMNS = ("run_dir", "suite", "env", "action_kind", "method", "model", "budget", "seed", "paper_compat", "status",
           "accuracy", "mean_accuracy", "exact_replay", "best_value", "best_is_bug", "llm_calls", "model_calls",
           "cached_calls", "prompt_tokens", "completion_tokens", "wall_s", "plan_preset", "plan_episodes",
           "normalized_return", "return_cwm", "return_random", "return_oracle", "best_value_per_call",
           "n_generate", "n_improve", "n_fix", "duplicate_programs", "tree_depth", "best_path_length", "best_path_generate",
           "best_path_improve", "best_path_fix", "holdout", "heldout_accuracy", "heldout_exact_replay", "deterministic",
           "failed_calls", "retries", "refused", "server_restarts", "cost_usd", "env_id", "entry_point", "env_kwargs",
           "outcome_probability", "log_likelihood", "stochastic", "code", "options")


def cli(*args, env=None, timeout=1800):
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)


@pytest.fixture(scope="module")
def shared_env(tmp_path_factory):
    "One model-file cache and one LLM response cache for every sweep of this module."
    d = tmp_path_factory.mktemp("sweep_caches")
    warm = os.environ.get("CWM_NB_SWEEP_TEST_WARM_CACHE")   # optional: a copy of an earlier run's cache, to rerun a single test quickly
    if warm:
        import shutil; shutil.copy(warm, d/"llm_cache.sqlite")
    return {**os.environ, "CWM_NB_CACHE": str(d/"cache"), "CWM_NB_LLM_CACHE": str(d/"llm_cache.sqlite")}


def run_dirs(out: Path, envs=ENVS, methods=METHODS, seeds=SEEDS, budget=1):
    from cwm_nb.experiments.runs import run_dir
    return [run_dir(out/f"budget{budget}", "rtfm" if e == "rtfm" else "cwmb", e, m, "embedded", s)
            for e in envs for m in methods for s in seeds]


def check_complete_and_indexed(out: Path, n_expected: int, resumed=(), **grid):
    import pandas as pd
    from cwm_nb.experiments.runs import is_complete
    rds = run_dirs(out, **grid)
    assert len(rds) == n_expected
    for rd in rds:
        assert is_complete(rd), rd
        assert (rd/"notebook.ipynb").exists() and (rd/"tree.json").exists()
        assert (rd.parent/f"{rd.name}.sweep.log").exists()
    df = pd.read_parquet(out/"index.parquet")
    assert tuple(df.columns) == COLUMNS
    assert len(df) == n_expected and set(df.status) == {"complete"}
    assert set(df.run_dir) == {str(rd.relative_to(out)) for rd in rds}
    assert set(df.budget) == {1} and set(df.model) == {"embedded"} and not df.paper_compat.any()
    assert (df.llm_calls == 1).all()
    # every call was asked of the model or its cache, except in a run resumed after its call was checkpointed
    fresh = ~df.run_dir.isin([str(rd.relative_to(out)) for rd in resumed])
    assert ((df.model_calls + df.cached_calls)[fresh] == 1).all() and (df.model_calls + df.cached_calls <= 1).all()
    assert df.accuracy.between(0, 1).all() and df.prompt_tokens.gt(0).all()
    assert set(df[df.env == "rtfm"].suite) <= {"rtfm"} and set(df[df.env != "rtfm"].suite) == {"cwmb"}
    assert set(df.env) == set(grid.get("envs", ENVS))
    assert set(df.action_kind) == {"discrete"}
    assert all(len(v) == 1 for v in df.best_value_per_call)
    gm = df[df.method == "gif-mcts"]
    assert (gm.n_generate + gm.n_improve + gm.n_fix == 1).all()   # one LLM call = one expansion
    return df


def mtimes(out: Path) -> dict:
    return {str(p): (p.stat().st_mtime_ns, p.read_bytes()) for p in out.rglob("metrics.json")}


def test_local_sweep_runs_the_grid_and_a_rerun_skips_it(tmp_path, shared_env):
    out = tmp_path/"local"
    r = cli("sweep", "cwmb", *GRID, *SHORT, "--workers", 2, "--out", out, env=shared_env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    n = len(ENVS)*len(METHODS)*len(SEEDS)
    assert f"{n} ran" in r.stdout and "0 skipped" in r.stdout and "0 failed" in r.stdout, r.stdout
    assert "sweep:" in r.stderr and f"{n}/{n}" in r.stderr   # the progress bar reached the end
    check_complete_and_indexed(out, n)
    before = mtimes(out)
    r2 = cli("sweep", "cwmb", *GRID, *SHORT, "--workers", 2, "--out", out, env=shared_env)
    assert r2.returncode == 0, r2.stderr[-3000:]
    assert "0 ran" in r2.stdout and f"{n} skipped" in r2.stdout, r2.stdout
    assert mtimes(out) == before


def test_dask_local_cluster_runs_the_grid_of_one_seed(tmp_path, shared_env):
    "The local test's grid for seed 0 (the grid itself is that test's), on a Dask LocalCluster."
    out = tmp_path/"dask"
    r = cli("sweep", "cwmb", *GRID_SEED0, *SHORT, "--executor", "dask", "--workers", 2, "--out", out, env=shared_env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "local Dask cluster of 2 worker processes" in r.stdout + r.stderr and "tcp://127.0.0.1:" in r.stdout + r.stderr
    df = check_complete_and_indexed(out, len(ENVS)*len(METHODS), seeds=(0,))
    assert (df.model_calls == 0).all()   # the first test's answers, from the shared response cache


def _free_port() -> int:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    return port


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory):
    """A real Dask cluster of two processes, `dask scheduler` and `dask worker` (2 threads), on 127.0.0.1; its address.
    The worker stands in for another machine: its own working directory, and no `CWM_NB_*` variable (no
    `$CWM_NB_ENVS`, no caches) in its environment, so a job has only what it carries."""
    d = tmp_path_factory.mktemp("dask")
    (d/"worker-home").mkdir()
    bare = {k: v for k, v in os.environ.items() if not k.startswith("CWM_NB_")}
    found = d/"scheduler.json"   # the scheduler binds a port of its own choosing (0), then writes its address here
    procs = [subprocess.Popen([DASK, "scheduler", "--host", "127.0.0.1", "--port", "0", "--scheduler-file", str(found),
                               "--no-dashboard"], stdout=subprocess.DEVNULL, stderr=open(d/"scheduler.log", "w"),
                              env=bare, start_new_session=True)]
    try:
        addr, deadline, log = None, time.monotonic() + 60, lambda: (d/"scheduler.log").read_text()[-3000:]
        while addr is None:
            try: addr = json.loads(found.read_text())["address"]
            except (OSError, ValueError, KeyError): pass   # not written yet, or half written
            if addr is None:
                assert procs[0].poll() is None, "the Dask scheduler exited:\n" + log()
                assert time.monotonic() < deadline, "the Dask scheduler wrote no address in 60 s:\n" + log()
                time.sleep(0.2)
        assert addr.startswith("tcp://127.0.0.1:"), addr
        procs.append(subprocess.Popen([DASK, "worker", addr, "--nworkers", "1", "--nthreads", "2", "--no-dashboard",
                                       "--host", "127.0.0.1"], stdout=subprocess.DEVNULL,
                                      stderr=open(d/"worker.log", "w"), env=bare, cwd=d/"worker-home",
                                      start_new_session=True))
        yield addr
    finally:
        for p in reversed(procs):
            os.killpg(p.pid, signal.SIGTERM)
            try: p.wait(30)
            except subprocess.TimeoutExpired: os.killpg(p.pid, signal.SIGKILL); p.wait()


def test_dask_external_scheduler_and_worker(tmp_path, shared_env, dask_cluster):
    out = tmp_path/"remote"
    r = cli("sweep", "cwmb", "--envs", "CartPole-v1", "--methods", ",".join(METHODS), "--models", "embedded",
            "--budgets", 1, "--seeds", 0, *SHORT, "--executor", "dask", "--scheduler", dask_cluster, "--out", out,
            env=shared_env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert f"the Dask scheduler {dask_cluster} (1 workers, 2 threads)" in r.stdout + r.stderr
    check_complete_and_indexed(out, 2, envs=("CartPole-v1",), seeds=(0,))


# A sweep planned in one process, its user's files deleted, then run on the worker of `dask_cluster`.
PLAN_DELETE_RUN = """
import json, shutil, sys
from cwm_nb.experiments.sweeps import plan_sweep, run_sweep
out, scheduler, base_url, more = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
jobs = plan_sweep(out, "FrozenLake-v1", "gif-mcts", "openai:gpt-4o", "1", "0,1", base_url=base_url,
                  plan_preset="none", env_kwargs='{"is_slippery": false}', buffer="user/buffer",
                  description="user/lake.md", **more)
shutil.rmtree("user")   # the paths the user gave are gone once the sweep is planned
s = run_sweep(jobs, out, "dask", scheduler=scheduler, progress=False)
print(s.report())
sys.exit(1 if s.failed else 0)
"""
# further `plan_sweep` arguments of that sweep: run options, e.g. a grid over GIF-MCTS's exploration constant
PLAN_OPTIONS: dict = {"options": ["C=0.1,5"]}
N_VALUES = 2   # runs per seed that PLAN_OPTIONS makes
LAKE_KW = '{"is_slippery": false}'


def test_a_job_carries_its_definition_to_a_dask_worker(tmp_path, dask_cluster):
    """A generated environment (FrozenLake-v1 with keyword arguments), a buffer and a description file reach a Dask
    worker by content: the worker has another working directory and no `$CWM_NB_ENVS`, and the user's files are
    deleted before the first job is submitted."""
    from cwm_nb.bench.replay import ReplayBuffer
    from cwm_nb.experiments.runs import is_complete
    from cwm_nb.experiments.index import find_run_dirs, load_index
    from cwm_nb.testing.provider_double import ProviderDouble
    here = tmp_path/"submitter"; (here/"user").mkdir(parents=True)
    r = cli("collect", "--env", "FrozenLake-v1", "--env-kwargs", LAKE_KW, "--episodes", 5, "--out", here/"user"/"buffer")
    assert r.returncode == 0, r.stderr[-2000:]
    fingerprint = ReplayBuffer.load(here/"user"/"buffer").fingerprint()[:16]
    lake = "A frozen lake of 4 x 4 tiles; the ice is not slippery here. Marker: carried-7f3a.\n"
    (here/"user"/"lake.md").write_text(lake)
    out = tmp_path/"sweep"
    env = {k: v for k, v in os.environ.items() if k != "CWM_NB_ENVS"}
    with ProviderDouble("openai", answers="capable", idle_timeout=600) as d:
        r = subprocess.run([sys.executable, "-c", PLAN_DELETE_RUN, str(out), dask_cluster, d.base_url,
                            json.dumps(PLAN_OPTIONS)], capture_output=True, text=True, cwd=here, env=env, timeout=1200)
        prompts = [json.dumps(q.get("body")) for q in d.requests()]
    n = 2 * N_VALUES
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert not (here/"user").exists() and f"{n} ran" in r.stdout and "0 failed" in r.stdout, r.stdout
    rds = find_run_dirs(out)
    assert len(rds) == n and all(is_complete(rd) for rd in rds)
    for rd in rds:
        s, m = json.loads((rd/"settings.json").read_text()), json.loads((rd/"metrics.json").read_text())
        assert {Path(s["buffer"]).parent.parent, Path(s["description"]).parent.parent} == {out/".inputs"}
        assert (m["env_id"], m["env_kwargs"], m["buffer_fingerprint"]) == ("FrozenLake-v1", {"is_slippery": False},
                                                                           fingerprint)
        assert (rd/"description.md").read_text() == lake
    # the description reached the model; the grid's C values may share each seed's first answer (the response cache,
    # when one job's answer is stored before the other asks)
    assert 2 <= len(prompts) <= n and all("carried-7f3a" in p for p in prompts)
    # the option grid reached each job's search
    ran_with = sorted(json.loads((rd/"checkpoint.json").read_text())["config"]["C"] for rd in rds)
    assert ran_with == [0.1, 0.1, 5.0, 5.0], ran_with
    df = load_index(out)
    assert len(df) == n and set(df.status) == {"complete"} and set(df.env_kwargs) == {'{"is_slippery": false}'}


@pytest.mark.parametrize("executor", ["local", "dask"])
def test_killed_sweep_reruns_only_the_missing_runs(tmp_path, shared_env, executor):
    "The grid of seed 0 killed after two runs, while a third runs; run again, it runs the other two, resuming one."
    from cwm_nb.experiments.runs import is_complete
    out = tmp_path/"killed"
    args = [CLI, "sweep", "cwmb", *GRID_SEED0, *SHORT, "--workers", "1", "--executor", executor, "--out", str(out)]
    rds = run_dirs(out, seeds=(0,))
    p = subprocess.Popen(args, env=shared_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True, cwd=ROOT)
    deadline = time.time() + 1200
    while time.time() < deadline and p.poll() is None:
        done = sum(is_complete(rd) for rd in rds)
        started = [rd for rd in rds if (rd/"settings.json").exists() and not is_complete(rd)]
        if done >= 2 and started: break
        time.sleep(0.2)
    assert p.poll() is None, "the sweep ended before it could be killed"
    os.killpg(p.pid, signal.SIGKILL); p.wait()
    time.sleep(2)   # the killed run's kernel (its own session) notices its parent is gone and exits
    complete = [rd for rd in rds if is_complete(rd)]
    partial = [rd for rd in rds if (rd/"settings.json").exists() and not is_complete(rd)]
    assert 2 <= len(complete) < len(rds) and partial, (complete, partial)
    before = {rd: ((rd/"metrics.json").stat().st_mtime_ns, (rd/"metrics.json").read_bytes()) for rd in complete}
    r = cli("sweep", "cwmb", *GRID_SEED0, *SHORT, "--workers", 2, "--executor", executor, "--out", out, env=shared_env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    n_missing = len(rds) - len(complete)
    assert f"{n_missing} ran ({len(partial)} of them resumed), {len(complete)} skipped" in r.stdout, r.stdout
    after = {rd: ((rd/"metrics.json").stat().st_mtime_ns, (rd/"metrics.json").read_bytes()) for rd in complete}
    assert after == before   # complete runs untouched
    check_complete_and_indexed(out, len(rds), resumed=partial, seeds=(0,))
    for rd in partial:   # the killed run continued in its own folder: its log shows both attempts
        assert (rd.parent/f"{rd.name}.sweep.log").read_text().count("=== ") == 2


SLURM_COMMANDS = ("srun", "sbatch", "squeue", "sinfo", "scontrol", "scancel", "sacct", "salloc")


def path_without_slurm(tmp_path) -> str:
    "This PATH as on a machine without SLURM: each folder holding SLURM's commands is replaced by links to its others."
    links, dirs = tmp_path/"bin-without-slurm", []
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if not (d and Path(d, "srun").exists()): dirs.append(d); continue
        links.mkdir(exist_ok=True)
        for f in Path(d).iterdir():
            if f.name not in SLURM_COMMANDS and not (links/f.name).exists(): (links/f.name).symlink_to(f)
        if str(links) not in dirs: dirs.append(str(links))
    return os.pathsep.join(dirs)


def test_submitit_executor_falls_back_to_local_processes(tmp_path, shared_env):
    out = tmp_path/"submitit"
    r = cli("sweep", "cwmb", "--envs", "CartPole-v1", "--methods", "gif-mcts", "--budgets", 1, "--seeds", 0, *SHORT,
            "--executor", "slurm", "--slurm-time", 30, "--out", out,
            env={**shared_env, "PATH": path_without_slurm(tmp_path)})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "no SLURM on this machine" in r.stdout + r.stderr
    assert any((out/".submitit").rglob("*_submitted.pkl"))   # submitit's own job files
    check_complete_and_indexed(out, 1, envs=("CartPole-v1",), methods=("gif-mcts",), seeds=(0,))


@pytest.mark.parametrize("args,expect", [
    (("--envs", "CartPole-v1,NoSuchEnv-v0"), "NoSuchEnv-v0"),
    (("--envs", "CartPole-v1", "--methods", "gif-mcts,magic-search"), "magic-search"),
    (("--envs", "CartPole-v1", "--models", "no-such-model"), "no-such-model"),
    (("--envs", "CartPole-v1", "--executor", "ray"), "ray"),
    (("--envs", "CartPole-v1", "--budgets", "1,zero"), "zero"),
    (("--envs", "CartPole-v1", "--executor", "dask", "--scheduler", "tcp://127.0.0.1:{port}"), "tcp://127.0.0.1:{port}"),
])
def test_bad_sweep_input_is_refused_before_anything_starts(tmp_path, args, expect):
    port = _free_port()   # nobody listens there
    args = [a.format(port=port) for a in args]
    r = cli("sweep", "cwmb", *args, "--out", tmp_path/"out")
    assert r.returncode == 2, r.stderr[-2000:]
    assert expect.format(port=port) in r.stderr and "What to do" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path/"out").exists()


def test_index_command_and_load_index_rebuild(tmp_path):
    from cwm_nb.core import atomic_write_json
    from cwm_nb.experiments.runs import run_dir
    from cwm_nb.experiments.index import load_index
    rd = run_dir(tmp_path, "cwmb", "Pendulum-v1", "gif-mcts", "embedded", 3)
    atomic_write_json(rd/"settings.json", dict(env="Pendulum-v1", method="gif-mcts", model="embedded", budget=4, seed=3,
                                               paper_compat=False, plan_preset="quick", plan_episodes=2))
    r = cli("index", tmp_path)
    assert r.returncode == 0 and "1 runs (0 complete, 1 partial)" in r.stdout, r.stderr
    df = load_index(tmp_path)
    assert (df.env[0], df.action_kind[0], df.status[0], df.budget[0], df.seed[0]) == ("Pendulum-v1", "continuous", "partial", 4, 3)
    time.sleep(0.01)
    atomic_write_json(rd/"metrics.json", dict(suite="cwmb", env="Pendulum-v1", budget=4, seed=3, accuracy=0.25,
                                              best_is_bug=False, status="complete"))
    df = load_index(tmp_path)   # newer than the index: rebuilt
    assert df.status[0] == "complete" and df.accuracy[0] == 0.25
    r = cli("index", tmp_path/"nowhere")
    assert r.returncode == 2 and "What to do" in r.stderr


def test_a_sweep_takes_env_kwargs_for_gymnasium_ids(tmp_path):
    "`cwm-nb sweep --envs FrozenLake-v1 --env-kwargs ...`: its jobs run a variant of its own (never mixed with the default)."
    import subprocess
    from cwm_nb.experiments.sweeps import plan_sweep
    plain = plan_sweep(tmp_path, "FrozenLake-v1", "gif-mcts", "embedded", "1", "0")
    dry = plan_sweep(tmp_path, "FrozenLake-v1", "gif-mcts", "embedded", "1", "0", env_kwargs='{"is_slippery": false}')
    assert plain[0].env == "FrozenLake-v1" and dry[0].env.startswith("FrozenLake-v1-") and dry[0].env != plain[0].env
    cli = str(Path(sys.executable).parent/"cwm-nb")
    r = subprocess.run([cli, "sweep", "cwmb", "--envs", "discrete", "--env-kwargs", '{"is_slippery": false}',
                        "--out", str(tmp_path/"s")], capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "do not apply to the group 'discrete'" in r.stderr, r.stderr[-1500:]


def test_run_folders_of_older_settings_are_skipped_resumed_and_indexed(tmp_path):
    """Run folders whose settings.json predates held-out parts, description files and carried inputs: the same grid
    planned again skips the complete one, resumes the partial one, and the index reads both."""
    from cwm_nb.core import atomic_write_json
    from cwm_nb.experiments.index import build_index
    from cwm_nb.experiments.sweeps import job_state, plan_sweep
    grid = (tmp_path, "CartPole-v1", "gif-mcts", "embedded", "1", "0,1")
    jobs = plan_sweep(*grid, plan_preset="none")
    old = dict(env="CartPole-v1", method="gif-mcts", model="embedded", budget=1, paper_compat=False, max_tokens=400,
               base_url="", buffer="", plan_preset="none", plan_episodes=10)
    for j in jobs: atomic_write_json(j.run_dir/"settings.json", {**old, "seed": j.seed})
    atomic_write_json(jobs[0].run_dir/"metrics.json", dict(suite="cwmb", env="CartPole-v1", budget=1, seed=0,
                                                           status="complete", accuracy=0.5, best_is_bug=False))
    atomic_write_json(jobs[1].run_dir/"checkpoint.json", dict(calls=0, best_value=0.0))
    assert [job_state(j) for j in plan_sweep(*grid, plan_preset="none")] == ["skip", "resume"]
    df = build_index(tmp_path)
    assert list(df.status) == ["complete", "partial"] and df.accuracy[0] == 0.5 and list(df.holdout) == [0.0, 0.0]
