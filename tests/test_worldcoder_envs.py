"""WorldCoder's environments: object-oriented states (cwm_nb.agent.oo_state), MiniGrid (cwm_nb.agent.minigrid) and
Sokoban with teleporters (cwm_nb.agent.sokoban): determinism, round trips, rewards, level generation, rendering."""
import json, pickle
import gymnasium as gym
import numpy as np
import pytest
from cwm_nb.core import CwmNbError
from cwm_nb.agent.oo_state import (Entity, State, entity_api_source, render_diff, render_state, state_from_plain,
                             state_to_plain)
from cwm_nb.agent.minigrid import (MINIGRID_ACTIONS, MINIGRID_CURRICULUM, MINIGRID_ENTITY_NAMES, MiniGridObjectEnv,
                                 minigrid_gym_id)
from cwm_nb.agent.sokoban import (SOKOBAN_ACTIONS, SOKOBAN_ENTITY_NAMES, SOKOBAN_GYM_ID, SOKOBAN_TELEPORTER_GYM_ID,
                            SokobanEnv, generate_level, level_text, parse_level, solve_sokoban, sokoban_reward,
                            sokoban_transition)

def _rollout(env, seed: int, actions) -> list:
    "States, rewards and flags of a fixed action sequence after reset(seed)."
    out = [env.reset(seed=seed)]
    for a in actions:
        step = env.step(a)
        out.append(step[:4])
        if step[2] or step[3]: break
    return out

# ---------------------------------------------------------------- object-oriented states

def test_state_is_canonical_hashable_and_round_trips():
    door = Entity("Door", 2, 3, color="yellow", is_open=False, is_locked=True)
    agent = Entity("Agent", 1, 1, direction=(1, 0), carrying=Entity("Key", None, None, color="red"))
    s = State([door, agent, Entity("Wall", 0, 0)])
    assert s == State([Entity("Wall", 0, 0), agent, door]) and hash(s) == hash(State(reversed(s)))
    plain = json.loads(json.dumps(state_to_plain(s)))
    assert state_from_plain(plain) == s and pickle.loads(pickle.dumps(s)) == s
    assert plain[0]["carrying"] == {"name": "Key", "x": None, "y": None, "color": "red"}
    assert {s: 1}[state_from_plain(plain)] == 1                    # usable as a dict key after the trip
    assert State([door, door]) != State([door])                    # a multiset

