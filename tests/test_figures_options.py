"""`cwm-nb figures` on a sweep over an option: the ablation table and plot grouped by the varied
option, the warning when the runs mix code versions, the note when no option varies. The results
index is typed in here (made-up numbers, the columns `index.build_index` gives: `options`, `code`,
one column per varied option)."""
import json
from argparse import Namespace
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
import pytest
from cwm_nb.experiments import figures
from cwm_nb.experiments.index import INDEX_COLUMNS

ENVS = (("CartPole-v1", "discrete", 0.6), ("Pendulum-v1", "continuous", 0.2))

def sweep_index(values=(0.5, 2.0, 8.0), codes=("c0ffee000001",)) -> pd.DataFrame:
    """A made-up index of a sweep over GIF-MCTS's C: 3 values x 2 environments x 2 seeds, accuracy
    0.1 higher per value and 0.02 higher on seed 1; seed k's runs by `codes[k % len(codes)]`."""
    rows = []
    for i, c in enumerate(values):
        for env, kind, base in ENVS:
            for seed in (0, 1):
                row = dict.fromkeys(INDEX_COLUMNS)
                row.update(run_dir=f"budget3/cwmb/{env}/gif-mcts+C={c:g}/m/seed{seed}",
                           suite="cwmb", env=env, action_kind=kind, method="gif-mcts", model="m",
                           budget=3, seed=seed, paper_compat=False, status="complete", holdout=0.2,
                           best_is_bug=False,
                           accuracy=base + 0.1 * i + 0.02 * seed, plan_preset="quick",
                           normalized_return=0.5, return_oracle=10.0, return_random=0.0,
                           options=json.dumps({"method.C": c}), code=codes[seed % len(codes)])
                row["method.C"] = c
                row["best_value_per_call"] = [row["accuracy"] / 2, row["accuracy"]]
                rows.append(row)
    return pd.DataFrame(rows)

def test_varied_options_are_the_option_columns_with_two_values():
    df = sweep_index().assign(**{"planner.gamma": 0.99})
    assert figures.varied_options(df) == ["method.C"]
    assert figures.varied_options(sweep_index(values=(2.0,))) == []

def test_the_options_table_groups_runs_by_the_varied_option():
    t = figures.table_options(sweep_index(), published=False)
    levels = ["action_kind", "method", "model", "budget", "method.C", "source"]
    assert list(t.df.index.names) == levels
    assert len(t.df) == 6                                             # 3 values x 2 action spaces
    row = t.df.loc[("discrete", "gif-mcts", "m", 3, 2.0, "ours")]   # C in its column, not the name
    assert row["accuracy"] == pytest.approx(0.6 + 0.1 + 0.01)         # CartPole, mean of the seeds
    assert row["accuracy ±"] == pytest.approx(0.01)                   # standard error over seeds
    assert (row["runs"], row["seeds"], row["envs"]) == (2, 2, 1)
    assert "method.C" in t.caption

def test_the_paper_rows_stand_at_the_papers_option_values():
    t = figures.table_options(sweep_index()).df
    paper = t.xs("paper (published)", level="source")
    assert set(paper.index.get_level_values("method.C")) == {0.1}      # GIF-MCTS's C in the paper
    assert paper.loc[("discrete", "gif-mcts", "llama-3-70b", 50, 0.1), "accuracy"] == 0.84   # T2
    assert set(paper.index.get_level_values("method")) == {"gif-mcts"}   # our runs' methods only

def test_the_other_tables_keep_each_configuration_apart():
    main = figures.table_main(sweep_index(), published=False).df.loc["ours"]
    names = {"gif-mcts+C=0.5", "gif-mcts+C=2", "gif-mcts+C=8"}
    assert set(main.index.get_level_values("method")) == names
    assert len(figures.dedupe_runs(sweep_index())) == 12   # no option value counted as a copy

def test_the_options_plot_has_a_line_per_environment_and_error_bars():
    fig = figures.plot_options(sweep_index())
    acc = fig.axes[0]
    assert [ax.get_xlabel() for ax in fig.axes] == ["method.C", "method.C"]   # accuracy and R
    assert len(acc.containers) == 2                                           # CartPole, Pendulum
    line, caps, (bars,) = acc.containers[0].lines
    assert list(line.get_xdata()) == [0.5, 2.0, 8.0] and len(bars.get_segments()) == 3
    assert fig.get_suptitle() == ""
    plt.close("all")

def test_mixed_code_versions_are_said_in_captions_titles_and_the_manifest(tmp_path):
    mixed = sweep_index(codes=("c0ffee000001", "beef00000002"))
    for fn in (figures.table_options, figures.table_main, figures.table_per_env):
        t = fn(mixed)
        assert "Mixes 2 code versions: beef00000002 (6 runs), c0ffee000001 (6 runs)" in t.caption
    assert "Mixes 2 code versions" in figures.plot_options(mixed).get_suptitle()
    assert "Mixes 2 code versions" in figures.plot_best_value_vs_calls(mixed).get_suptitle()
    plt.close("all")
    figures.make_all(tmp_path, tmp_path/"fig", index=mixed)
    man = json.loads((tmp_path/"fig"/"manifest.json").read_text())
    assert man["warnings"] == [
        "the runs mix 2 code versions: beef00000002 (6 runs), c0ffee000001 (6 runs); runs of "
        "different code may not compare (the index's `code` column; unrecorded: made before "
        "fingerprints)."]
    assert "Mixes 2 code versions" in (tmp_path/"fig"/"t_options.md").read_text()

def test_no_varied_option_gives_a_note_not_an_empty_table(tmp_path):
    one = sweep_index(values=(2.0,))
    t = figures.table_options(one)
    assert t.df.columns.tolist() == ["note"] and t.df["note"].item().startswith("no option varies")
    assert "--set C=0.1,1,5" in t.df["note"].item()
    assert "no option varies" in figures.plot_options(one).axes[0].texts[0].get_text()
    plt.close("all")
    w = figures.make_all(tmp_path, tmp_path/"fig", index=one)
    man = json.loads((tmp_path/"fig"/"manifest.json").read_text())
    assert "t_options" not in w and "options" not in w and man["notes"] == [figures.NO_OPTIONS]
    assert man["warnings"] == []

@pytest.mark.parametrize("codes,varied", [(("c0ffee000001", "beef00000002"), True),
                                          (("c0ffee000001",), False)])
def test_the_figures_command_prints_the_warning_and_the_note(tmp_path, monkeypatch, capsys, codes,
                                                             varied):
    "`cwm-nb figures` reports what make_all wrote; a direct make_all call stands in for papermill."
    index = sweep_index(values=(0.5, 2.0) if varied else (2.0,), codes=codes)
    results = tmp_path/"results"
    (results/index.run_dir[0]).mkdir(parents=True)
    (results/index.run_dir[0]/"settings.json").write_text("{}")
    def papermill_stand_in(name, params, dest):
        figures.make_all(params["results"], params["out"], published=params["published"],
                         index=index)
        return dest
    monkeypatch.setattr(figures, "run_notebook", papermill_stand_in)
    a = Namespace(results=str(results), out=str(tmp_path/"fig"), no_published=False)
    assert figures._cmd_figures(a) == 0
    plt.close("all")
    out, err = capsys.readouterr()
    assert ("t_options: " in out) == varied and ("note: no option varies" in out) == (not varied)
    assert ("warning: the runs mix 2 code versions" in err) == (len(codes) == 2)
