"Evaluation of Code World Models: the paper's weighted accuracy, the corrected metrics, crashes, paper_compat."
import json
from pathlib import Path

import numpy as np
import pytest

from cwm_nb.core import CwmNbError, Program
from cwm_nb.bench.cwm import Evaluation, evaluate_program, score_predictions
from cwm_nb.bench.replay import ReplayBuffer, load_buffer

# A CartPole CWM written from the physics (explicit Euler), not from gymnasium's code.
CARTPOLE = (Path(__file__).resolve().parents[1]/'data'/'programs'/'CartPole-v1.py').read_text()


@pytest.fixture(scope="module")
def cartpole():
    return load_buffer("CartPole-v1")


@pytest.fixture(scope="module")
def sandbox():
    from cwm_nb.sandbox.jobs import Sandbox
    with Sandbox() as sb:
        yield sb


def test_correct_cartpole_program_is_perfect(cartpole, sandbox):
    ev = evaluate_program(Program(CARTPOLE), cartpole, sandbox=sandbox)
    assert not ev.bug and ev.error is None
    assert ev.accuracy == 1.0 and ev.exact_replay == 1.0 and ev.mean_accuracy == 1.0
    assert ev.components == {"next_state": 1.0, "reward": 1.0, "done": 1.0}
    assert ev.perfect and ev.failures == [] and ev.n_transitions == len(cartpole)
    assert ev.n_terminal == int(cartpole.terminated.sum()) == 10
    # the paper's rules agree on this buffer (no truncations, reward exactly 1.0)
    pc = evaluate_program(CARTPOLE, cartpole, sandbox=sandbox, paper_compat=True)
    assert pc.accuracy == 1.0 and pc.perfect


def test_wrong_threshold_fails_on_terminal_transitions(cartpole, sandbox):
    ev = evaluate_program(CARTPOLE.replace("12 * 2", "15 * 2"), cartpole, sandbox=sandbox)
    assert not ev.bug and 0.5 < ev.accuracy < 1.0 and ev.exact_replay < 1.0 and not ev.perfect
    first = ev.failures[0]
    assert first["terminal"] and first["wrong"] == ["done"]
    assert first["expected"]["done"] is True and first["predicted"]["done"] is False
    assert first["index"] == int(np.flatnonzero(cartpole.terminated)[0])
    assert len(ev.failures) == 3 and [f["index"] for f in ev.failures] == sorted(f["index"] for f in ev.failures)
    assert isinstance(first["obs"], list) and isinstance(first["obs"][0], float)   # plain lists, not numpy reprs
    # every failure is a missed termination: credit 1/2 on each of them
    assert ev.components["next_state"] == 1.0 and ev.components["reward"] == 1.0
    assert ev.mean_accuracy == pytest.approx(1 - 0.5 * ev.n_failed / len(cartpole))
    json.dumps(ev.to_dict(), allow_nan=False)


def test_crashing_program_is_a_bug_naming_the_line(cartpole, sandbox):
    src = CARTPOLE.replace("        c, s = math.cos(theta), math.sin(theta)\n",
                           "        c, s = math.cos(theta), math.sin(theta)\n        c = c / 0.0 if x > 0 else c / 0\n")
    line = src.splitlines().index("        c = c / 0.0 if x > 0 else c / 0") + 1
    ev = evaluate_program(src, cartpole, sandbox=sandbox)
    assert ev.bug and ev.accuracy == 0.0 and ev.exact_replay == 0.0 and not ev.perfect
    assert f"line {line}" in ev.error and "ZeroDivisionError" in ev.error
    ev = evaluate_program("class Environment:\n    def step(self, action:\n", cartpole, sandbox=sandbox)
    assert ev.bug and "SyntaxError" in ev.error


def test_malformed_output_fails_a_component_not_the_harness(cartpole, sandbox):
    src = CARTPOLE.replace("return self.state.astype(np.float32), 1.0, done",
                           "return np.append(self.state, 0.0).astype(np.float32), 1.0, done")
    ev = evaluate_program(src, cartpole, sandbox=sandbox)
    assert not ev.bug and ev.components["next_state"] == 0.0 and ev.components["done"] == 1.0
    assert "shape (5,)" in ev.failures[0]["problems"][0]
    pc = evaluate_program(src, cartpole, sandbox=sandbox, paper_compat=True)
    assert pc.bug and pc.accuracy == 0.0


