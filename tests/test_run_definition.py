"""One definition of a run (nbs/50_run_definition.ipynb): options set with `--set` reach the search and the planner,
are recorded, name the run folder, are swept as a grid and indexed; a run repeats from its settings.json; a run made
by other code is never silently reused. Real `cwm-nb` processes against the provider test double on 127.0.0.1, each
with a response cache of its own (`cache_env`), so a cached answer never hides the endpoint."""
import json, subprocess, sys
from pathlib import Path

import pandas as pd
import pytest

from cwm_nb.core import atomic_write_json
from cwm_nb.experiments.definition import code_fingerprint, define_run
from cwm_nb.experiments.runs import check_run_settings
from cwm_nb.testing.provider_double import ProviderDouble

ROOT = Path(__file__).resolve().parents[1]
CLI = str(Path(sys.executable).parent/"cwm-nb")


def cli(*args, env=None, timeout=900) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)


@pytest.fixture(scope="module")
def double():
    with ProviderDouble("openai", answers="capable") as d: yield d


def model_args(d: ProviderDouble) -> list:
    return ["--model", "vllm:house-model", "--base-url", d.base_url]


def test_set_reaches_the_search_and_the_planner_and_is_recorded(tmp_path, cache_env, double):
    r = cli("run", "cwmb", "--env", "CartPole-v1", "--budget", 2, "--plan-episodes", 1, "--set", "C=5",
            "--set", "fix_terminal_value=false", "--set", "planner.c_uct=2", *model_args(double), "--out", tmp_path,
            env=cache_env)
    assert r.returncode == 0, r.stderr[-3000:]
    [rd] = [p.parent for p in tmp_path.rglob("metrics.json")]
    assert rd.parent.parent.name == "gif-mcts+C=5+fix_terminal_value=false+planner.c_uct=2"   # its own folder
    config = json.loads((rd/"checkpoint.json").read_text())["config"]   # what the search ran with
    assert config["C"] == 5.0 and config["fix_terminal_value"] is False and config["v_i"] == 0.55
    s, m = json.loads((rd/"settings.json").read_text()), json.loads((rd/"metrics.json").read_text())
    assert s["options"] == {"method.C": 5.0, "method.fix_terminal_value": False, "planner.c_uct": 2.0}
    assert s["method_config"]["C"] == 5.0 and s["planner_config"]["mcts"]["c_uct"] == 2.0   # defaults included
    assert s["planner_config"]["mcts"]["simulations"] == 10 and s["code"] == code_fingerprint("cwmb", "gif-mcts")
    assert m["definition"] == s and m["options"] == s["options"] and m["code"] == s["code"]["fingerprint"]
    planning = json.loads((rd/"planning.json").read_text())
    assert planning["preset"] == "quick+planner.c_uct=2"   # the planner ran with the option


def test_a_run_repeats_from_its_settings_and_other_code_is_never_reused_silently(tmp_path, cache_env, double):
    args = ("run", "cwmb", "--env", "CartPole-v1", "--budget", 1, "--plan-preset", "none", "--set", "C=2",
            *model_args(double))
    assert cli(*args, "--out", tmp_path/"a", env=cache_env).returncode == 0
    [settings] = list((tmp_path/"a").rglob("settings.json"))
    # the same definition from its record: the complete run is found
    again = cli("run", "--from", settings, "--out", tmp_path/"a", env=cache_env)
    assert again.returncode == 0 and "complete run found, skipped" in again.stderr, again.stderr[-2000:]
    # ... and made anew elsewhere, with the same record
    other = cli("run", "--from", settings, "--out", tmp_path/"b", env=cache_env)
    assert other.returncode == 0, other.stderr[-2000:]
    [copy] = list((tmp_path/"b").rglob("settings.json"))
    assert json.loads(copy.read_text()) == json.loads(settings.read_text())
    # the folder's run was made by other code (a method module edited since): refused, naming the module
    rec = json.loads(settings.read_text())
    rec["code"] = {"fingerprint": "0" * 12, "modules": {**rec["code"]["modules"], "cwm_nb.search.gif_mcts": "0" * 12}}
    atomic_write_json(settings, rec)
    stale = cli(*args, "--out", tmp_path/"a", env=cache_env)
    assert stale.returncode == 2 and "made by other code: cwm_nb.search.gif_mcts changed" in stale.stderr
    assert "--force" in stale.stderr and "Traceback" not in stale.stderr
    forced = cli(*args, "--out", tmp_path/"a", "--force", env=cache_env)
    assert forced.returncode == 0 and json.loads(settings.read_text())["code"] == code_fingerprint("cwmb", "gif-mcts")


