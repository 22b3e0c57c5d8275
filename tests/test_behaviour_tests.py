"""Behavioural tests (nbs/13d_behaviour_tests.ipynb, the search option `tests` of 21_search_loop): tests are checked on
the real environment before they judge a program, run apart from the program they judge, and reach the command line
and the search. Real sandbox, real gymnasium environments, a real `cwm-nb` process; the searches use a scripted
model (a test double) whose answers are fixed, and against the provider double each run has its own answer cache."""
import json, subprocess, sys
from pathlib import Path

import pytest

from cwm_nb.bench import behaviour_tests as bt, replay
from cwm_nb.core import CwmNbError, data_dir
from cwm_nb.experiments.definition import define_run
from cwm_nb.experiments.metrics import run_cwmb_search
from cwm_nb.llm.demo import ScriptedLLM

ROOT = Path(__file__).resolve().parents[1]
CLI = str(Path(sys.executable).parent/"cwm-nb")
RIGHT = (data_dir()/"programs"/"CartPole-v1.py").read_text()
NO_TRACK = RIGHT.replace("x < -X_LIMIT or x > X_LIMIT or ", "")
TESTS = (data_dir()/"programs"/"tests"/"CartPole-v1.py").read_text()


@pytest.fixture(scope="module")
def cartpole():
    buf = replay.load_buffer("CartPole-v1")
    return buf, bt.check_tests(TESTS, "CartPole-v1", buf)


def test_the_real_environment_keeps_right_tests_and_drops_the_wrong_one(cartpole):
    _, check = cartpole
    assert check.how == "real"
    assert [d["name"] for d in check.dropped] == ["test_push_right_moves_cart_left"]
    assert "pushing right should move the cart left" in check.dropped[0]["message"]
    assert len(check.kept) == 4