# A hand-made buffer: 2-D continuous state, rewards {0, 0, 0, 1}, the last transition terminal.
HAND = ReplayBuffer(obs=[[0., 0.], [1., 1.], [2., 2.], [3., 3.]], actions=[0, 1, 0, 1],
                    next_obs=[[1., 1.], [2., 2.], [3., 3.], [4., 4.]], rewards=[0., 0., 0., 1.],
                    terminated=[False, False, False, True], truncated=[False] * 4, episode=[0] * 4,
                    meta={"state_kind": "continuous"})
HAND_PREDS = [[[1., 1.], 0., False],    # all right                      credit 1
              [[2., 9.], 0., False],    # one of two elements wrong      credit 1/6 + 1/3 + 1/3 = 5/6
              [[3., 3.], 5., True],     # reward and done wrong          credit 1/3
              [[0., 0.], 1., False]]    # terminal: state ignored, done wrong: credit 1/2


def test_weighted_accuracy_by_hand():
    ev = score_predictions(HAND_PREDS, HAND)
    # reward classes {0: 3 transitions, 1: 1 transition} weigh 1/2 each
    assert ev.accuracy == pytest.approx(0.5 * (1 + 5 / 6 + 1 / 3) / 3 + 0.5 * 0.5, abs=1e-12)   # 11/18
    assert ev.mean_accuracy == pytest.approx((1 + 5 / 6 + 1 / 3 + 1 / 2) / 4, abs=1e-12)
    assert ev.exact_replay == 0.25 and ev.n_failed == 3 and ev.n_terminal == 1
    assert ev.components == pytest.approx({"next_state": 2 / 3, "reward": 0.75, "done": 0.5})
    assert [f["wrong"] for f in ev.failures] == [["next_state"], ["reward", "done"], ["done"]]
    assert score_predictions(HAND_PREDS, HAND, n_failures=1).failures[0]["index"] == 1


def test_weighted_accuracy_by_hand_through_the_sandbox(sandbox):
    "The same predictions, produced by a program in the sandbox, give the same numbers."
    src = ("PRED = " + repr({i: p for i, p in enumerate(HAND_PREDS)}) + "\n"
           "class Environment:\n"
           "    def set_state(self, obs): self.i = int(obs[0])\n"
           "    def step(self, action): p = PRED[self.i]; return p[0], p[1], p[2]\n")
    ev = evaluate_program(src, HAND, sandbox=sandbox)
    assert not ev.bug, ev.error
    assert ev.accuracy == pytest.approx(11 / 18, abs=1e-12) and ev.exact_replay == 0.25


def test_truncation_scored_against_terminated_by_default():
    buf = ReplayBuffer(obs=[[0.], [1.]], actions=[0, 0], next_obs=[[1.], [2.]], rewards=[1., 1.],
                       terminated=[False, False], truncated=[False, True], episode=[0, 0],
                       meta={"state_kind": "continuous"})
    honest = [[[1.], 1., False], [[2.], 1., False]]
    assert score_predictions(honest, buf).perfect
    pc = score_predictions(honest, buf, paper_compat=True)   # the paper's done = terminated or truncated
    assert pc.accuracy == 0.75 and pc.failures[0]["index"] == 1 and pc.failures[0]["wrong"] == ["done"]


def test_reward_tolerance_and_paper_exact_equality():
    preds = [[s, r + 1e-7, d] for s, r, d in zip(HAND.next_obs.tolist(), HAND.rewards.tolist(), HAND.terminated.tolist())]
    assert score_predictions(preds, HAND).perfect
    pc = score_predictions(preds, HAND, paper_compat=True)
    assert pc.components["reward"] == 0.0 and pc.accuracy == pytest.approx(0.5 * 2 / 3 + 0.5 * 0.5)


def test_evaluation_dict_is_json_safe():
    ev = score_predictions([[[float("nan"), 1.], float("inf"), False]] + HAND_PREDS[1:], HAND)
    d = ev.to_dict()
    json.dumps(d, allow_nan=False)
    assert d["failures"][0]["predicted"]["reward"] == "inf" and d["perfect"] is False
    assert Evaluation.crashed("boom", 4).to_dict()["bug"] is True


def test_malformed_buffer_file_gives_a_clear_error(tmp_path):
    p = HAND.save(tmp_path / "buf")
    (p / "transitions.npz").write_bytes(b"garbage")
    with pytest.raises(CwmNbError, match="not an .npz archive") as e:
        ReplayBuffer.load(p)
    assert "What to do" in str(e.value)


# ---- the other observation formats (nbs/14_cwm.ipynb): int, tuple, RTFM's (board, inventory) and valid actions -------

from cwm_nb.bench.program_runs import buffer_format, sandbox_inputs   # noqa: E402

