"""AlfWorld's household tasks (cwm_nb.agent.alfworld): game writer, environment, baselines.

Everything but the first test needs the optional household extra (textworld[pddl], alfworld);
without it they are skipped, saying how to install it. A game loads in about a second and steps at
10-40 commands per second on 2 cores, so each test plays a handful of short episodes."""
import json
import numpy as np
import pytest
import gymnasium as gym
from gymnasium.utils.env_checker import check_env
from cwm_nb.core import CwmNbError
from cwm_nb.agent import alfworld as aw

needs_household = pytest.mark.skipif(
    bool(aw.household_missing()),
    reason=f"the household extra is not installed: {aw.HOUSEHOLD_INSTALL}")


def test_missing_extra_is_said_with_the_install_command(monkeypatch):
    extra = (("no_such_module_xyz", "xyzpkg"),)
    monkeypatch.setattr(aw, "_HOUSEHOLD_MODULES", aw._HOUSEHOLD_MODULES + extra)
    with pytest.raises(CwmNbError, match="missing: .*xyzpkg") as e:
        aw.AlfWorldEnv()
    assert "pip install -e '.[household]'" in str(e.value)
    # registering the ids needs nothing: only making an environment does
    assert aw.ALFWORLD_GYM_IDS["pick_and_place_simple"] in gym.registry


@pytest.fixture
def games(tmp_path, monkeypatch):
    "Games go to a fresh cache."
    monkeypatch.setenv("CWM_NB_CACHE", str(tmp_path))
    return tmp_path


@needs_household
def test_writer_is_seeded_covers_six_task_types_and_writes_to_the_cache(games):
    firsts = {t: next(g for g in aw.ALFWORLD_EVAL_SET if g[0] == t) for t in aw.ALFWORLD_TASK_TYPES}
    assert len(firsts) == 6
    for t, (_, fp, seed) in firsts.items():
        text, traj = aw.household_problem(t, fp, seed)
        assert aw.household_problem(t, fp, seed)[0] == text
        assert traj["task_type"] == t and "(:goal" in text
    simple = "pick_and_place_simple"
    assert aw.household_problem(simple, 1, 0)[0] != aw.household_problem(simple, 1, 1)[0]
    two = "pick_two_obj_and_place"
    path = aw.write_game(two, 10, 0)
    assert path.parent == games/"alfworld"/f"games-v{aw.GAME_VERSION}"/two/"FloorPlan10-0"
    assert json.loads((path.parent/"traj_data.json").read_text())["task_type"] == two
    with pytest.raises(CwmNbError, match="cannot host"):
        aw.sample_task("pick_cool_then_place_in_recep", 301, 0)


@needs_household
def test_env_passes_gymnasium_check_env(games):
    check_env(aw.AlfWorldEnv("pick_and_place_simple", 1, 0), skip_render_check=True)


@needs_household
def test_mask_marks_exactly_the_admissible_commands_and_others_do_nothing(games):
    env = aw.AlfWorldEnv("pick_clean_then_place_in_recep", 2, 0, max_steps=12)
    s, info = env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(8):
        mask, vocab = info["action_mask"], env.action_space.vocabulary
        assert sorted(vocab[i] for i in np.flatnonzero(mask)) == sorted(info["admissible_commands"])
        off = vocab[int(np.flatnonzero(mask == 0)[0])]
        s_off, r, term, trunc, info_off = env.step(off)
        assert (s_off, r, info_off["text"]) == (s, 0.0, "Nothing happens.")
        adm = info_off["admissible_commands"]
        s, r, term, trunc, info = env.step(adm[int(rng.integers(len(adm)))])
        if term or trunc: break
    assert trunc or term or len(env.get_state()["commands"]) == 16


@needs_household
def test_state_follows_a_take_and_a_heat(games):
    env = aw.AlfWorldEnv("pick_heat_then_place_in_recep", 1, 0)
    env.reset()
    plan = aw.planner_commands(env)
    take = next(i for i, c in enumerate(plan) if c.startswith("take "))
    for c in plan[:take + 1]: s, *_ = env.step(c)
    obj = plan[take].split(" from ")[0][len("take "):]          # e.g. "mug 1"
    kind, num = obj.split()
    agent = s.one("Agent")
    assert agent.holding == obj and agent.location == plan[take].split(" from ")[1]
    held = next(e for e in s if e.name.lower() == kind and e.x == int(num))
    assert held.receptacle is None and held.is_hot is False
    for c in plan[take + 1:]:
        s, r, term, trunc, _ = env.step(c)
    held = next(e for e in s if e.name.lower() == kind and e.x == int(num))
    assert (r, term, held.is_hot, s.one("Agent").holding) == (1.0, True, True, None)


@needs_household
def test_snapshot_replays_and_bad_input_is_refused(games):
    env = aw.AlfWorldEnv("pick_and_place_simple", 401, 0, max_steps=3)
    with pytest.raises(CwmNbError, match="call reset"):
        env.get_state()
    env.reset()
    s1, *_ = env.step(env.reset()[1]["admissible_commands"][0])
    snap = env.get_state()
    env.step("look")
    env.set_state(snap)
    assert env.current_state() == s1
    with pytest.raises(CwmNbError, match="not a command of this game"):
        env.step("dance")
    env.step("look"); _, _, _, trunc, _ = env.step("look")
    assert trunc
    with pytest.raises(CwmNbError, match="over"):
        env.step("look")
    with pytest.raises(CwmNbError, match="get_state"):
        env.set_state({"nope": 1})


@needs_household
@pytest.mark.parametrize("task_type", aw.ALFWORLD_TASK_TYPES)
def test_planner_expert_solves_the_first_game_of_each_task_type(games, task_type):
    _, fp, seed = next(g for g in aw.ALFWORLD_EVAL_SET if g[0] == task_type)
    ep = aw.play_baseline(aw.AlfWorldEnv(task_type, fp, seed), "expert")
    assert ep["success"] and 2 <= ep["steps"] <= 12


@needs_household
def test_baseline_runner_reports_success_and_steps(games):
    game = (("pick_and_place_simple", 1, 0),)
    rand = aw.run_alfworld_baseline("random", games=game, max_steps=5)
    assert (rand["success_rate"], rand["episodes"][0]["steps"]) == (0.0, 5)
    assert rand["mean_steps_success"] is None
    again = aw.run_alfworld_baseline("random", games=game, max_steps=5)
    assert again["episodes"] == rand["episodes"]
    hand = aw.run_alfworld_baseline("expert", games=game, expert="handcoded")
    assert hand["success_rate"] == 1.0
    assert hand["by_task_type"]["pick_and_place_simple"]["games"] == 1
    json.dumps(hand)
    with pytest.raises(CwmNbError, match="unknown baseline"):
        aw.run_alfworld_baseline("oracle", games=game)
