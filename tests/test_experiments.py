"""End to end: the `cwm-nb` command line, papermill runs of the experiment notebook, the embedded model,
resume after a kill, and clear errors for bad input."""
import json, os, signal, sqlite3, subprocess, sys, time
from pathlib import Path
import gymnasium, pytest

ROOT = Path(__file__).resolve().parents[1]
CLI = str(Path(sys.executable).parent/"cwm-nb")
CARTPOLE_CWM = Path(__file__).resolve().parents[1]/"data"/"programs"/"CartPole-v1.py"   # the shipped reference CWM
QUICK_PLAN = ("--plan-preset", "quick", "--plan-episodes", "2")   # keeps the planning after each test search short

def cli(*args, env=None, timeout=900):
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)

def _tree_nodes(rd: Path):
    return json.loads((rd/"tree.json").read_text())

def test_main_job_embedded_end_to_end_then_cached_rerun(tmp_path, cache_env):
    r1 = cli("run", "cwmb", "--env", "CartPole-v1", "--method", "gif-mcts", "--model", "embedded",
             "--budget", 2, "--seed", 0, "--out", tmp_path/"a", *QUICK_PLAN, env=cache_env)
    assert r1.returncode == 0, r1.stderr[-3000:]
    rd = tmp_path/"a"/"cwmb"/"CartPole-v1"/"gif-mcts"/"embedded"/"seed0"
    for f in ("notebook.ipynb", "program.py", "tree.json", "metrics.json", "search.png", "search.pdf"):
        assert (rd/f).exists(), f
    m = json.loads((rd/"metrics.json").read_text())
    for k in ("env", "method", "model", "budget", "seed", "llm_calls", "prompt_tokens", "completion_tokens",
              "accuracy", "exact_replay", "best_value_per_call", "wall_s", "normalized_return", "return_cwm",
              "return_random", "return_oracle"):
        assert k in m, k
    # the non-default budget reached the notebook: papermill found the tagged parameters cell
    assert m["budget"] == 2 and 1 <= m["llm_calls"] <= 2 and m["model_calls"] == m["llm_calls"]
    assert len(m["best_value_per_call"]) == m["llm_calls"] and m["prompt_tokens"] > 0
    # planning ran after the search: the baselines are numbers; R exists exactly when a program ran
    assert isinstance(m["return_random"], float) and isinstance(m["return_oracle"], float)
    assert (m["normalized_return"] is None) == (m["return_cwm"] is None)
    assert m["plan_preset"] == "quick" and m["plan_episodes"] == 2
    # where the result came from: this checkout's commit and the library versions
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert m["provenance"]["git_commit"].removesuffix("-dirty") == head
    assert m["provenance"]["packages"]["gymnasium"] == gymnasium.__version__
    nb = json.loads((rd/"notebook.ipynb").read_text())
    assert any("injected-parameters" in c.get("metadata", {}).get("tags", []) for c in nb["cells"])
    # same seed, same cache, another results folder: zero model calls and the same tree
    r2 = cli("run", "cwmb", "--env", "CartPole-v1", "--model", "embedded", "--budget", 2, "--seed", 0,
             "--out", tmp_path/"b", *QUICK_PLAN, env=cache_env)
    assert r2.returncode == 0, r2.stderr[-3000:]
    rd2 = tmp_path/"b"/"cwmb"/"CartPole-v1"/"gif-mcts"/"embedded"/"seed0"
    m2 = json.loads((rd2/"metrics.json").read_text())
    assert m2["model_calls"] == 0 and m2["cached_calls"] == m["llm_calls"]
    assert _tree_nodes(rd2) == _tree_nodes(rd)
    assert (rd2/"program.py").read_text() == (rd/"program.py").read_text()
    # a complete run is skipped
    r3 = cli("run", "cwmb", "--model", "embedded", "--budget", 2, "--out", tmp_path/"b", *QUICK_PLAN, env=cache_env)
    assert r3.returncode == 0 and "skipped" in r3.stderr
    # the closing lines say what the embedded model is for and how to use a capable one
    for out in (r1.stdout, r2.stdout):
        assert "not a broken install" in out and "--model gpt-4o" in out and "--base-url" in out, out