# CliffWalking-v0 and Taxi-v3 written from their descriptions; set_state insists on a Python int.
CLIFFWALKING = '''
class Environment:
    ROWS, COLS, START, GOAL = 4, 12, 36, 47
    MOVES = {0: (-1, 0), 1: (0, 1), 2: (1, 0), 3: (0, -1)}   # up, right, down, left

    def set_state(self, state):
        assert type(state) is int, type(state)
        self.s = state

    def step(self, action):
        r, c = divmod(self.s, self.COLS)
        dr, dc = self.MOVES[int(action)]
        r, c = min(max(r + dr, 0), self.ROWS - 1), min(max(c + dc, 0), self.COLS - 1)
        if r == self.ROWS - 1 and 0 < c < self.COLS - 1:    # the cliff: -100 and back to the start, not terminal
            self.s = self.START
            return self.s, -100, False
        self.s = r * self.COLS + c
        return self.s, -1, self.s == self.GOAL
'''

TAXI = '''
MAP = ["+---------+", "|R: | : :G|", "| : | : : |", "| : : : : |", "| | : | : |", "|Y| : |B: |", "+---------+"]
LOCS = [(0, 0), (0, 4), (4, 0), (4, 3)]

class Environment:
    def set_state(self, state):
        assert type(state) is int, type(state)
        self.s = state

    def step(self, action):
        s = self.s
        dest, s = s % 4, s // 4
        passenger, s = s % 5, s // 5
        row, col = divmod(s, 5)
        a, reward, done = int(action), -1, False
        if a == 0: row = min(row + 1, 4)
        elif a == 1: row = max(row - 1, 0)
        elif a == 2 and MAP[1 + row][2 * col + 2] == ":": col += 1
        elif a == 3 and MAP[1 + row][2 * col] == ":": col -= 1
        elif a == 4:
            if passenger < 4 and (row, col) == LOCS[passenger]: passenger = 4
            else: reward = -10
        elif a == 5:
            if passenger == 4 and (row, col) == LOCS[dest]: passenger, done, reward = dest, True, 20
            elif passenger == 4 and (row, col) in LOCS: passenger = LOCS.index((row, col))
            else: reward = -10
        self.s = ((row * 5 + col) * 5 + passenger) * 4 + dest
        return self.s, reward, done
'''

# Blackjack cannot be modelled exactly (dealer draws); this program only checks what set_state receives.
BLACKJACK = '''
class Environment:
    def set_state(self, state):
        assert type(state) is tuple and len(state) == 3 and all(type(v) is int for v in state), repr(state)
        self.s = state
    def step(self, action):
        player, dealer, ace = self.s
        if int(action) == 0:
            return (player, dealer, ace), 0.0, True
        return (player + 10, dealer, ace), -1.0 if player + 10 > 21 else 0.0, player + 10 > 21
'''


def _paper(stem):
    from cwm_nb.bench.paper_buffers import load_paper_buffer
    from cwm_nb.bench.paper_pickles import paper_buffers_dir
    try:
        path = paper_buffers_dir() / f"{stem}.pkl"
    except CwmNbError:
        return None
    return load_paper_buffer(path) if path.is_file() else None


def _ours(name):
    try:
        return load_buffer(name)
    except CwmNbError:
        return None


def _buffers(name, stem=None):
    bufs = [b for b in (_paper(stem or name), _ours(name)) if b is not None]
    if not bufs:
        pytest.skip(f"no {name} buffer (neither the paper's nor ours)")
    return bufs


@pytest.mark.parametrize("name,src", [("CliffWalking-v0", CLIFFWALKING), ("Taxi-v3", TAXI)])
def test_int_states_are_python_ints_and_compared_exactly(name, src, sandbox):
    for buf in _buffers(name):
        assert buffer_format(buf) == ("int", False) and buf.next_obs.dtype.kind == "i"
        assert sandbox_inputs(buf)["obs_format"] == "int"
        ev = evaluate_program(src, buf, sandbox=sandbox)
        assert not ev.bug, ev.error
        assert ev.perfect and ev.accuracy == 1.0, (buf.meta.get("source_file"), ev.failures[:1])
        # one wrong state: exact comparison, the whole next-state weight
        off = evaluate_program(src.replace("return self.s, reward, done", "return self.s + (a == 0), reward, done")
                               .replace("return self.s, -1, self.s == self.GOAL", "return self.s + (int(action) == 2), -1, self.s == self.GOAL"),
                               buf, sandbox=sandbox)
        assert not off.bug and off.components["next_state"] < 1.0 and off.components["reward"] == 1.0
        f = off.failures[0]
        assert f["wrong"] == ["next_state"] and f["predicted"]["next_obs"] == f["expected"]["next_obs"] + 1
        assert type(f["obs"]) is int