def test_eval_program_json_has_one_entry_per_test_and_the_counts(tmp_path):
    prog = tmp_path/"no_track.py"; prog.write_text(NO_TRACK)
    tests = data_dir()/"programs"/"tests"/"CartPole-v1.py"
    r = subprocess.run([CLI, "eval-program", str(prog), "--env", "CartPole-v1", "--tests", str(tests), "--json",
                        "--no-determinism"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(r.stdout)
    assert d["accuracy"] == 1.0                                     # the buffer cannot tell
    assert {tuple(sorted(t)) for t in d["tests"]} == {("message", "name", "program", "real")}
    verdicts = {t["name"]: (t["real"], t["program"]) for t in d["tests"]}
    assert verdicts["test_cart_beyond_track_ends_episode"] == ("pass", "fail")
    assert verdicts["test_push_right_moves_cart_left"] == ("fail", "skipped")
    assert (d["tests_written"], d["tests_kept"], d["tests_dropped"], d["tests_passed"]) == (5, 4, 1, 3)
    assert d["tests_pass_rate"] == 0.75
    table = subprocess.run([CLI, "eval-program", str(prog), "--env", "CartPole-v1", "--tests", str(tests),
                            "--no-determinism"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert "the program passes 3 of 4 kept" in table.stdout


HOSTILE_PROGRAM = '''
import gc, sys
class Environment:
    def set_state(self, state): self.state = state
    def step(self, action):
        # a program looking for the tests that judge it, and for a way to pass them
        found = [o for o in gc.get_objects() if callable(o) and getattr(o, "__name__", "").startswith("test_")]
        found += [o for o in gc.get_objects() if isinstance(o, str) and "PROBE-MARKER" + "-7f3a" in o]
        frame, depth = sys._getframe(), 0
        while frame is not None:
            found += [k for k in frame.f_globals if k.startswith("test_")]
            frame, depth = frame.f_back, depth + 1
        return [0.0], float(len(found)), False
'''

PROBING_TESTS = '''
MARKER = "PROBE-MARKER-7f3a"   # the tests' own text: the program must not find it

def test_program_sees_no_test(Environment):
    env = Environment(); env.set_state([0.0])
    assert env.step(0)[1] == 0.0

def test_lying_object(Environment):
    env = Environment(); env.set_state([0.0])
    assert env.step(1)[2]
'''


def test_a_program_cannot_see_the_tests_or_pass_them_with_an_object(cartpole):
    buf, _ = cartpole
    program = HOSTILE_PROGRAM + '''
class Yes:
    def __eq__(self, other): return True
    def __bool__(self): return True
_step = Environment.step
def step(self, action): return _step(self, action) if action == 0 else ([0.0], 1.0, Yes())
Environment.step = step
'''
    target = bt.ProgramTarget(bt.get_sandbox(), program, bt.program_args(buf))
    outs = bt.run_tests(PROBING_TESTS, bt.find_tests(PROBING_TESTS), target)
    assert outs["test_program_sees_no_test"]["verdict"] == "pass", outs
    assert outs["test_lying_object"]["verdict"] == "error"          # not plain data: never a pass
    assert "not plain" in outs["test_lying_object"]["message"]


def test_a_program_that_exits_or_hangs_errs_and_the_next_test_runs(cartpole):
    buf, check = cartpole
    exits = "import os\nclass Environment:\n    def set_state(self, s): pass\n    def step(self, a): os._exit(0)\n"
    rep = bt.score_tests(check, exits, buf, test_s=2)
    kept = [t for t in rep["tests"] if t["real"] == "pass"]
    assert {t["program"] for t in kept} == {"error"} and rep["passed"] == 0
    hangs = "class Environment:\n    def set_state(self, s): pass\n    def step(self, a):\n        while True: pass\n"
    rep = bt.score_tests(check, hangs, buf, test_s=1)
    assert {t["program"] for t in rep["tests"] if t["real"] == "pass"} == {"error"}


MUST_REFUSE = '''
def test_an_unknown_action_is_refused(Environment):
    env = Environment(); env.set_state([0.0, 0.0, 0.0, 0.0])
    try:
        env.step(7)
    except Exception:
        return
    assert False, "7 is not an action of CartPole"
'''


@pytest.mark.parametrize("step", ["import os; os._exit(3)", "raise SystemExit(0)", "while True: pass"])
def test_a_program_that_dies_does_not_pass_a_test_that_expects_a_refusal(cartpole, step):
    buf, _ = cartpole
    check = bt.check_tests(MUST_REFUSE, "CartPole-v1", buf)
    assert check.kept == ["test_an_unknown_action_is_refused"]   # the real environment refuses action 7
    program = f"class Environment:\n    def set_state(self, s): pass\n    def step(self, a):\n        {step}\n"
    rep = bt.score_tests(check, program, buf, test_s=1)
    assert rep["tests"][0]["program"] == "error" and rep["pass_rate"] == 0.0, rep["tests"]


def test_a_broken_tests_module_is_an_error_of_the_tests(cartpole):
    buf, _ = cartpole
    check = bt.check_tests("def test_a(Environment):\n    assert (", "CartPole-v1", buf)
    assert check.error and "does not parse" in check.error and check.verdicts == []
    crash = bt.check_tests("import sys\nsys.exit(3)\ndef test_a(Environment):\n    pass\n", "CartPole-v1", buf)
    assert [v["real"] for v in crash.verdicts] == ["fail"]           # dropped: it never judges a program


def test_where_no_state_can_be_set_the_buffer_checks_or_the_test_stays_unchecked():
    buf = replay.load_buffer("Blackjack-v1")
    i = next(i for i in range(len(buf.actions)) if int(buf.actions[i]) == 0)   # a stick: random dealer draws
    j = next(i for i in range(len(buf.actions)) if buf.obs[i].tolist() == [20, 10, 0])
    tests = f'''
def test_unseen_state(Environment):
    env = Environment(); env.set_state([4, 1, 0])
    assert env.step(1)[1] == 0.0

def test_logged_hit(Environment):
    env = Environment(); env.set_state({buf.obs[j].tolist()})
    assert isinstance(env.step({int(buf.actions[j])})[2], bool)
'''
    check = bt.check_tests(tests, "Blackjack-v1", buf)
    verdicts = {v["name"]: v["real"] for v in check.verdicts}
    assert check.how == "buffer" and verdicts["test_unseen_state"] == "unchecked"
    assert verdicts["test_logged_hit"] == "unchecked"                 # a random world: one draw confirms nothing
    rep = bt.score_tests(check, (data_dir()/"programs"/"Blackjack-v1.py").read_text(), buf)
    assert rep["unchecked"] == 2 and rep["kept"] == 0
    assert rep["pass_rate"] is None                                    # unchecked tests never count
    del i


def test_on_a_random_world_a_logged_draw_drops_a_test_but_never_keeps_one():
    buf = replay.load_buffer("Blackjack-v1")
    i = next(i for i in range(len(buf.actions)) if int(buf.actions[i]) == 0)   # a stick: the dealer draws
    state, reward = buf.obs[i].tolist(), float(buf.rewards[i])
    tests = f'''
def test_as_logged(Environment):
    env = Environment(); env.set_state({state})
    assert env.step(0)[1] == {reward}

def test_contradicted(Environment):
    env = Environment(); env.set_state({state})
    assert env.step(0)[1] != {reward}
'''
    check = bt.check_tests(tests, "Blackjack-v1", buf)
    verdicts = {v["name"]: v["real"] for v in check.verdicts}
    # the logged draw agrees with the first: the next draw may not (the reference program fails it)
    assert verdicts == {"test_as_logged": "unchecked", "test_contradicted": "fail"}
    assert "one draw" in check.verdicts[0]["message"]


RTFM_TESTS = '''
def _room():
    b = [[["empty", "empty"] for _ in range(6)] for _ in range(6)]
    for i in range(6):
        for j in range(6):
            if i in (0, 5) or j in (0, 5): b[i][j][0] = "wall"
    return b

def test_a_wall_blocks_the_player(Environment):
    b = _room(); b[1][1][0] = "you"
    env = Environment(); env.set_state((b, "empty"))
    (board, inventory), valid, reward, done = env.step(1)
    assert board[1][1][0] == "you" and not done

def test_the_right_weapon_beats_a_goal_monster(Environment):
    b = _room(); b[2][2][0] = "you"; b[2][3][0] = "cold dragon"
    env = Environment(); env.set_state((b, "shimmering axe"))
    (board, inventory), valid, reward, done = env.step(4)
    assert reward == 1 and done
'''


def test_rtfm_tests_hand_the_program_its_state_as_the_transition_drivers_do():
    buf = replay.load_buffer("rtfm")
    check = bt.check_tests(RTFM_TESTS, "rtfm", buf)
    assert check.kept == ["test_a_wall_blocks_the_player", "test_the_right_weapon_beats_a_goal_monster"]
    # the tuple (board, inventory) crosses as a list of two; the program gets (board array, inventory)
    indexed = (data_dir()/"programs"/"rtfm.py").read_text().replace(
        "board, inventory = state", "board, inventory = state; assert board.shape == (6, 6, 2)")
    for program in ((data_dir()/"programs"/"rtfm.py").read_text(), indexed):
        rep = bt.score_tests(check, program, buf)
        assert [t["program"] for t in rep["tests"]] == ["pass", "pass"], rep["tests"]


class _Recorder:
    "Trusted stand-in: remembers every state it is set to (the draws of the test)."
    seen: list = []
    def set_state(self, s): _Recorder.seen.append(s)
    def step(self, a): return [[0.0], 0.0, False]


def test_a_test_draws_the_same_states_on_every_run():
    tests = ("import random\nimport numpy as np\n"
             "def test_draws(Environment):\n"
             "    env = Environment(); env.set_state([random.random(), float(np.random.rand())])\n")
    runs = []
    for _ in range(2):   # two sessions: as on the real environment, then on a program
        _Recorder.seen = []
        assert bt.run_tests(tests, ["test_draws"], bt.LocalTarget(_Recorder))["test_draws"]["verdict"] == "pass"
        runs.append(_Recorder.seen)
    assert runs[0] == runs[1] and len(runs[0]) == 1


def test_a_test_that_passes_on_some_seeds_only_is_dropped():
    real, why = bt._real_verdict([{"verdict": "pass"}, {"verdict": "fail", "message": "m"},
                                  {"verdict": "pass"}], False)
    assert real == "fail" and "on 1 of 3 seeds" in why


def scripted(messages, draw):
    "Test double: the stand-in tests, the wrong program at the root, the reference elsewhere."
    user = messages[1]["content"]
    if "Write unit tests" in user: return TESTS.split('"""', 2)[2] + "\n```"
    if "Below is a program" in user: return "## Corrected program\n```python\n" + RIGHT + "```"
    so_far = messages[-1]["content"].split("```python\n", 1)[1]
    return (NO_TRACK if not so_far else RIGHT)[len(so_far):] + "```"


def test_the_search_keeps_the_right_program_with_tests_and_records_them(tmp_path):
    runs = {}
    for on in (False, True):
        runs[on] = run_cwmb_search(env="CartPole-v1", method="gif-mcts", model="scripted", budget=5, seed=0,
                                   out=str(tmp_path), options={"tests": on}, llm=ScriptedLLM(scripted),
                                   progress=False)
    assert "x > X_LIMIT" not in runs[False].best_program and "tests_kept" not in runs[False].metrics
    r = runs[True]
    assert "x > X_LIMIT" in r.best_program
    m = r.metrics
    assert (m["tests_written"], m["tests_kept"], m["tests_passed"]) == (5, 4, 4)
    assert m["tests_dropped"] == ["test_push_right_moves_cart_left"]
    assert (r.run_dir/"tests.py").read_text().count("def test_") == 5
    verdicts = json.loads((r.run_dir/"tests_check.json").read_text())["verdicts"]
    assert [v["real"] for v in verdicts].count("fail") == 1
    tree = json.loads((r.run_dir/"tree.json").read_text())
    assert [n.get("tests_pass_rate") for n in tree["nodes"][1:3]] == [0.75, 1.0]
    assert tree["tests"]["call"] == 1 and m["llm_calls"] == 3        # the tests' call counts in the budget
    # resumed with a larger budget: the tests are neither asked for again nor re-checked
    llm = ScriptedLLM(scripted)
    again = run_cwmb_search(env="CartPole-v1", method="gif-mcts", model="scripted", budget=6, seed=0,
                            out=str(tmp_path), options={"tests": True}, llm=llm, progress=False)
    assert not any("Write unit tests" in m[1]["content"] for m in llm.seen)
    assert again.metrics["tests_kept"] == 4


def test_tests_is_an_option_of_gif_mcts_and_worldcoder_only():
    d = define_run("cwmb", {"env": "CartPole-v1", "method": "worldcoder"}, ["tests=true", "tests_rule=mean"])
    assert d.method_options == {"tests": True, "tests_rule": "mean"}
    with pytest.raises(CwmNbError, match="tests_rule"):
        define_run("cwmb", {"env": "CartPole-v1"}, ["tests_rule=max"])
    with pytest.raises(CwmNbError):
        define_run("cwmb", {"env": "CartPole-v1", "method": "zero-shot-cot"}, ["tests=true"])


def test_a_sweep_has_tests_as_an_axis(tmp_path):
    r = subprocess.run([CLI, "sweep", "cwmb", "--envs", "CartPole-v1", "--methods", "gif-mcts,worldcoder", "--set",
                        "tests=false,true", "--dry-run", "--out", str(tmp_path)], capture_output=True, text=True,
                       cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [l for l in r.stdout.splitlines() if "on CartPole-v1" in l]
    assert sorted((l.split()[0], l.split("seed 0, ")[1].split()[0]) for l in rows) == [
        ("gif-mcts", "tests=False"), ("gif-mcts", "tests=True"), ("worldcoder", "tests=False"),
        ("worldcoder", "tests=True")]