def _cache_rows(path: Path) -> int:
    if not path.exists(): return 0
    with sqlite3.connect(path) as c:
        return c.execute("select count(*) from completions").fetchone()[0]

def test_killed_run_resumes_without_repeating_calls(tmp_path, cache_env):
    budget = 3
    args = [CLI, "run", "cwmb", "--model", "embedded", "--budget", str(budget), "--seed", "1", "--out", str(tmp_path),
            *QUICK_PLAN]
    ckpt = tmp_path/"cwmb"/"CartPole-v1"/"gif-mcts"/"embedded"/"seed1"/"checkpoint.json"
    p = subprocess.Popen(args, env=cache_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True, cwd=ROOT)
    deadline = time.time() + 600
    while time.time() < deadline:
        if ckpt.exists():
            try:
                if json.loads(ckpt.read_text())["calls"] >= 1: break
            except (ValueError, KeyError): pass
        if p.poll() is not None: break
        time.sleep(0.2)
    assert p.poll() is None, "the run ended before it could be killed"
    os.killpg(p.pid, signal.SIGKILL); p.wait()
    done_before = json.loads(ckpt.read_text())["calls"]
    assert 1 <= done_before < budget, "the run was not killed part-way"
    rows_before = _cache_rows(Path(cache_env["CWM_NB_LLM_CACHE"]))
    r = cli("run", "cwmb", "--model", "embedded", "--budget", budget, "--seed", 1, "--out", tmp_path, *QUICK_PLAN,
            env=cache_env)
    assert r.returncode == 0, r.stderr[-3000:]
    m = json.loads((ckpt.parent/"metrics.json").read_text())
    assert m["llm_calls"] == budget or m["accuracy"] >= 1.0
    # calls answered before the kill were not asked again: the resumed run asked only for the rest
    assert m["session_model_calls"] + m["session_cached_calls"] == m["llm_calls"] - done_before
    assert _cache_rows(Path(cache_env["CWM_NB_LLM_CACHE"])) == rows_before + m["session_model_calls"]
    # the run's totals count the calls of both processes
    assert m["model_calls"] + m["cached_calls"] == m["llm_calls"]

def test_a_terminated_run_stops_as_ctrl_c_does_and_leaves_no_kernel_behind(tmp_path, cache_env):
    """SIGTERM to `cwm-nb run` (`kill`, a sweep stopping its jobs, Slurm's `scancel`) interrupts it as Ctrl-C does: the
    run shuts its notebook's kernel down, the kernel's socket folder goes with it, and it says how to resume. Before,
    the run died at once and its kernel, left to notice its parent was gone, left the folder behind."""
    import psutil
    tmp = tmp_path/"tmp"
    tmp.mkdir()
    p = subprocess.Popen([CLI, "run", "cwmb", "--model", "embedded", "--budget", "3", "--seed", "2", "--out",
                          str(tmp_path/"out"), *QUICK_PLAN], env=dict(cache_env, TMPDIR=str(tmp)),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True, cwd=ROOT)
    try:
        deadline = time.time() + 300
        while time.time() < deadline and p.poll() is None and len(list(tmp.glob("cwm-nb-kernel-*/kernel-ipc-*"))) < 5:
            time.sleep(0.1)
        assert len(list(tmp.glob("cwm-nb-kernel-*/kernel-ipc-*"))) == 5, "the run's kernel never started"
        time.sleep(2)   # the kernel runs the notebook's first cells
        assert p.poll() is None, "the run ended before it could be terminated"
        p.send_signal(signal.SIGTERM)   # the run's process alone, as a sweep stops its jobs
        err = p.communicate(timeout=120)[1]
    finally:
        if p.poll() is None: os.killpg(p.pid, signal.SIGKILL); p.wait()
    assert p.returncode == 130 and "cwm-nb: interrupted; rerun the same command to resume" in err, err[-3000:]
    assert list(tmp.iterdir()) == []
    assert [q.pid for q in psutil.process_iter(["cmdline"]) if str(tmp) in " ".join(q.info["cmdline"] or ())] == []