def test_taxi_truncations_cost_only_under_paper_compat(sandbox):
    buf = _paper("Taxi-v3")
    if buf is None:
        pytest.skip("the paper's Taxi buffer is not here")
    ev = evaluate_program(TAXI, buf, sandbox=sandbox, paper_compat=True)
    assert not ev.bug and 0.99 < ev.accuracy < 1.0 and ev.n_failed == 5
    assert all(f["truncated"] and f["wrong"] == ["done"] for f in ev.failures)


def test_tuple_states_are_tuples_of_ints_scored_per_element(sandbox):
    from cwm_nb.sandbox.programs import run_in_process
    for buf in _buffers("Blackjack-v1"):
        assert buffer_format(buf) == ("tuple", False) and buf.obs.shape[1:] == (3,)
        ev = evaluate_program(BLACKJACK, buf, sandbox=sandbox)
        assert not ev.bug, ev.error          # set_state's type assertion held on every transition
        preds = run_in_process(BLACKJACK, "cwm_nb.sandbox.drivers:cwm_predict", data=sandbox_inputs(buf)).value["predictions"]
        same = {"wall_s": 0, "isolation": None}   # scoring alone knows no sandbox
        assert score_predictions(preds, buf).to_dict() | same == ev.to_dict() | same and ev.isolation in ("bwrap", "landlock")
        assert all(isinstance(f["obs"], list) and len(f["obs"]) == 3 for f in ev.failures)
    buf = ReplayBuffer(obs=[[14, 10, 0]], actions=[1], next_obs=[[24, 10, 0]], rewards=[0.], terminated=[False],
                       truncated=[False], episode=[0], meta={"obs_format": "tuple"})
    ev = evaluate_program(BLACKJACK, buf, sandbox=sandbox)   # predicts (24, 10, 0) with reward -1 and done True
    assert ev.accuracy == pytest.approx((1 + 0 + 0) / 3) and ev.failures[0]["wrong"] == ["reward", "done"]


def _room(agent, inventory="empty", monster=None):
    "An RTFM observation row: walls around, 'you' at `agent`, an optional (cell, name) monster, then the inventory."
    b = np.full((6, 6, 2), "empty", dtype=object)
    b[0, :, 0] = b[-1, :, 0] = b[:, 0, 0] = b[:, -1, 0] = "wall"
    if monster:
        b[monster[0][0], monster[0][1], 0] = monster[1]
    if agent:
        b[agent[0], agent[1], 0] = "you"
    return [*b.reshape(-1).tolist(), inventory]


# two live transitions and a winning blow; the valid masks are those of the next boards
RTFM_HAND = ReplayBuffer(
    obs=[_room((2, 2)), _room((1, 2), "shimmering axe"), _room((1, 1), "shimmering axe", ((2, 1), "cold dragon"))],
    actions=[1, 4, 2],
    next_obs=[_room((1, 2)), _room((1, 3), "shimmering axe"), _room((2, 1), "shimmering axe")],
    rewards=[0., 0., 1.], terminated=[False, False, True], truncated=[False] * 3, episode=[0, 0, 0],
    next_valid_actions=[[1, 0, 1, 1, 1], [1, 0, 1, 1, 1], [1, 1, 1, 1, 1]],
    meta={"obs_format": "rtfm", "valid_actions": True})

RTFM_LOOKUP = '''
import numpy as np
PRED = PREDICTIONS
class Environment:
    def set_state(self, state):
        board, inventory = state
        assert isinstance(board, np.ndarray) and board.shape == (6, 6, 2) and board.dtype == object
        assert all(type(v) is str for v in board.flat) and type(inventory) is str
        self.key = (tuple(map(tuple, np.argwhere(board == "you"))), inventory)
    def step(self, action):
        board, inventory, valid, reward, done = PRED[(self.key, int(action))]
        return (np.array(board, dtype=object), inventory), np.array(valid), reward, done
'''


def _rtfm_lookup(predictions):
    "A program answering RTFM_HAND's transitions from a table: predictions[i] = (next row, valid, reward, done)."
    table = {}
    for i, (row, valid, reward, done) in enumerate(predictions):
        obs = RTFM_HAND.obs[i].tolist()
        board = np.array(obs[:72], dtype=object).reshape(6, 6, 2)
        key = (tuple(map(tuple, np.argwhere(board == "you").tolist())), obs[72])
        table[(key, int(RTFM_HAND.actions[i]))] = (np.array(row[:72], dtype=object).reshape(6, 6, 2).tolist(),
                                                   row[72], list(valid), reward, done)
    return RTFM_LOOKUP.replace("PREDICTIONS", repr(table))


