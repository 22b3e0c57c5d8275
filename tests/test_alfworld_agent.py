"""The WorldCoder agent on AlfWorld (cwm_nb.agent.alfworld_agent) and `cwm-nb agent alfworld`'s baselines.

Without the optional household extra only the first test runs; the others are skipped, saying how to install it."""
import json
import pytest
from cwm_nb.core import CwmNbError
from cwm_nb.agent import alfworld as aw
from cwm_nb.agent.alfworld_agent import ALFWORLD_ENVS, household_planner_actions
from cwm_nb.experiments import agent as xa

needs_household = pytest.mark.skipif(bool(aw.household_missing()), reason="the household extra is not installed: "
                                     f"{aw.HOUSEHOLD_INSTALL}")


def test_alfworld_without_the_extra_says_what_is_missing(monkeypatch, tmp_path):
    monkeypatch.setattr(aw, "_HOUSEHOLD_MODULES", aw._HOUSEHOLD_MODULES + (("no_such_module_xyz", "xyzpkg"),))
    with pytest.raises(CwmNbError, match="missing: .*xyzpkg") as e:
        xa.define_agent_run(dict(domain="alfworld", method="expert", out=str(tmp_path)))
    assert "pip install -e '.[household]'" in str(e.value)
    # the other domains are untouched, and the baselines are AlfWorld's only
    assert xa.define_agent_run(dict(domain="sokoban", out=str(tmp_path))).envs == ["Sokoban-v0"]
    with pytest.raises(CwmNbError, match="AlfWorld's games only"):
        xa.define_agent_run(dict(domain="minigrid", method="random", out=str(tmp_path)))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CWM_NB_CACHE", str(tmp_path/"cache"))
    return tmp_path


@needs_household
@pytest.mark.parametrize("method", ["expert", "random"])
def test_cli_baseline_on_one_game_writes_success_and_steps(cache, method, capsys):
    from cwm_nb.experiments.cli import main
    main(["agent", "alfworld", "--method", method, "--curriculum", ALFWORLD_ENVS[0], "--out", str(cache/"res")])
    m = json.loads(next((cache/"res").rglob("metrics.json")).read_text())
    (ep,) = m["baseline"]["episodes"]
    assert m["method"] == method and m["status"] == "complete" and m["envs"] == [ALFWORLD_ENVS[0]]
    if method == "expert": assert (ep["success"], ep["steps"], m["success_rate"]) == (True, 4, 1.0)
    else: assert ep["success"] in (True, False) and 1 <= ep["steps"] <= 50
    assert f"{method}: success rate" in capsys.readouterr().out


@needs_household
def test_scripted_agent_solves_the_first_game(cache):
    from cwm_nb.llm.demo import ScriptedLLM
    from cwm_nb.agent.prompts import TASKS
    from cwm_nb.agent.scripted import ScriptedWorldCoderModel
    from cwm_nb.agent.worldcoder import AgentConfig, WorldCoderAgent, make_env, play_episode, get_domain
    dom = get_domain("alfworld")
    env = make_env(dom, ALFWORLD_ENVS[0])
    agent = WorldCoderAgent(ScriptedLLM(ScriptedWorldCoderModel(tasks=TASKS)), dom,
                            AgentConfig(epsilon=0.0, episode_steps=50), seed=0, sandbox="in-process")
    agent.new_env(ALFWORLD_ENVS[0], household_planner_actions(env))
    ok, steps = play_episode(agent, env, 0, 50)
    assert ok and steps < 50
    assert agent.syntheses and agent.syntheses[-1]["satisfied"]
    # φ2 made the goal reachable before any reward was logged
    assert not any(x["r"] > 0 for x in agent.data.steps[:-1])


@needs_household
def test_agent_run_records_the_planner_the_domain_plans_with(tmp_path):
    d = xa.define_agent_run(dict(domain="alfworld", curriculum="test", out=str(tmp_path)))
    rec = d.record()
    planner = rec["method_config"]["planner"]
    assert (rec["planner"], planner["planner"]) == ("mcts", "mcts")
    assert (planner["max_depth"], planner["rank_outcomes"]) == (10, True)
    assert d.options == {}   # the domain's search, not options: the run's folder is unchanged
    for given in (dict(planner="bfs"), dict(options=["planner.max_depth=5"])):
        opts = given.pop("options", None)
        with pytest.raises(CwmNbError, match="alfworld plans with .* would not be used"):
            xa.define_agent_run(dict(domain="alfworld", curriculum="test", out=str(tmp_path),
                                     **given), opts)
    # the same values given are accepted, and a record read back (--from) is the same run
    same = xa.define_agent_run(dict(domain="alfworld", curriculum="test", planner="mcts",
                                    out=str(tmp_path)), ["planner.max_depth=10"])
    assert same.record() == rec
    # the experiment notebook's parameters (planner at its default) make the same run
    assert xa.notebook_agent_run(dict(domain="alfworld", curriculum="test", planner="bfs",
                                      out=str(tmp_path))).record() == rec
