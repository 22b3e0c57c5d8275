"""`cwm-nb figures`: the paper's tables and figures from a results folder made of real runs (real sandbox, real
gymnasium planning, real papermill), with a scripted LLM standing in for the model."""
import hashlib, json, os, shutil, subprocess, sys
from pathlib import Path
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
CLI = str(Path(sys.executable).parent/"cwm-nb")
CARTPOLE_CWM = Path(__file__).resolve().parents[1]/"data"/"programs"/"CartPole-v1.py"   # the shipped reference CWM

GOOD = "```python\n" + CARTPOLE_CWM.read_text() + "\n```\n"
CRASH = "```python\nclass Environment:\n    def __init__(self):\n        raise RuntimeError('no model here')\n```\n"
# a runnable but poor Blackjack model: the state never changes, every step ends the game with reward 0
STILL = ("```python\nclass Environment:\n    def __init__(self):\n        self.s = (0, 0, 0)\n"
         "    def set_state(self, s):\n        self.s = tuple(s)\n    def step(self, action):\n        return self.s, 0.0, True\n```\n")
RUNS = [("CartPole-v1", "gif-mcts", GOOD), ("CartPole-v1", "gif-mcts-no-fix", CRASH),
        ("Blackjack-v1", "gif-mcts", STILL), ("Blackjack-v1", "gif-mcts-no-fix", STILL)]
TABLES = ("t2_cwmb_main", "t3_rtfm", "t6_ablation", "t7_action_stats", "t10_t11_per_env", "t12_raw_returns",
          "stochastic_scores")
FIGURES = ("best_value_vs_calls", "search_tree", "rollout_state_errors", "rollout_reward_errors")

def cli(*args, timeout=900):
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=ROOT)

@pytest.fixture(scope="module")
def results(tmp_path_factory):
    "8 real runs: 2 environments x (GIF-MCTS, its no-fix ablation) x 2 seeds, budget 2, quick planning (2 episodes),\n    laid out as a sweep lays them out (`<results>/budget2/cwmb/...`)."
    from cwm_nb.experiments import metrics
    from cwm_nb.llm.demo import ScriptedLLM
    out = tmp_path_factory.mktemp("results")
    for env, method, answer in RUNS:
        for seed in (0, 1):
            run = metrics.run_cwmb_search(env=env, method=method, model="scripted", budget=2, seed=seed, out=out/"budget2",
                                              llm=ScriptedLLM(lambda messages, draw, a=answer: a),
                                              plan_preset="quick", plan_episodes=2, progress=False)
            metrics.write_metrics(run, **metrics.plan_run(run, preset="quick", episodes=2, progress=False))
    return out

def metrics(out, env, method, seed):
    from cwm_nb.experiments.runs import run_dir
    return json.loads((run_dir(out/"budget2", "cwmb", env, method, "scripted", seed)/"metrics.json").read_text())

@pytest.fixture(scope="module")
def figures_out(results):
    fig = results/"fig"
    r = cli("figures", results, "--out", fig)
    assert r.returncode == 0, r.stderr[-3000:]
    return fig, r.stdout

def test_index_of_the_runs(results):
    from cwm_nb.experiments.index import build_index
    idx = build_index(results)
    assert len(idx) == 8 and (idx.status == "complete").all()
    assert set(idx.method) == {"gif-mcts", "gif-mcts-no-fix"} and set(idx.seed) == {0, 1}

def test_cli_writes_every_table_and_figure(figures_out):
    fig, stdout = figures_out
    for stem in TABLES:
        for ext in ("csv", "tex", "md"): assert (fig/f"{stem}.{ext}").stat().st_size > 0, (stem, ext)
        assert r"\caption{" in (fig/f"{stem}.tex").read_text(), stem
        assert f"{stem}.csv" in stdout
    for stem in FIGURES:
        for ext in ("png", "pdf"): assert (fig/f"{stem}.{ext}").stat().st_size > 1000, (stem, ext)
    nb = json.loads((fig/"paper_figures.ipynb").read_text())
    assert nb["metadata"]["papermill"]["parameters"]["published"] is True
    assert any("Table 2" in "".join(c["source"]) for c in nb["cells"])
    assert set(json.loads((fig/"manifest.json").read_text())["files"]) == {*TABLES, *FIGURES}