def test_rtfm_states_and_valid_actions_by_hand(sandbox):
    assert buffer_format(RTFM_HAND) == ("rtfm", True)
    truth = [(RTFM_HAND.next_obs[i].tolist(), np.flatnonzero(RTFM_HAND.next_valid_actions[i]).tolist(),
              float(RTFM_HAND.rewards[i]), bool(RTFM_HAND.terminated[i])) for i in range(3)]
    ev = evaluate_program(_rtfm_lookup(truth), RTFM_HAND, sandbox=sandbox)
    assert not ev.bug, ev.error
    assert ev.perfect and ev.components == {"next_state": 1.0, "reward": 1.0, "done": 1.0, "valid_actions": 1.0}
    # the subset rule: [0] (Stay) alone is right; an action that is not valid is wrong
    subset = [(truth[0][0], [0], 0., False), (truth[1][0], [0, 1], 0., False), truth[2]]
    ev = evaluate_program(_rtfm_lookup(subset), RTFM_HAND, sandbox=sandbox)
    assert ev.components["valid_actions"] == 0.5 and ev.failures[0]["index"] == 1
    assert ev.failures[0]["wrong"] == ["valid_actions"] and ev.failures[0]["expected"]["valid_actions"] == [0, 2, 3, 4]
    # rewards {0: two live transitions, 1: one}: class weights 1/2 each; the live one with a wrong valid list earns 3/4
    assert ev.accuracy == pytest.approx(0.5 * (1 + 0.75) / 2 + 0.5)
    # board wrong in one cell, inventory right: half of the next-state quarter
    stuck = [(RTFM_HAND.obs[0].tolist(), truth[0][1], 0., False), truth[1], truth[2]]
    ev = evaluate_program(_rtfm_lookup(stuck), RTFM_HAND, sandbox=sandbox)
    assert ev.mean_accuracy == pytest.approx((0.25 * 0.5 + 0.75 + 1 + 1) / 3)
    f = ev.failures[0]
    assert f["wrong"] == ["next_state"] and np.array(f["expected"]["next_obs"][0], dtype=object).shape == (6, 6, 2)
    assert f["obs"][1] == "empty" and f["predicted"]["next_obs"][1] == "empty"
    json.dumps(ev.to_dict(), allow_nan=False)
    # a 3-tuple step when valid actions are expected, on every transition: no usable output, an interface error
    # (a bug, for the fix prompt) in both modes, its error naming the expected outputs
    three = _rtfm_lookup(truth).replace("np.array(valid), reward, done", "reward, done")
    assert three != _rtfm_lookup(truth)
    for pc in (False, True):
        ev = evaluate_program(three, RTFM_HAND, sandbox=sandbox, paper_compat=pc)
        assert ev.bug and ev.accuracy == 0.0 and "(next_obs, valid_actions, reward, done)" in ev.error
    # on one transition only: that transition fails, named, and the others count (a bug under paper_compat)
    ret = "return (np.array(board, dtype=object), inventory), np.array(valid), reward, done"
    once = _rtfm_lookup(truth).replace(ret, "if reward: return (np.array(board, dtype=object), inventory), reward, done\n        " + ret)
    assert once != _rtfm_lookup(truth)
    ev = evaluate_program(once, RTFM_HAND, sandbox=sandbox)
    assert not ev.bug and ev.n_failed == 1 and ev.failures[0]["predicted"] == {}
    assert "it returned 3 values" in ev.failures[0]["problems"][0]
    assert evaluate_program(once, RTFM_HAND, sandbox=sandbox, paper_compat=True).bug


def test_rtfm_masks_come_from_the_spec_without_the_column():
    "A buffer without next_valid_actions gets RTFM's masks from the spec's action_mask function, not a case in cwm."
    import inspect
    import cwm_nb.bench.cwm as cwm
    from cwm_nb.bench.envs import REGISTRY
    src = inspect.getsource(cwm)
    assert REGISTRY["rtfm"].action_mask and "rtfm_row_mask" not in src and "action_mask(" not in src
    cols = {k: getattr(RTFM_HAND, k) for k in RTFM_HAND.columns() if k != "next_valid_actions"}
    for meta in ({"obs_format": "rtfm", "valid_actions": True}, {"env": "rtfm"}):
        bare = ReplayBuffer(**cols, meta=meta)
        assert bare.next_valid_actions is None and buffer_format(bare) == ("rtfm", True)
        live = ~RTFM_HAND.terminated   # scored on live transitions only (the hand column marks all valid after the win)
        assert cwm._next_valid_mask(bare, "rtfm")[live].tolist() == RTFM_HAND.next_valid_actions[live].tolist()

