"""Any gymnasium environment gets the whole workbook: registered ids, entry points `module:attr` with kwargs,
environments defined here (tests/toy_envs.py), their descriptions, cached buffers, scoring, search and planning,
and the errors for what cannot work."""
import json, os, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
CLI = str(Path(sys.executable).with_name("cwm-nb"))
CORRIDOR_CWM = (HERE/"toy_corridor_cwm.py").read_text()
FROZENLAKE_CWM = (HERE/"toy_frozenlake_cwm.py").read_text()


@pytest.fixture(autouse=True)
def own_envs(tmp_path, monkeypatch):
    "tests/ on the import path (the entry points live in toy_envs.py), a fresh cache, and a fresh session."
    from cwm_nb.bench import envs
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setenv("CWM_NB_CACHE", str(tmp_path/"cache"))
    monkeypatch.delenv(envs.SESSION_ENV_VAR, raising=False)
    monkeypatch.setattr(envs, "_SESSION", {})
    for f in (envs.describe_env, envs.env_class): f.cache_clear()


def _cli_env(tmp_path):
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)]), "CWM_NB_CACHE": str(tmp_path/"cache")}


def test_a_registered_id_gets_a_description_a_cached_buffer_and_a_score(tmp_path):
    from cwm_nb.bench.envs import resolve_env, describe_env
    from cwm_nb.bench.replay import load_buffer
    from cwm_nb.bench.cwm import evaluate_program
    spec = resolve_env("FrozenLake-v1", '{"is_slippery": false}')
    assert (spec.suite, spec.obs_format, spec.state_kind, spec.planner) == ("gym", "int", "discrete", "mcts")
    d = describe_env(spec)
    assert d.startswith("## Description") and "## Spaces (generated from the environment)" in d and "Discrete(16)" in d
    assert "## Arguments" not in d and "## Version History" not in d      # the benchmark's section handling
    buf = load_buffer(spec)
    kept = list((tmp_path/"cache"/"buffers"/"gym").iterdir())
    assert len(kept) == 1 and kept[0].name.startswith(spec.name)
    assert buf.meta["env_kwargs"] == {"is_slippery": False} and len(buf.episode_lengths()) == 10
    assert load_buffer(spec).same_transitions(buf) and len(list((tmp_path/"cache"/"buffers"/"gym").iterdir())) == 1
    ev = evaluate_program(FROZENLAKE_CWM, buf)
    assert (ev.accuracy, ev.exact_replay, ev.error) == (1.0, 1.0, None)


def test_an_entry_point_of_ones_own_gets_its_docstring_and_plans_against_an_oracle():
    from cwm_nb.bench.envs import resolve_env
    from cwm_nb.bench.replay import load_buffer
    from cwm_nb.bench.cwm import evaluate_program
    from cwm_nb.bench.oracle import evaluate_planning
    spec = resolve_env("toy_envs:Corridor")
    assert (spec.entry_point, spec.horizon, spec.planner) == ("toy_envs:Corridor", 100, "mcts")
    assert "Walking into a wall" in spec.description and "`length`: number of cells" not in spec.description
    assert evaluate_program(CORRIDOR_CWM, load_buffer(spec)).accuracy == 1.0
    pr = evaluate_planning(spec, CORRIDOR_CWM, episodes=2, preset="quick", progress=False)
    assert pr.oracle_note is None and pr.return_oracle is not None and pr.return_oracle > pr.return_random
    assert pr.normalized_return == pytest.approx(1.0)


def test_kwargs_and_a_factory_are_other_environments():
    from cwm_nb.bench.envs import resolve_env, make_env
    a, b = resolve_env("toy_envs:Corridor"), resolve_env("toy_envs:Corridor", {"length": 4})
    assert a.name != b.name and b.make_kwargs == {"length": 4}
    assert make_env(b).unwrapped.length == 4
    f = resolve_env("toy_envs:make_corridor")
    assert f.horizon == 30 and "Walking into a wall" in f.description   # the factory's env class documents it