def test_per_env_table_holds_each_runs_own_numbers(results, figures_out):
    fig, _ = figures_out
    t = pd.read_csv(fig/"t10_t11_per_env.csv", header=[0, 1, 2, 3, 4], index_col=0)
    bj = metrics(results, "Blackjack-v1", "gif-mcts", 0)   # the first seed's run
    assert 0 < bj["accuracy"] < 1
    assert t.loc["Blackjack-v1", ("ours", "gif-mcts", "scripted", "2", "accuracy")] == bj["accuracy"]
    assert t.loc["CartPole-v1", ("ours", "gif-mcts", "scripted", "2", "accuracy")] == metrics(results, "CartPole-v1", "gif-mcts", 0)["accuracy"] == 1.0
    assert t.loc["CartPole-v1", ("ours", "gif-mcts", "scripted", "2", "R")] == metrics(results, "CartPole-v1", "gif-mcts", 0)["normalized_return"]
    assert list(t.index[:4]) == ["Blackjack-v1", "CliffWalking-v0", "Taxi-v3", "CartPole-v1"]   # the paper's order
    md = (fig/"t10_t11_per_env.md").read_text().splitlines()   # the Markdown table: same cells, two decimals
    header = [c.strip() for c in md[2].strip("|").split("|")]
    row = next([c.strip() for c in l.strip("|").split("|")] for l in md if l.startswith("| Blackjack-v1"))
    assert row[header.index("ours / gif-mcts / scripted / 2 / accuracy")] == f"{bj['accuracy']:.2f}"

def test_published_numbers_are_labelled(figures_out):
    fig, _ = figures_out
    t2 = pd.read_csv(fig/"t2_cwmb_main.csv", index_col=[0, 1, 2, 3, 4, 5])
    assert t2.loc[("paper (published)", "discrete", "gif-mcts", "llama-3-70b", 50, 0.0), "accuracy"] == 0.84
    assert t2.loc[("paper (published)", "continuous", "worldcoder", "gpt-4-turbo", 10, 0.0), "R"] == 0.20
    assert set(t2.index.get_level_values(0)) == {"ours", "paper (published)"}
    assert "paper (published)" in (fig/"t2_cwmb_main.tex").read_text()
    t6 = pd.read_csv(fig/"t6_ablation.csv", header=[0, 1], index_col=[0, 1, 2, 3])
    assert t6.loc[("paper (published)", "gif-mcts-no-fix", "llama-3-70b", 50), ("discrete", "R")] == 0.55

def test_runs_whose_programs_all_raised_count_as_R_zero(results, figures_out):
    fig, _ = figures_out
    for seed in (0, 1):
        m = metrics(results, "CartPole-v1", "gif-mcts-no-fix", seed)
        assert m["best_is_bug"] and m["normalized_return"] is None and m["accuracy"] == 0.0
        assert m["return_oracle"] != m["return_random"]        # R is defined for CartPole: the rule applies
    t = pd.read_csv(fig/"t10_t11_per_env.csv", header=[0, 1, 2, 3, 4], index_col=0)
    assert t.loc["CartPole-v1", ("ours", "gif-mcts-no-fix", "scripted", "2", "R")] == 0.0
    t2 = pd.read_csv(fig/"t2_cwmb_main.csv", index_col=[0, 1, 2, 3, 4, 5])
    row = t2.loc[("ours", "discrete", "gif-mcts-no-fix", "scripted", 2, 0.2)]
    # per seed: mean over CartPole (R counted as 0) and Blackjack (when R is defined there), then mean over seeds
    per_seed = []
    for seed in (0, 1):
        b = metrics(results, "Blackjack-v1", "gif-mcts-no-fix", seed)
        rs = [0.0] + ([] if b["return_oracle"] == b["return_random"] else [b["normalized_return"]])
        per_seed.append(sum(rs)/len(rs))
    assert row["R"] == pytest.approx(sum(per_seed)/2)
    assert row["accuracy"] == pytest.approx((0.0 + metrics(results, "Blackjack-v1", "gif-mcts-no-fix", 0)["accuracy"])/2)
    assert "R = 0" in (fig/"t2_cwmb_main.tex").read_text()