def _collect_rtfm(seed=0, steps=400, horizon=100):
    "Transitions of the RTFM env under the uniform random valid-action policy, as a ReplayBuffer."
    from cwm_nb.bench.rtfm import rtfm_obs_to_row
    from cwm_nb.bench.rtfm_env import RTFMEnv, random_valid_policy
    env, rng = RTFMEnv(), np.random.default_rng(seed)
    cols = {k: [] for k in ("obs", "actions", "next_obs", "rewards", "terminated", "truncated", "episode", "next_valid_actions")}
    ep, t, (obs, info) = 0, 0, env.reset(seed=seed)
    while len(cols["rewards"]) < steps:
        a = random_valid_policy(env, obs, rng, info)
        nxt, r, term, trunc, info = env.step(a)
        t += 1
        trunc = trunc or (t >= horizon and not term)
        for k, v in zip(cols, (rtfm_obs_to_row(obs), a, rtfm_obs_to_row(nxt), r, term, trunc, ep, info["action_mask"])):
            cols[k].append(v)
        obs = nxt
        if term or trunc:
            ep, t = ep + 1, 0
            obs, info = env.reset(seed=seed + ep)
    return ReplayBuffer(**cols, meta={"env": "rtfm", "obs_format": "rtfm", "valid_actions": True})


def test_correct_rtfm_program_is_perfect_on_a_collected_buffer(sandbox):
    src = (Path(__file__).resolve().parents[1] / "data" / "programs" / "rtfm.py").read_text()
    bufs = [_collect_rtfm()] + [b for b in (_ours("rtfm"),) if b is not None]
    for buf in bufs:
        assert buf.terminated.sum() > 0 and buf.next_valid_actions is not None
        ev = evaluate_program(src, buf, sandbox=sandbox)
        assert not ev.bug, ev.error
        assert ev.perfect and ev.accuracy == pytest.approx(1.0) and ev.failures == [], ev.failures[:1]
        assert ev.components == {"next_state": 1.0, "reward": 1.0, "done": 1.0, "valid_actions": 1.0}
        # the paper's rules count a truncation as done, which no program can predict from the state
        pc = evaluate_program(src, buf, sandbox=sandbox, paper_compat=True, n_failures=100)
        assert pc.n_failed == int(buf.truncated.sum()) and pc.perfect == (pc.n_failed == 0)
        assert all(f["truncated"] and f["wrong"] == ["done"] for f in pc.failures)
    # a model that forgets walls claims moves that are not valid: the valid-actions component drops
    ev = evaluate_program(src.replace('self.board[r, c, 0] != "wall"', 'True'), bufs[0], sandbox=sandbox)
    assert not ev.bug and ev.components["valid_actions"] < 1.0 and ev.components["reward"] == 1.0


# A program whose answer lies about equality (or is a subclass pretending to be a plain value) never passes:
# the driver converts by exact type, so the lie is an error of the program, and every component scores 0.
LIARS = {
    "array": ("import numpy as np\nclass Liar(np.ndarray):\n    def __eq__(self, other): return True\n",
              "np.zeros(2).view(Liar)", HAND),
    "int": ("class Liar(int):\n    def __eq__(self, other): return True\n    __hash__ = int.__hash__\n",
            "Liar(0)", None),
    "tuple": ("class Liar(tuple):\n    def __eq__(self, other): return True\n    __hash__ = tuple.__hash__\n",
              "Liar((0, 0, 0))", None),
    "rtfm": ("import numpy as np\nclass Liar(str):\n    def __eq__(self, other): return True\n    __hash__ = str.__hash__\n",
             "(np.full((6, 6, 2), Liar('x'), dtype=object), Liar('x'))", RTFM_HAND),
    "valid_actions": ("import numpy as np\nclass Liar(int):\n    def __eq__(self, other): return True\n    __hash__ = int.__hash__\n",
                      "VALID", RTFM_HAND),
}