def test_no_oracle_is_said_with_its_reason_and_raw_returns_are_kept():
    from cwm_nb.bench.envs import resolve_env
    from cwm_nb.bench.oracle import evaluate_planning
    spec = resolve_env("toy_envs:LockedCorridor")
    pr = evaluate_planning(spec, CORRIDOR_CWM, episodes=2, preset="quick", progress=False)
    assert pr.return_oracle is None and pr.normalized_return is None and pr.return_cwm is not None
    assert pr.oracle_note.startswith("no oracle for this environment, because cannot snapshot LockedCorridor: its attribute 'lock'")


def test_a_continuous_environment_is_planned_with_cem():
    from cwm_nb.bench.envs import resolve_env
    spec = resolve_env("toy_envs:Drift")
    assert (spec.action_kind, spec.planner, spec.state_kind) == ("continuous", "cem", "continuous")


@pytest.mark.parametrize("env, kwargs, says", [
    ("no_such_module_xyz:Env", "", "does not import: ModuleNotFoundError"),
    ("toy_envs:Pixels", "", "image observations"),
    ("toy_envs:BrokenReset", "", "reset(seed=0) failed (ValueError: the level file is missing)"),
    ("toy_envs:NeedsWindow", "", "making the environment needs a display"),
    ("toy_envs:Corridor", '{"width": 3}', "making the environment failed"),
    ("MiniGrid-Empty-5x5-v0", "", "'mission'"),
    ("CartPole-v1", '{"sutton_barto_reward": true}', "whose arguments are fixed"),
    ("FrozenLake-v1", "[1]", "must be a JSON object"),
])
def test_what_cannot_work_is_a_clear_error(env, kwargs, says):
    from cwm_nb.core import CwmNbError
    from cwm_nb.bench.envs import resolve_env
    with pytest.raises(CwmNbError) as e: resolve_env(env, kwargs)
    assert says in str(e.value)


def test_a_run_that_cannot_start_writes_nothing(tmp_path):
    r = subprocess.run([CLI, "run", "cwmb", "--env", "toy_envs:Pixels", "--model", "embedded", "--out", str(tmp_path/"r")],
                       capture_output=True, text=True, env=_cli_env(tmp_path), cwd=ROOT, timeout=300)
    assert r.returncode == 2 and "image observations" in r.stderr, r.stderr[-2000:]
    assert not (tmp_path/"r").exists()


def test_search_on_ones_own_environment_records_what_it_was(tmp_path):
    from cwm_nb.experiments.metrics import run_cwmb_search, plan_run, write_metrics
    from cwm_nb.llm.demo import ScriptedLLM
    out = run_cwmb_search(env="toy_envs:Corridor", env_kwargs='{"length": 6}', model="scripted", budget=1,
                          out=tmp_path/"r", llm=ScriptedLLM(["```python\n" + CORRIDOR_CWM + "\n```\n"]),
                          plan_preset="quick", plan_episodes=2, progress=False)
    m = out.metrics
    assert out.run_dir.relative_to(tmp_path/"r").parts[:2] == ("gym", m["env"]) and m["env"].startswith("toy_envs.Corridor-")
    assert (m["env_id"], m["entry_point"], m["env_kwargs"]) == ("toy_envs:Corridor", "toy_envs:Corridor", {"length": 6})
    assert m["accuracy"] == 1.0 and m["heldout_accuracy"] == 1.0 and m["deterministic"] is True
    assert "Walking into a wall" in (out.run_dir/"description.md").read_text()
    planning = plan_run(out, preset="quick", episodes=2, progress=False)
    assert planning["normalized_return"] == pytest.approx(1.0)
    write_metrics(out, **planning)
    from cwm_nb.experiments.index import build_index
    from cwm_nb.experiments.figures import table_other_envs
    row = build_index(tmp_path/"r").iloc[0]
    assert (row.suite, row.env, row.env_id, row.env_kwargs, row.action_kind) == \
        ("gym", m["env"], "toy_envs:Corridor", '{"length": 6}', "discrete")
    t = table_other_envs(build_index(tmp_path/"r")).df
    assert t.index.get_level_values("env").tolist() == [m["env"]] and t["R"].iloc[0] == pytest.approx(1.0)