def test_heldout_accuracy_beside_accuracy(results, figures_out):
    "New runs hold out a fifth of the episodes: Table 2 shows their held-out accuracy beside the training accuracy."
    fig, _ = figures_out
    t2 = pd.read_csv(fig/"t2_cwmb_main.csv", index_col=[0, 1, 2, 3, 4, 5])
    row = t2.loc[("ours", "discrete", "gif-mcts", "scripted", 2, 0.2)]
    per_seed = [(metrics(results, "CartPole-v1", "gif-mcts", s)["heldout_accuracy"]
                 + metrics(results, "Blackjack-v1", "gif-mcts", s)["heldout_accuracy"]) / 2 for s in (0, 1)]
    assert metrics(results, "CartPole-v1", "gif-mcts", 0)["heldout_accuracy"] == 1.0
    assert row["held-out accuracy"] == pytest.approx(sum(per_seed) / 2)   # (the index's last level: holdout 0.2)
    assert pd.isna(t2.loc[("paper (published)", "discrete", "gif-mcts", "llama-3-70b", 50, 0.0), "held-out accuracy"])
    m = metrics(results, "CartPole-v1", "gif-mcts", 0)
    assert m["deterministic"] is True and m["rollouts"]["heldout"]["horizons"]["1"]["state_error"] < 1e-6

def test_make_all_without_published_numbers(results, tmp_path):
    from cwm_nb.experiments import figures
    w = figures.make_all(results, tmp_path/"np", published=False)
    t2 = pd.read_csv(w["t2_cwmb_main"][0], index_col=[0, 1, 2, 3, 4, 5])
    assert set(t2.index.get_level_values(0)) == {"ours"}
    assert pd.read_csv(w["t3_rtfm"][0]).columns.tolist()[-1] == "note"    # no RTFM runs: a note, not a crash

def test_empty_results_folder_is_a_clear_error(tmp_path):
    (tmp_path/"empty").mkdir()
    r = cli("figures", tmp_path/"empty", "--out", tmp_path/"fig")
    assert r.returncode == 2 and "holds no runs" in r.stderr and "cwm-nb run" in r.stderr and "cwm-nb sweep" in r.stderr
    assert not (tmp_path/"fig").exists()
    r = cli("figures", tmp_path/"missing")
    assert r.returncode == 2 and "not found" in r.stderr

def _tree_state(d: Path) -> dict:
    "Every path under `d` (itself included) with its kind, mtime and content hash: what any write there would change."
    return {p.relative_to(d).as_posix(): (p.is_dir(), p.stat().st_mtime_ns,
                                          hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None)
            for p in [d, *d.rglob("*")]}

# As root, permission bits stop nothing: bind-mount the folder read-only on itself in a mount namespace of the command's
# own (unshare -m: private propagation, gone when the command ends), check that a write fails there, then run the command.
RO_MOUNT = ('mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" "$1" || exit 96; '
            'if touch "$1/.probe" 2>/dev/null; then echo "the folder is still writable" >&2; exit 97; fi; shift; exec "$@"')

def test_figures_read_a_read_only_results_folder_and_write_only_to_out(results, tmp_path):
    ro = tmp_path/"results"   # a copy without an index: the case that used to write <results>/index.parquet
    shutil.copytree(results, ro, ignore=shutil.ignore_patterns("fig", "index.parquet"))
    out, before = tmp_path/"figures", _tree_state(ro)
    cmd = [CLI, "figures", str(ro), "--out", str(out)]
    if os.geteuid() == 0:
        if shutil.which("unshare") is None or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode:
            pytest.skip("running as root without mount namespaces: no way here to make a folder root cannot write")
        r = subprocess.run(["unshare", "-m", "sh", "-c", RO_MOUNT, "sh", str(ro), *cmd], capture_output=True, text=True,
                           timeout=900, cwd=ROOT)
    else:
        paths = [ro, *ro.rglob("*")]
        for p in paths: p.chmod(p.stat().st_mode & ~0o222)
        try: r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT)
        finally:
            for p in paths: p.chmod(p.stat().st_mode | 0o200)
    assert r.returncode == 0, r.stderr[-3000:]
    assert _tree_state(ro) == before                                   # not one byte or timestamp changed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["figures", "results"]
    assert set(json.loads((out/"manifest.json").read_text())["files"]) == {*TABLES, *FIGURES}
    t2 = pd.read_csv(out/"t2_cwmb_main.csv", index_col=[0, 1, 2, 3, 4, 5])
    assert len(t2.loc["ours"]) == 2                                    # the runs were read: GIF-MCTS and its ablation

def test_an_out_folder_figures_cannot_write_is_an_error_before_the_kernel_starts(results, tmp_path):
    (tmp_path/"file").touch()
    r = cli("figures", results, "--out", tmp_path/"file"/"figures")
    assert r.returncode == 2 and "cannot create --out" in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]