def test_eval_program_json_correct_and_wrong(tmp_path):
    r = cli("eval-program", "--env", "CartPole-v1", CARTPOLE_CWM, "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["accuracy"] == 1.0 and d["exact_replay"] == 1.0 and d["n_transitions"] > 0 and d["error"] is None
    src = CARTPOLE_CWM.read_text()
    wrong = src.replace("THETA_LIMIT = 12 * 2", "THETA_LIMIT = 15 * 2")  # a 15 degree termination threshold
    assert wrong != src
    (tmp_path/"cartpole_15deg.py").write_text(wrong)
    r = cli("eval-program", "--env", "CartPole-v1", tmp_path/"cartpole_15deg.py", "--json")
    d = json.loads(r.stdout)
    assert d["accuracy"] < 1.0

def test_unknown_environment_is_a_clear_error(tmp_path):
    r = cli("run", "cwmb", "--env", "NoSuchEnv-v0", "--out", tmp_path)
    assert r.returncode == 2 and "NoSuchEnv-v0" in r.stderr and "What to do" in r.stderr
    assert "Traceback" not in r.stderr
    r = cli("eval-program", "--env", "NoSuchEnv-v0", CARTPOLE_CWM)
    assert r.returncode == 2 and "cwm-nb envs" in r.stderr

def test_missing_program_file_is_a_clear_error(tmp_path):
    r = cli("eval-program", "--env", "CartPole-v1", tmp_path/"nope.py")
    assert r.returncode == 2 and "nope.py" in r.stderr and "Traceback" not in r.stderr

def test_unreachable_endpoint_is_a_clear_error(tmp_path, cache_env):
    import socket
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()  # a closed port
    url = f"http://127.0.0.1:{port}/v1"
    r = cli("run", "cwmb", "--model", "openai:gpt-4o", "--base-url", url, "--budget", 1, "--out", tmp_path, env=cache_env)
    assert r.returncode == 2, r.stderr[-2000:]
    assert url in r.stderr and "Traceback" not in r.stderr

PAPERMILL = str(Path(sys.executable).parent/"papermill")
EXPERIMENTS = sorted((ROOT/"nbs"/"experiments").glob("*.ipynb"))

def papermill(*args, cwd):
    "papermill's own command line, as a user runs it by hand (the notebook's `cwm-nb` kernelspec, no cwm-nb code around it)."
    return subprocess.run([PAPERMILL, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=300)

@pytest.mark.parametrize("nb", EXPERIMENTS, ids=[p.stem for p in EXPERIMENTS])
def test_papermill_by_hand_refuses_a_parameter_the_notebook_does_not_define(nb, tmp_path):
    "papermill alone only warns (`Passed unknown parameter`) and runs with the defaults; each experiment notebook stops."
    import nbformat
    from cwm_nb.experiments.notebooks import notebook_params
    declared = notebook_params(nb)
    typo = declared[0][:-1] + "x"   # e.g. `enx` for `env`
    r = papermill(nb, tmp_path/"out.ipynb", "-p", typo, "1", cwd=tmp_path)
    assert r.returncode != 0, r.stderr[-2000:]
    assert f"does not define the parameter {typo!r} (did you mean {declared[0]!r}?)" in r.stderr, r.stderr[-3000:]
    assert "pass only parameters it defines: " + ", ".join(declared) in r.stderr
    done = [c for c in nbformat.read(tmp_path/"out.ipynb", as_version=4).cells if c.cell_type == "code" and c.execution_count]
    # the cell after the injected one checks them: a suite's run (`notebook_definition`) or the names alone
    check = ("from cwm_nb.experiments.notebooks import notebook_definition",
             "from cwm_nb.experiments.notebooks import reject_unknown_params")
    assert [c.source.split("\n")[0] for c in done][:2] == [done[0].source.split("\n")[0], "# Parameters"]
    assert len(done) == 3 and done[2].source.split("\n")[0] in check, [c.source[:80] for c in done]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.ipynb"]   # nothing ran that could write or spend

def test_papermill_by_hand_refuses_values_an_untagged_parameters_cell_would_override(tmp_path):
    "Without the `parameters` tag (a cleaner that drops cell tags), papermill injects at the top and the defaults win."
    import nbformat
    nb = nbformat.read(ROOT/"nbs"/"experiments"/"cwmb.ipynb", as_version=4)
    for c in nb.cells: c.metadata.pop("tags", None)
    nbformat.write(nb, tmp_path/"untagged.ipynb")
    r = papermill(tmp_path/"untagged.ipynb", tmp_path/"out.ipynb", "-p", "budget", "1", cwd=tmp_path)
    assert r.returncode != 0 and "has no cell tagged `parameters`, so 'budget' would not reach it" in r.stderr, r.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.ipynb", "untagged.ipynb"]

def test_run_notebook_refuses_an_unknown_parameter_before_papermill_starts(tmp_path):
    from cwm_nb.core import CwmNbError
    from dataclasses import fields
    from cwm_nb.experiments.definition import CWMBSettings
    from cwm_nb.experiments.notebooks import run_notebook
    CWMB_PARAMS = [f.name for f in fields(CWMBSettings)] + ["options"]
    with pytest.raises(CwmNbError) as e:
        run_notebook("cwmb", dict(budgt=1, out=str(tmp_path)), tmp_path/"run"/"nb.ipynb", stream=False)
    assert "experiments/cwmb.ipynb does not define the parameter 'budgt' (did you mean 'budget'?)" in str(e.value)
    assert ", ".join(CWMB_PARAMS) in str(e.value)
    assert list(tmp_path.iterdir()) == []   # papermill writes its output notebook first thing: it never started

def test_plan_run_and_sweep_share_one_default_planning_preset(tmp_path):
    """One definition (`DEFAULT_PLAN_PRESET`, 15_planning): the run's settings (whence the CLI's and the CWMB
    notebook's defaults), `cwm-nb plan`, sweeps and the library's `evaluate_planning`."""
    import ast, inspect, papermill as pm
    from cwm_nb.experiments import cli, sweeps
    from cwm_nb.experiments.definition import CWMBSettings, define_run
    from cwm_nb.bench import oracle, planning
    p = cli.build_parser()
    presets = {"plan": p.parse_args(["plan", "--env", "CartPole-v1", "--program", "x.py"]).preset,
               "sweep": p.parse_args(["sweep", "cwmb"]).plan_preset, "settings": CWMBSettings().plan_preset,
               "run": define_run("cwmb").planner_preset().name,
               "evaluate_planning": inspect.signature(oracle.evaluate_planning).parameters["preset"].default,
               "cwmb.ipynb": ast.literal_eval(pm.inspect_notebook(str(ROOT/"nbs"/"experiments"/"cwmb.ipynb"))["plan_preset"]["default"])}
    assert presets == dict.fromkeys(presets, planning.DEFAULT_PLAN_PRESET) and planning.DEFAULT_PLAN_PRESET == "quick"
    assert {j.opts["plan_preset"] for j in sweeps.plan_sweep(tmp_path, envs="CartPole-v1")} == {"quick"}

def test_papermill_reads_every_parameter_of_each_experiment_notebook():
    "papermill's own reader of a `parameters` cell (`--help-notebook`, its warnings) sees every name the cell assigns."
    import papermill as pm
    from cwm_nb.experiments.notebooks import notebook_params
    for nb in EXPERIMENTS: assert sorted(pm.inspect_notebook(str(nb))) == sorted(notebook_params(nb)), nb.name

def test_parameters_cells_are_made_from_the_settings():
    "Each experiment notebook's `parameters` cell is `definition.parameters_cell` (tools/params_cells.py writes it)."
    sys.path.insert(0, str(ROOT/"tools"))
    import params_cells
    assert params_cells.stale() == [], "run python tools/params_cells.py"

def test_wrong_parameter_type_is_a_clear_error(tmp_path):
    from cwm_nb.core import CwmNbError
    from cwm_nb.experiments.notebooks import run_notebook
    with pytest.raises(CwmNbError, match="must be int"):
        run_notebook("cwmb", dict(budget="three", out=str(tmp_path)), tmp_path/"nb.ipynb", stream=False)
    assert not (tmp_path/"nb.ipynb").exists()


def _paper_buffers() -> Path:
    "Where the user keeps the paper's pickles: $CWM_NB_PAPER_BUFFERS, else data/paper_buffers (the loader's own rule)."
    from cwm_nb.bench.paper_pickles import DEFAULT_PAPER_BUFFERS, PAPER_BUFFERS_ENV_VAR
    return Path(os.environ.get(PAPER_BUFFERS_ENV_VAR) or ROOT.joinpath(*DEFAULT_PAPER_BUFFERS))

PAPER = _paper_buffers()

def test_envs_lists_all_benchmark_environments():
    from cwm_nb.bench.envs import env_names
    r = cli("envs")
    assert r.returncode == 0, r.stderr
    names = env_names()
    assert len(names) == 19 and names[-1] == "rtfm"
    body = r.stdout.splitlines()[2:]
    assert [l.split()[0] for l in body] == names
    assert "Taxi-v4" in r.stdout and "Pusher-v5" in r.stdout and "CliffWalking-v1" in r.stdout

def test_plan_json_line_with_the_keys_and_a_stored_copy(tmp_path):
    r = cli("plan", "--env", "CartPole-v1", "--program", CARTPOLE_CWM, "--episodes", 2,
            "--preset", "quick", "--seed", 3, "--out", tmp_path, "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1
    d = json.loads(lines[0])
    for k in ("normalized_return", "return_cwm", "return_random", "return_oracle", "env", "preset", "episodes", "seed"):
        assert k in d, k
    assert d["episodes"] == 2 and d["preset"] == "quick" and d["accuracy"] == 1.0
    expect = (d["return_cwm"] - d["return_random"]) / (d["return_oracle"] - d["return_random"])
    assert abs(d["normalized_return"] - expect) < 1e-9
    stored = json.loads(Path(d["stored"]).read_text())
    assert stored["return_cwm"] == d["return_cwm"] and Path(d["stored"]).is_relative_to(tmp_path/"plan"/"CartPole-v1")
    r = cli("plan", "--env", "CartPole-v1", "--program", CARTPOLE_CWM, "--episodes", 0)
    assert r.returncode == 2 and "--episodes" in r.stderr and "Traceback" not in r.stderr

@pytest.mark.skipif(not (PAPER/"CartPole-v1.pkl").exists(), reason="the paper's buffers are not here (set $CWM_NB_PAPER_BUFFERS to their folder)")
def test_eval_program_on_the_papers_buffer():
    r = cli("eval-program", "--env", "CartPole-v1", CARTPOLE_CWM, "--buffer",
            PAPER/"CartPole-v1.pkl", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    d = json.loads(r.stdout)
    assert d["accuracy"] == 1.0 and d["n_transitions"] == 402
    r = cli("eval-program", "--env", "Taxi-v3", CARTPOLE_CWM, "--buffer", PAPER/"CartPole-v1.pkl")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]   # another environment's buffer

def test_collect_regenerates_the_shipped_buffer(tmp_path):
    from cwm_nb.bench.replay import ReplayBuffer, default_buffer_path
    r = cli("collect", "--env", "CartPole-v1", "--seed", 0, "--out", tmp_path/"buf")
    assert r.returncode == 0, r.stderr[-3000:]
    assert ReplayBuffer.load(tmp_path/"buf").fingerprint() == ReplayBuffer.load(default_buffer_path("CartPole-v1")).fingerprint()

def test_collect_with_a_seed_no_program_can_know(tmp_path):
    "`--seed random`: a buffer of draws nobody can regenerate, its seed in the meta alone; a bad seed says what to pass."
    from cwm_nb.bench.replay import ReplayBuffer, default_buffer_path
    bufs = []
    for k in range(2):
        r = cli("collect", "--env", "Blackjack-v1", "--seed", "random", "--out", tmp_path/f"b{k}")
        assert r.returncode == 0, r.stderr[-3000:]
        bufs.append(ReplayBuffer.load(tmp_path/f"b{k}"))
    seeds = [b.meta["seed"] for b in bufs]
    assert seeds[0] != seeds[1] and all(2**20 < s < 2**63 for s in seeds), seeds   # 63 random bits each
    prints = {b.fingerprint() for b in bufs} | {ReplayBuffer.load(default_buffer_path("Blackjack-v1")).fingerprint()}
    assert len(prints) == 3
    r = cli("collect", "--env", "Blackjack-v1", "--seed", "secret", "--out", tmp_path/"b2")
    assert r.returncode == 2 and "not a collection seed" in r.stderr and "'random'" in r.stderr and "Traceback" not in r.stderr

CRASH = "```python\nclass Environment:\n    def __init__(self):\n        raise RuntimeError('no model here')\n```\n"

def test_every_environment_runs_end_to_end_and_a_crashing_program_scores_zero(tmp_path):
    "All 19 environments through the same pipeline a `cwm-nb run` uses, with a scripted LLM whose program crashes."
    from cwm_nb.bench.envs import env_names
    from cwm_nb.experiments.metrics import run_cwmb_search, write_metrics
    from cwm_nb.llm.demo import ScriptedLLM
    for env in env_names():
        out = run_cwmb_search(env=env, model="scripted", budget=1, out=tmp_path, llm=ScriptedLLM([CRASH]),
                              plan_preset="none", progress=False)
        write_metrics(out)
        m = json.loads((out.run_dir/"metrics.json").read_text())
        assert m["accuracy"] == 0.0 and m["best_is_bug"] and "no model here" in m["best_error"], env
        assert m["n_transitions"] > 0 and m["status"] == "complete", env
        assert (out.run_dir/"program.py").read_text().count("no model here") == 1

def test_run_puts_the_normalized_return_in_metrics(tmp_path):
    from cwm_nb.experiments.metrics import plan_run, run_cwmb_search, write_metrics
    from cwm_nb.llm.demo import ScriptedLLM
    good = "```python\n" + CARTPOLE_CWM.read_text() + "\n```\n"
    out = run_cwmb_search(env="CartPole-v1", model="scripted", budget=1, out=tmp_path, llm=ScriptedLLM([good]),
                          plan_preset="quick", plan_episodes=2, progress=False)
    assert out.metrics["accuracy"] == 1.0
    planning = plan_run(out, preset="quick", episodes=2, progress=False)
    write_metrics(out, **planning)
    m = json.loads((out.run_dir/"metrics.json").read_text())
    for k in ("normalized_return", "return_cwm", "return_random", "return_oracle"):
        assert isinstance(m[k], float), k
    assert m["normalized_return"] == pytest.approx((m["return_cwm"] - m["return_random"]) / (m["return_oracle"] - m["return_random"]))
    assert json.loads((out.run_dir/"planning.json").read_text())["return_cwm"] == m["return_cwm"]
    assert m["isolation"] in ("bwrap", "landlock")   # the sandbox mode that ran the programs (03_sandbox)

def test_rtfm_runs_from_the_command_line(tmp_path, cache_env):
    r = cli("run", "rtfm", "--model", "embedded", "--budget", 1, "--out", tmp_path, "--plan-preset", "quick",
            "--plan-episodes", 1, env=cache_env)
    assert r.returncode == 0, r.stderr[-3000:]
    m = json.loads((tmp_path/"rtfm"/"rtfm"/"gif-mcts"/"embedded"/"seed0"/"metrics.json").read_text())
    assert m["env"] == "rtfm" and m["suite"] == "rtfm" and m["llm_calls"] == 1 and m["n_transitions"] == 1000
    assert isinstance(m["return_random"], float)

def test_bad_run_input_is_refused_before_the_kernel_starts(tmp_path):
    "Each of these fails in the command itself (no papermill, no run folder), with exit 2 and no traceback."
    from cwm_nb.bench.replay import default_buffer_path
    cases = [("run", "rtfm", "--env", "CartPole-v1"),                                   # rtfm runs RTFM only
             ("run", "cwmb", "--model", "no-such-model"),                               # unknown model
             ("run", "cwmb", "--env", "CartPole-v1", "--buffer", default_buffer_path("Taxi-v3")),  # another env's buffer
             ("run", "cwmb", "--set", "Cx=1"),                                          # unknown option
             ("run", "cwmb", "--set", "C=high"),                                        # bad value
             ("run", "cwmb", "--set", "gamma=0.5"),                                     # a name in two parts
             ("run", "cwmb", "--plan-preset", "none", "--set", "planner.c_uct=2")]      # an option of no part it uses
    for args in cases:
        t0 = time.time()
        r = cli(*args, "--out", tmp_path/"r")
        assert r.returncode == 2 and "Traceback" not in r.stderr and "What to do" in r.stderr, (args, r.stderr[-1500:])
        assert time.time() - t0 < 60 and not (tmp_path/"r"/"cwmb"/"CartPole-v1").exists(), args
    assert "rtfm" in cli(*cases[0], "--out", tmp_path/"r").stderr

def test_collect_refuses_to_overwrite_another_buffer(tmp_path):
    import shutil
    from cwm_nb.bench.replay import default_buffer_path
    shutil.copytree(default_buffer_path("rtfm"), tmp_path/"b")
    before = (tmp_path/"b"/"transitions.npz").read_bytes()
    r = cli("collect", "--env", "Taxi-v3", "--out", tmp_path/"b")
    assert r.returncode == 2 and "rtfm" in r.stderr and "Traceback" not in r.stderr
    assert (tmp_path/"b"/"transitions.npz").read_bytes() == before

def test_plan_reports_fallbacks_of_a_crashing_program(tmp_path):
    (tmp_path/"crash.py").write_text("class Environment:\n    def set_state(self, s): pass\n    def step(self, a): raise ValueError('nope')\n")
    r = cli("plan", "--env", "CartPole-v1", "--program", tmp_path/"crash.py", "--episodes", 1, "--preset", "quick",
            "--out", tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "warning:" in r.stdout and "random" in r.stdout and "raised" in r.stdout
    r = cli("plan", "--env", "CartPole-v1", "--program", tmp_path/"crash.py", "--episodes", 1, "--preset", "quick",
            "--out", tmp_path, "--json")
    d = json.loads(r.stdout)
    assert d["fallbacks"] == d["decisions"] > 0 and d["normalized_return"] == pytest.approx(0.0)


@pytest.mark.parametrize("hostile", ["exits", "system-python"])
def test_experiment_notebook_runs_in_this_interpreter_whatever_kernelspecs(hostile, tmp_path, monkeypatch):
    "A `python3` kernelspec of another interpreter on JUPYTER_PATH does not decide where an experiment notebook runs."
    import nbformat
    import cwm_nb
    from cwm_nb.experiments import notebooks
    argv = {"exits": ["/bin/sh", "-c", "echo 'not the cwm-nb interpreter' >&2; exit 3", "{connection_file}"],
            "system-python": ["/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"]}[hostile]
    if hostile == "system-python" and not Path(argv[0]).exists(): pytest.skip("no /usr/bin/python3 on this machine")
    spec = tmp_path/"jupyter"/"kernels"/"python3"
    spec.mkdir(parents=True)
    (spec/"kernel.json").write_text(json.dumps({"argv": argv, "display_name": "Python 3 (another)", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path/"jupyter"))
    from jupyter_client.kernelspec import KernelSpecManager
    assert KernelSpecManager().get_kernel_spec("python3").argv == argv   # the hostile spec is what `python3` means now
    # a small experiment notebook: one parameter, one cell that records where it ran
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "python3", "language": "python"}})
    nb.cells = [nbformat.v4.new_code_cell('out: str = ""', metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell("import json, sys, cwm_nb\n"
                                          "json.dump({'executable': sys.executable, 'package': cwm_nb.__file__}, open(out, 'w'))")]
    (tmp_path/"nbs").mkdir()
    nbformat.write(nb, tmp_path/"nbs"/"where.ipynb")
    monkeypatch.setattr(notebooks, "experiments_dir", lambda: tmp_path/"nbs")
    done = notebooks.run_notebook("where", dict(out=str(tmp_path/"where.json")), tmp_path/"run"/"where.ipynb", stream=False)
    ran = json.loads((tmp_path/"where.json").read_text())
    assert ran == {"executable": sys.executable, "package": cwm_nb.__file__}
    meta = nbformat.read(done, as_version=4).metadata
    assert meta.kernelspec.name == notebooks.KERNEL_NAME and sys.executable in meta.kernelspec.display_name


def test_an_experiment_kernel_is_reached_over_unix_sockets_of_its_own(tmp_path, monkeypatch):
    """The runner reaches its kernel over Unix sockets in a folder of that kernel's own, removed at shutdown: no TCP
    port another process (a second run of a sweep, the embedded model's server) could take between jupyter choosing
    it and the kernel binding it. With TCP, such a kernel failed to bind its iopub port and hung; the run failed
    after 60 s. (ipykernel binds one TCP port of its own for forked children's output: it binds it at once,
    retrying another port if taken, so no other process can take it first.)"""
    import nbformat
    from cwm_nb.experiments import notebooks
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell('out: str = ""', metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell(
                    "import json, os, psutil\n"
                    "from ipykernel.connect import get_connection_info\n"
                    "info = json.loads(get_connection_info())\n"
                    "folder = os.path.dirname(info['ip'])\n"
                    "unix = sorted({c.laddr for c in psutil.Process().net_connections('unix') if c.laddr})\n"
                    "json.dump({'transport': info['transport'], 'ip': info['ip'], 'bound': unix,\n"
                    "           'mode': os.stat(folder).st_mode & 0o777, 'files': sorted(os.listdir(folder))}, open(out, 'w'))")]
    (tmp_path/"nbs").mkdir()
    nbformat.write(nb, tmp_path/"nbs"/"sockets.ipynb")
    monkeypatch.setattr(notebooks, "experiments_dir", lambda: tmp_path/"nbs")
    notebooks.run_notebook("sockets", dict(out=str(tmp_path/"sockets.json")), tmp_path/"run"/"sockets.ipynb", stream=False)
    seen = json.loads((tmp_path/"sockets.json").read_text())
    folder = Path(seen["ip"]).parent
    channels = [f"kernel-ipc-{n}" for n in range(1, 6)]   # shell, iopub, stdin, control, heartbeat
    assert seen["transport"] == "ipc" and seen["bound"] == [str(folder/c) for c in channels]   # the kernel's own view
    assert folder.name.startswith("cwm-nb-kernel-") and seen["mode"] == 0o700
    assert seen["files"] == [*channels, "kernel.json"]
    assert not folder.exists()   # removed when the kernel shut down