@pytest.mark.parametrize("bad, msg", [
    ({"name": "Wall", "x": 0, "y": 0}, "list of entity dicts"),
    ([{"name": "Wall", "x": 0}], "'name', 'x' and 'y'"),
    ([{"name": "Wall", "x": 0.5, "y": 0}], "x must be an int"),
    ([{"name": "Wall", "x": None, "y": None}], "has no position"),
    ([{"name": "import os", "x": 0, "y": 0}], "identifier"),
    ([{"name": "Key", "x": 0, "y": 0}], "unknown entity types"),
    ([{"name": "Wall", "x": 0, "y": 0, "f": {"a": 1}}], "'name', 'x' and 'y'"),
    ([{"name": "Wall", "x": 0, "y": 0, "f": object()}], "not plain data"),
])
def test_state_from_plain_refuses_malformed_program_output(bad, msg):
    with pytest.raises(CwmNbError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        state_from_plain(bad, names=SOKOBAN_ENTITY_NAMES)

def test_entities_are_immutable():
    e = Entity("Box", 1, 2)
    with pytest.raises(AttributeError, match="immutable"): e.x = 3
    assert e.replace(x=3) == Entity("Box", 3, 2) and e == Entity("Box", 1, 2)

def test_render_state_and_diff():
    a = Entity("Agent", 1, 1, direction=(1, 0), carrying=None)
    key = Entity("Key", 2, 1, color="yellow")
    s0, s1 = State([key, a]), State([a.replace(carrying=key.replace(x=None, y=None))])
    assert render_state(s0) == "Agent(1, 1, carrying=None, direction=(1, 0))\nKey(2, 1, color='yellow')"
    assert render_diff(s0, s1) == ("Agent at (1, 1) carrying changed from None to Key(None, None, color='yellow').\n"
                                   "Key(2, 1, color='yellow') disappeared.")
    assert render_diff(s1, s0).endswith("Key(2, 1, color='yellow') appeared.")
    assert render_diff(s0, State(list(s0))) == "Nothing changed."

def test_entity_api_program_runs_in_the_real_sandbox():
    "A program written against the entity API takes and returns plain states across the sandbox boundary."
    from cwm_nb.sandbox.jobs import Sandbox
    src = entity_api_source(SOKOBAN_ENTITY_NAMES) + '''
def transition(state, action):
    player = get_entities_by_name(state, "Player")[0]
    dx = {"move right": 1, "move left": -1}.get(action, 0)
    if not [e for e in get_entities_by_position(state, player.x + dx, player.y) if e.name in ("Wall", "Box")]:
        player.x += dx
    return set(state)

def run(plain, action):
    return state_to_plain(transition(state_from_plain(plain), action))
'''
    level = parse_level("######\n#@ $.#\n######")
    with Sandbox() as sb:
        for action in ("move right", "move left"):
            r = sb.run(src, driver="cwm_nb.sandbox.programs:call_function",
                       args={"name": "run", "args": [state_to_plain(level), action]})
            assert r.ok, r.error
            assert state_from_plain(r.value, names=SOKOBAN_ENTITY_NAMES) == sokoban_transition(level, action)

# ---------------------------------------------------------------- MiniGrid

@pytest.mark.parametrize("env_id", MINIGRID_CURRICULUM)
def test_curriculum_env_makes_resets_steps_and_is_deterministic(env_id):
    env = gym.make(minigrid_gym_id(env_id))
    actions = list(MINIGRID_ACTIONS[:6]) * 3
    first, again = _rollout(env, 5, actions), _rollout(env, 5, actions)
    assert first == again
    s0, info = first[0]
    assert isinstance(s0, State) and s0.names() <= set(MINIGRID_ENTITY_NAMES) and info["mission"] == env.unwrapped.mission
    assert len(s0.by_name("Agent")) == 1 and all(type(e.x) is int and type(e.y) is int for e in s0)
    assert all(r in (0.0, 1.0) for _, r, _, _ in first[1:])
    assert state_from_plain(json.loads(json.dumps(state_to_plain(s0))), names=MINIGRID_ENTITY_NAMES) == s0

def test_minigrid_seeds_give_different_layouts():
    env = MiniGridObjectEnv("MiniGrid-DoorKey-5x5-v0")
    assert len({env.reset(seed=k)[0] for k in range(6)}) > 1

def test_minigrid_reward_is_binarised():
    path = ["move forward", "move forward", "turn right", "move forward", "move forward"]   # Empty-5x5 is fixed
    for binarize, expected in ((True, 1.0), (False, 1 - 0.9 * 5 / 100)):
        env = MiniGridObjectEnv("MiniGrid-Empty-5x5-v0", binarize_reward=binarize)
        out = _rollout(env, 0, path)
        assert [r for _, r, _, _ in out[1:]] == [0.0] * 4 + [pytest.approx(expected)]
        assert out[-1][2] is True

def test_minigrid_door_key_semantics_and_diffs():
    env = MiniGridObjectEnv("MiniGrid-DoorKey-5x5-v0")
    s, _ = env.reset(seed=1)
    diffs = []
    for a in ["pick up", "turn left", "toggle", "move forward"]:
        nxt = env.step(a)[0]
        diffs.append(render_diff(s, nxt)); s = nxt
    assert diffs[0].endswith("Key(1, 3, color='yellow') disappeared.")
    assert diffs[2] == "Door at (2, 2) is_locked changed from True to False; is_open changed from False to True."
    assert s.one("Agent").pos == s.one("Door").pos == (2, 2)      # the agent stands in the open door

def test_minigrid_snapshot_restores_the_real_env():
    env = MiniGridObjectEnv("MiniGrid-UnlockPickup-v0")
    env.reset(seed=2)
    snap = env.get_state()
    seq = ["turn left", "move forward", "pick up", "turn right", "move forward", "toggle"]
    first = [env.step(a) for a in seq]
    env.set_state(snap)
    assert [env.step(a) for a in seq] == first

def test_minigrid_bad_input():
    env = MiniGridObjectEnv("MiniGrid-Empty-5x5-v0")
    with pytest.raises(CwmNbError, match="never started"): env.step("turn left")
    env.reset(seed=0)
    with pytest.raises(CwmNbError, match="unknown MiniGrid action"): env.step(0)
    with pytest.raises(CwmNbError, match="not a MiniGrid"): MiniGridObjectEnv("CartPole-v1")

def test_minigrid_rgb_frame():
    env = MiniGridObjectEnv("MiniGrid-DoorKey-5x5-v0", render_mode="rgb_array")
    env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (5 * 32, 5 * 32, 3) and frame.dtype == np.uint8 and frame.std() > 0

# ---------------------------------------------------------------- Sokoban

LEVEL = "#######\n#     #\n# @$. #\n#  $  #\n#  .  #\n#     #\n#######"

def test_sokoban_reward_scheme_on_a_scripted_sequence():
    env = SokobanEnv()
    env.reset(options={"level": LEVEL})
    script = ["no operation", "push right", "move up", "move right", "push down", "move right", "move down",
              "move down", "move left", "push up", "move down", "move left", "move left", "move up", "move up",
              "move right", "push down"]
    out = [env.step(a)[1:4] for a in script]
    assert [r for r, _, _ in out] == [-0.1, 0.9, -0.1, -0.1, -1.1, -0.1, -0.1, -0.1, -0.1, 0.9] + [-0.1] * 6 + [10.9]
    assert [t for _, t, _ in out] == [False] * 16 + [True] and not any(tr for _, _, tr in out)

def test_sokoban_truncates_at_max_steps_and_moves_never_push():
    env = SokobanEnv(max_steps=2)
    s, _ = env.reset(options={"level": LEVEL})
    assert env.step("move right")[0] == s                          # a box in the way: a move does not push
    assert env.step("no operation")[1:4] == (-0.1, False, True)

@pytest.mark.parametrize("gym_id", [SOKOBAN_GYM_ID, SOKOBAN_TELEPORTER_GYM_ID])
def test_sokoban_levels_are_seeded_and_solvable_by_construction(gym_id):
    env = gym.make(gym_id)
    lengths = []
    for seed in range(15):
        s0, info = env.reset(seed=seed)
        assert env.reset(seed=seed) == (s0, info)
        assert len(s0.by_name("Box")) == len(s0.by_name("Target")) == 2
        assert len(s0.by_name("Teleporter")) == (2 if gym_id == SOKOBAN_TELEPORTER_GYM_ID else 0)
        assert not {b.pos for b in s0.by_name("Box")} & {t.pos for t in s0.by_name("Target")}
        plan = solve_sokoban(s0)
        assert len(plan) == info["solution_length"]
        rewards = [env.step(a)[1] for a in plan]
        assert rewards[-1] == pytest.approx(10.9) and sum(r > 5 for r in rewards) == 1
        lengths.append(len(plan))
    assert len(set(lengths)) > 1

def test_reverse_play_depth_is_the_shortest_solution():
    for seed in range(10):
        for boxes in (1, 3):
            level, n = generate_level(np.random.default_rng(seed), num_boxes=boxes)
            assert len(solve_sokoban(level)) == n

def test_teleporter_semantics_and_blocked_gate():
    row = lambda s: level_text(s).split("\n")[1]
    tp = parse_level("#######\n#@T  T#\n#######")
    s1 = sokoban_transition(tp, "move right")
    assert row(s1) == "# T  P#"                                           # through the pair
    assert sokoban_transition(s1, "no operation") is s1                     # standing on a gate does nothing
    assert row(sokoban_transition(sokoban_transition(s1, "move left"), "move right")) == "# P  T#"
    assert level_text(sokoban_transition(parse_level("#@T  B#"), "move right")) == "# P  B#"   # partner blocked
    s = parse_level("#T@$T #")
    for a in ["push right", "move left", "move left"]: s = sokoban_transition(s, a)   # box onto a gate, then enter the other
    assert level_text(s) == "#P  B #"
    assert level_text(sokoban_transition(parse_level("#@B  T#"), "push right")) == "# T$ P#"   # a push can teleport
    assert sokoban_transition(parse_level("#@T$.#"), "move right").one("Player").pos == (2, 0)   # one gate: no pair
    assert render_diff(tp, s1) == "Player at (1, 1) moved to (5, 1)."

def test_sokoban_reward_is_a_function_of_the_two_states():
    s = parse_level("#@$.#")
    nxt = sokoban_transition(s, "push right")
    assert sokoban_reward(s, "push right", nxt) == (pytest.approx(10.9), True)
    s = parse_level("#@*. #")                                  # a box from one target onto the other: count unchanged
    assert sokoban_reward(s, "push right", sokoban_transition(s, "push right")) == (pytest.approx(-0.1), False)
    # as in gym-sokoban, +10 is paid whenever every target is covered after the step (the env never steps again)
    assert sokoban_reward(nxt, "move left", sokoban_transition(nxt, "move left")) == (pytest.approx(9.9), True)

def test_sokoban_snapshot_is_json_and_restores():
    env = SokobanEnv()
    env.reset(seed=4)
    snap = json.loads(json.dumps(env.get_state()))
    first = [env.step(a)[:4] for a in SOKOBAN_ACTIONS]
    env.set_state(snap)
    assert [env.step(a)[:4] for a in SOKOBAN_ACTIONS] == first

def test_sokoban_rendering():
    env = SokobanEnv(render_mode="rgb_array", teleporters=True)
    s, _ = env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (7 * 16, 7 * 16, 3) and frame.dtype == np.uint8
    assert len(np.unique(frame.reshape(-1, 3), axis=0)) >= 6                # wall, floor, target, box, player, gate
    text = render_state(s)
    assert text.count("\n") + 1 == len(s) and "Teleporter(" in text and "Player(" in text
    env = SokobanEnv(render_mode="ansi")
    s, _ = env.reset(seed=0)
    assert parse_level(env.render()) == s

def test_sokoban_bad_input():
    env = SokobanEnv()
    env.reset(seed=0)
    with pytest.raises(CwmNbError, match="unknown Sokoban action"): env.step("push north")
    with pytest.raises(CwmNbError, match="exactly one Player"): env.reset(options={"level": "#$.#"})
    with pytest.raises(CwmNbError, match="bad Sokoban size"): SokobanEnv(num_boxes=0)