@pytest.mark.parametrize("fmt", sorted(LIARS))
def test_lying_objects_never_count_as_right(fmt, sandbox):
    head, value, buf = LIARS[fmt]
    if fmt == "int":
        buf = ReplayBuffer(obs=[0, 1], actions=[0, 0], next_obs=[1, 2], rewards=[0., 0.], terminated=[False, False],
                           truncated=[False, False], episode=[0, 0], meta={"obs_format": "int"})
    if fmt == "tuple":
        buf = ReplayBuffer(obs=[[1, 2, 0]], actions=[0], next_obs=[[1, 2, 0]], rewards=[0.], terminated=[False],
                           truncated=[False], episode=[0], meta={"obs_format": "tuple"})
    fmt_, has_valid = buffer_format(buf)
    if fmt == "valid_actions":
        ret = "(np.full((6, 6, 2), 'empty', dtype=object), 'empty'), [Liar(0)], 0.0, False"
    elif has_valid:
        ret = f"{value}, [0], 0.0, False"
    else:
        ret = f"{value}, 0.0, False"
    src = head + f"class Environment:\n    def set_state(self, s): pass\n    def step(self, a): return {ret}\n"
    ev = evaluate_program(src, buf, sandbox=sandbox)
    comp = "valid_actions" if fmt == "valid_actions" else "next_state"
    assert ev.components[comp] == 0.0 and not ev.perfect and not ev.bug, ev.error   # malformed: that part is wrong
    for f in ev.failures:   # (the RTFM buffer's terminal transition also has its reward and done wrong)
        assert (f["terminal"] or comp in f["wrong"]) and "type Liar is not plain data" in f["problems"][0], f
    pc = evaluate_program(src, buf, sandbox=sandbox, paper_compat=True)
    assert pc.bug and pc.accuracy == 0.0 and "Liar" in pc.error, pc.error


class _Recording:
    "The sandbox, keeping the last answer of every session it feeds (to read what the program printed)."
    def __init__(self, sb): self.sb, self.results = sb, []
    def __getattr__(self, name): return getattr(self.sb, name)
    def open_session(self, *args, **kwargs):
        first, s = self.sb.open_session(*args, **kwargs)
        if s is not None:
            feed = s.feed
            def recorded(*a, **kw):
                out = feed(*a, **kw); self.results.append(out[-1]); return out
            s.feed = recorded
        return first, s


def test_debug_print_in_step_is_truncated_not_punished(cartpole, sandbox):
    "A correct program that prints its state on every step (~100 KB here, over the 64 KiB capture cap) still scores 1.0."
    import contextlib, io
    from cwm_nb.bench.program_runs import fed_batches, sandbox_inputs
    from cwm_nb.sandbox.programs import run_in_process
    src = CARTPOLE.replace(
        "        self.state = np.array([x, x_dot, theta, theta_dot])\n",
        "        self.state = np.array([x, x_dot, theta, theta_dot])\n"
        "        print('debug: action', action, 'state', self.state.tolist(), 'limits', X_LIMIT, THETA_LIMIT)\n")
    assert src != CARTPOLE
    rec = _Recording(sandbox)
    ev = evaluate_program(src, cartpole, sandbox=rec)
    assert not ev.bug and ev.error is None and ev.accuracy == 1.0 and ev.perfect, ev.error
    out = rec.results[-1].stdout
    full = io.StringIO()   # what the (trusted, hand-written) program prints in full, in the order it is fed
    order = np.concatenate(fed_batches(cartpole)).tolist()   # the order the transitions are fed in
    data = sandbox_inputs(cartpole)
    data = dict(data, obs=[data["obs"][i] for i in order], actions=[data["actions"][i] for i in order])
    with contextlib.redirect_stdout(full): run_in_process(src, "cwm_nb.sandbox.drivers:cwm_predict", data=data)
    full = full.getvalue()
    cap = sandbox.limits.output_bytes
    assert len(full) > cap and full.isascii() and full.count("\n") == len(cartpole)
    half = cap // 2
    assert out.startswith(full[:half]) and out.endswith(full[-half:])   # the first and the last steps' prints
    assert f"{len(full) - 2 * half} bytes" in out[half:-half] and len(out) < cap + 300


# MountainCar from its physics; `reached_goal` forgets its `return` for positions in [0.475, 0.5), so `done` is None
# on exactly 4 of the 1,860 transitions of the shipped buffer (the case of a reported evaluation).
MOUNTAINCAR_FORGETS_RETURN = '''
import math
import numpy as np

FORCE, GRAVITY, MAX_SPEED = 0.001, 0.0025, 0.07
MIN_POSITION, MAX_POSITION, GOAL = -1.2, 0.6, 0.5

def reached_goal(position, velocity):
    if position >= GOAL:
        return bool(velocity >= 0)
    if position < 0.475:
        return False

class Environment:
    def set_state(self, obs):
        self.position, self.velocity = (float(v) for v in obs)

    def step(self, action):
        v = self.velocity + (int(action) - 1) * FORCE + math.cos(3 * self.position) * (-GRAVITY)
        v = min(max(v, -MAX_SPEED), MAX_SPEED)
        p = min(max(self.position + v, MIN_POSITION), MAX_POSITION)
        if p == MIN_POSITION and v < 0:
            v = 0.0
        self.position, self.velocity = p, v
        return np.array([p, v], dtype=np.float32), -1.0, reached_goal(p, v)
'''