def test_a_sweep_grid_over_an_option_gets_a_folder_and_an_index_column_per_value(tmp_path, cache_env, double):
    r = cli("sweep", "cwmb", "--envs", "CartPole-v1", "--methods", "gif-mcts,zero-shot-cot", "--budgets", 1,
            "--set", "C=0.1,5", "--plan-preset", "none", "--models", "vllm:house-model", "--base-url",
            double.base_url, "--out", tmp_path, "--no-progress", env=cache_env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "C is not an option of zero-shot-cot: ignored there" in r.stderr
    df = pd.read_parquet(tmp_path/"index.parquet")
    got = sorted(zip(df["method"], df["method.C"].fillna(-1), df["status"]))
    assert got == [("gif-mcts", 0.1, "complete"), ("gif-mcts", 5.0, "complete"), ("zero-shot-cot", -1, "complete")]
    # each run's fingerprint covers its own method's module (an edit to GIF-MCTS leaves zero-shot CoT's runs current)
    assert list(df["code"]) == [code_fingerprint("cwmb", m)["fingerprint"] for m in df["method"]]
    assert df.groupby("method")["code"].nunique().max() == 1 and df["code"].nunique() == 2
    # an option no method of the sweep has is refused before any job, naming the options
    bad = cli("sweep", "cwmb", "--envs", "CartPole-v1", "--methods", "zero-shot-cot", "--set", "C=1", "--out",
              tmp_path/"x", env=cache_env)
    assert bad.returncode == 2 and "unknown option 'C'" in bad.stderr and not (tmp_path/"x").exists()


def test_methods_lists_each_methods_options_and_says_which_names_differ():
    r = cli("methods")
    assert r.returncode == 0, r.stderr
    assert "gif-mcts (GIFMCTSConfig" in r.stdout and "worldcoder (RExConfig" in r.stdout
    assert "UCT exploration constant" in r.stdout and "planner.c_uct" in r.stdout
    assert "C: gif-mcts: UCT exploration constant; worldcoder: prior strength" in r.stdout
    assert "gamma (method.gamma or planner.gamma)" in r.stdout


def test_a_folder_written_before_definitions_still_resumes(tmp_path):
    "settings.json of the release before (no options, code, suite): its run resumes, its complete run is skipped."
    d = define_run("cwmb", dict(out=str(tmp_path), budget=3))
    record = {**d.record(), "holdout": 0.2}
    old = {k: v for k, v in record.items() if k not in ("options", "code", "method_config", "planner", "suite",
                                                         "definition")}
    atomic_write_json(tmp_path/"settings.json", old)
    atomic_write_json(tmp_path/"checkpoint.json", {})
    assert check_run_settings(tmp_path, record) == "resume"
    atomic_write_json(tmp_path/"metrics.json", {"status": "complete", "budget": 3})
    assert check_run_settings(tmp_path, record) == "skip"


def test_a_dry_run_lists_the_grid_and_estimates_it_without_running(tmp_path):
    r = cli("sweep", "cwmb", "--envs", "CartPole-v1", "--methods", "gif-mcts,worldcoder", "--models", "gpt-4o",
            "--budgets", 20, "--set", "C=0.1,5", "--dry-run", "--out", tmp_path/"grid")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "gif-mcts on CartPole-v1 with gpt-4o, budget 20, seed 0, C=5" in r.stdout
    assert "4 runs: 4 new, 0 to resume, 0 complete; ~80 calls" in r.stdout and "$" in r.stdout
    assert not (tmp_path/"grid").exists()   # nothing ran, no folder was made


def test_a_grid_parses_its_values_once_and_refuses_what_would_share_a_folder(tmp_path):
    "`C=1,1.0` is one value; several values of a run setting would put two runs in one folder; both said before any job."
    one = cli("sweep", "cwmb", "--envs", "CartPole-v1", "--methods", "gif-mcts", "--models", "gpt-4o", "--budgets", 5,
              "--set", "C=1,1.0", "--set", "C=2", "--dry-run", "--out", tmp_path/"a")
    assert one.returncode == 0 and "2 runs: 2 new" in one.stdout, one.stdout + one.stderr
    two = cli("sweep", "cwmb", "--envs", "CartPole-v1", "--set", "holdout=0.1,0.3", "--out", tmp_path/"b")
    assert two.returncode == 2 and "would share a run folder" in two.stderr and not (tmp_path/"b").exists()
    for bad, said in (("C=nan", "not a finite number"), ("C=-1", "outside [0, inf]"), ("method.top_p=5", "outside [0, 1]")):
        r = cli("run", "cwmb", "--set", bad, "--out", tmp_path/"c")
        assert r.returncode == 2 and said in r.stderr and not (tmp_path/"c").exists(), (bad, r.stderr[-800:])