def test_a_sweep_takes_gymnasium_ids_and_entry_points():
    from cwm_nb.experiments.sweeps import expand_envs
    assert expand_envs("CartPole-v1,FrozenLake-v1,toy_envs:Corridor") == ["CartPole-v1", "FrozenLake-v1", "toy_envs.Corridor"]


def test_eval_program_takes_an_id_with_kwargs_from_the_command_line(tmp_path):
    (tmp_path/"p.py").write_text(FROZENLAKE_CWM)
    r = subprocess.run([CLI, "eval-program", str(tmp_path/"p.py"), "--env", "FrozenLake-v1", "--env-kwargs",
                        '{"is_slippery": false}', "--no-determinism"],
                       capture_output=True, text=True, env=_cli_env(tmp_path), cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "accuracy 1.0000" in r.stdout and r.stdout.startswith("FrozenLake-v1-")


def test_a_registered_spec_reaches_a_child_process(tmp_path):
    from cwm_nb.bench import envs
    spec = envs.register_env("toy_envs:Corridor", {"length": 5}, name="my-corridor")
    code = "from cwm_nb.bench.envs import get_env_spec; s = get_env_spec('my-corridor'); print(s.entry_point, s.make_kwargs)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       env={**_cli_env(tmp_path), envs.SESSION_ENV_VAR: os.environ[envs.SESSION_ENV_VAR]}, timeout=120)
    assert r.stdout.split() == ["toy_envs:Corridor", "{'length':", "5}"], r.stderr[-2000:]
    assert spec.name == "my-corridor"


def test_the_own_environment_notebook_runs_the_whole_path(tmp_path):
    "nbs/experiments/own_env.ipynb under papermill: an env defined in the notebook, registered, searched, scored, planned."
    from cwm_nb.experiments.notebooks import run_notebook
    run_notebook("own_env", dict(out=str(tmp_path/"r"), seed=0, budget=1, plan_episodes=2), tmp_path/"nb.ipynb", stream=False)
    m = json.loads((tmp_path/"r"/"gym"/"lights"/"gif-mcts"/"scripted"/"seed0"/"metrics.json").read_text())
    assert (m["env"], m["entry_point"], m["accuracy"], m["status"]) == ("lights", "__main__:Lights", 1.0, "complete")
    assert m["normalized_return"] == pytest.approx(1.0)


def test_a_dict_observation_is_flattened_as_its_description_says():
    from cwm_nb.bench.envs import resolve_env
    from cwm_nb.bench.replay import load_buffer
    from cwm_nb.bench.cwm import evaluate_program
    from cwm_nb.bench.oracle import evaluate_planning
    spec = resolve_env("toy_envs:Beacon")
    assert (spec.obs_format, spec.state_kind) == ("array", "discrete")
    assert "- index 0: `lit` (MultiBinary)\n- index 1: `pos` (Discrete)" in spec.description
    buf = load_buffer(spec)
    assert buf.obs.shape[1:] == (2,) and buf.obs.dtype.kind == "i"
    program = (HERE/"toy_beacon_cwm.py").read_text()
    assert evaluate_program(program, buf).accuracy == 1.0
    pr = evaluate_planning(spec, program, episodes=2, preset="quick", progress=False)
    assert pr.return_oracle == 1.0 and pr.return_cwm == 1.0


def test_a_generated_spec_has_valid_action_masks_when_info_carries_them():
    "Taxi puts info['action_mask'] (gymnasium 1.x toy text); FrozenLake does not: the spec says which, and neither computes masks."
    from cwm_nb.core import CwmNbError
    from cwm_nb.bench.envs import resolve_env, spec_from_gym, valid_action_masks
    taxi, lake = spec_from_gym("Taxi-v4"), resolve_env("FrozenLake-v1")   # Taxi-v4 is the benchmark Taxi-v3's id
    assert (taxi.action_mask, lake.action_mask) == ("info", "")
    with pytest.raises(CwmNbError, match="only from the environment's info"): valid_action_masks(taxi, [0])
    with pytest.raises(CwmNbError, match="has no valid-action masks"): valid_action_masks(lake, [0])

def test_a_search_on_ones_own_environment_resumes_from_its_folder(tmp_path):
    "The same run again (same env, kwargs, seed) finds its checkpoint: no further LLM call; other kwargs are another folder."
    from cwm_nb.experiments.metrics import run_cwmb_search
    from cwm_nb.llm.demo import ScriptedLLM
    kw = dict(env="toy_envs:Corridor", env_kwargs='{"length": 6}', model="scripted", budget=1, out=tmp_path/"r",
              plan_preset="none", progress=False)
    first = run_cwmb_search(**kw, llm=ScriptedLLM(["```python\n" + CORRIDOR_CWM + "\n```\n"]))
    again = run_cwmb_search(**kw, llm=ScriptedLLM([]))          # would raise if it were asked
    assert again.run_dir == first.run_dir and again.metrics["accuracy"] == first.metrics["accuracy"] == 1.0
    other = run_cwmb_search(**{**kw, "env_kwargs": '{"length": 7}'}, llm=ScriptedLLM(["```python\n" + CORRIDOR_CWM + "\n```\n"]))
    assert other.run_dir != first.run_dir and other.metrics["accuracy"] < 1.0


def test_cwm_nb_run_takes_an_entry_point_with_kwargs_through_papermill(tmp_path):
    "The command line's path: --env module:attr and --env-kwargs reach the experiment notebook; the run folder and metrics name them."
    from cwm_nb.testing.provider_double import ProviderDouble
    with ProviderDouble("openai", answers="capable", idle_timeout=600) as d:
        r = subprocess.run([CLI, "run", "cwmb", "--env", "toy_envs:Corridor", "--env-kwargs", '{"length": 6}',
                            "--model", "openai:gpt-4o", "--base-url", d.base_url, "--budget", "1", "--out", str(tmp_path/"r"),
                            "--plan-preset", "none"], capture_output=True, text=True, env=_cli_env(tmp_path), cwd=ROOT, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    (rd,) = (tmp_path/"r"/"gym").glob("toy_envs.Corridor-*/gif-mcts/openai_gpt-4o/seed0")
    m = json.loads((rd/"metrics.json").read_text())
    assert (m["entry_point"], m["env_kwargs"], m["status"]) == ("toy_envs:Corridor", {"length": 6}, "complete")
    assert json.loads((rd/"settings.json").read_text())["env_kwargs"] == '{"length": 6}'
    assert "Walking into a wall" in (rd/"description.md").read_text()


def test_lunar_lander_gets_a_buffer_and_says_why_it_has_no_oracle():
    pytest.importorskip("Box2D", reason="Box2D is not installed (extra box2d)")
    from cwm_nb.bench.envs import resolve_env
    from cwm_nb.bench.replay import load_buffer
    from cwm_nb.bench.oracle import oracle_problem
    spec = resolve_env("LunarLander-v3")
    assert (spec.planner, spec.obs_format, spec.state_kind) == ("mcts", "array", "continuous")
    buf = load_buffer(spec)
    assert buf.obs.shape[1:] == (8,)
    assert buf.meta["stochastic"]["stochastic"] is None   # its copies cannot be stepped: whether it is random stays open
    assert oracle_problem(spec).startswith("cannot snapshot LunarLander: its attribute 'world' (b2World) cannot be copied")


def test_collect_takes_counts_and_length_and_a_run_reads_that_folder(tmp_path):
    run = lambda *a: subprocess.run([CLI, *a], capture_output=True, text=True, env=_cli_env(tmp_path), cwd=ROOT, timeout=300)
    r = run("collect", "--env", "toy_envs:Corridor", "--episodes", "3", "--max-steps", "20", "--out", str(tmp_path/"b"))
    assert r.returncode == 0 and "3 episodes" in r.stdout, r.stderr[-2000:]
    (tmp_path/"p.py").write_text(CORRIDOR_CWM)
    r = run("eval-program", str(tmp_path/"p.py"), "--env", "toy_envs:Corridor", "--buffer", str(tmp_path/"b"), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["n_transitions"] == 45, r.stderr[-2000:]
    r = run("collect", "--env", "CartPole-v1", "--episodes", "3", "--out", str(tmp_path/"c"))
    assert r.returncode == 2 and "has its own collection plan" in r.stderr