def test_done_none_on_4_of_1860_transitions_fails_only_those(sandbox):
    buf = load_buffer("MountainCar-v0")
    pos = buf.next_obs[:, 0]
    none_at = np.flatnonzero((pos >= 0.475) & (pos < 0.5)).tolist()
    assert len(buf) == 1860 and len(none_at) == 4 and not buf.terminated[none_at].any()
    correct = evaluate_program(MOUNTAINCAR_FORGETS_RETURN.replace("< 0.475", "< GOAL"), buf, sandbox=sandbox)
    assert correct.perfect, correct.error
    ev = evaluate_program(MOUNTAINCAR_FORGETS_RETURN, buf, sandbox=sandbox, n_failures=5)
    assert not ev.bug and ev.error is None
    assert ev.n_failed == 4 and [f["index"] for f in ev.failures] == none_at
    assert all(f["wrong"] == ["done"] and f["predicted"]["done"] is None for f in ev.failures)
    assert all("done must be a bool, not NoneType" in f["problems"][0] for f in ev.failures), ev.failures[0]["problems"]
    assert ev.components["done"] == pytest.approx(1 - 4 / 1860) and ev.components["next_state"] == 1.0
    assert ev.accuracy == pytest.approx(1 - 4 / 3 / 1860)   # one reward class (-1): the plain mean of the credits
    pc = evaluate_program(MOUNTAINCAR_FORGETS_RETURN, buf, sandbox=sandbox, paper_compat=True)
    assert pc.bug and pc.accuracy == 0.0 and f"transition {none_at[0]}" in pc.error and "NoneType" in pc.error


# One malformed output on every 100th step (the 100th, 200th, 300th and 400th transitions the program is fed).
MALFORMED = {   # kind: (what step returns on those steps, the component that is wrong, words of the problem)
    "done None": ("self.state.astype(np.float32), 1.0, None", ["done"], "done must be a bool, not NoneType"),
    "done a string": ("self.state.astype(np.float32), 1.0, 'no'", ["done"], "done must be a bool, not str"),
    "reward None": ("self.state.astype(np.float32), None, done", ["reward"], "the reward must be a number, not NoneType"),
    "reward a string": ("self.state.astype(np.float32), '1.0', done", ["reward"], "the reward must be a number, not str"),
    "next state of the wrong shape": ("self.state[:3], 1.0, done", ["next_state"], "next_obs has shape (3,), expected (4,)"),
    "next state None": ("None, 1.0, done", ["next_state"], "next_obs is not numeric (NoneType)"),
    "next state not plain data": ("object(), 1.0, done", ["next_state"], "a value of type object is not plain data"),
    "two values": ("self.state.astype(np.float32), 1.0", ["next_state", "reward", "done"], "it returned 2 values"),
    "no tuple": ("None", ["next_state", "reward", "done"], "it returned a NoneType"),
}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_malformed_output_on_a_few_transitions(kind, cartpole, sandbox):
    ret, wrong, problem = MALFORMED[kind]
    src = CARTPOLE.replace("    def step(self, action):\n",
                           "    calls = 0\n\n    def step(self, action):\n        self.calls += 1\n")
    src = src.replace("        return self.state.astype(np.float32), 1.0, done\n",
                      f"        if self.calls % 100 == 0:\n            return {ret}\n"
                      "        return self.state.astype(np.float32), 1.0, done\n")
    from cwm_nb.bench.program_runs import fed_batches
    fed = np.concatenate(fed_batches(cartpole))   # the order the program sees the transitions in
    at = sorted(fed[[99, 199, 299, 399]].tolist())
    assert not cartpole.terminated[at].any() and len(set(cartpole.rewards.tolist())) == 1
    ev = evaluate_program(src, cartpole, sandbox=sandbox, n_failures=5)
    assert not ev.bug and ev.error is None, ev.error
    assert ev.n_failed == 4 and [f["index"] for f in ev.failures] == at
    for f in ev.failures:
        assert f["wrong"] == wrong and any(problem in p for p in f["problems"]), f
    credit = 1 - len(wrong) / 3   # the other components of these transitions still count
    assert ev.accuracy == pytest.approx(1 - 4 * (1 - credit) / len(cartpole))
    json.dumps(ev.to_dict(), allow_nan=False)
    pc = evaluate_program(src, cartpole, sandbox=sandbox, paper_compat=True)
    assert pc.bug and pc.accuracy == 0.0 and f"transition {at[0]}" in pc.error and problem in pc.error, pc.error
