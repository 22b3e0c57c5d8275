"""Hostile programs that search their own process for the data they are scored against (issue #35), in each kernel
isolation mode (bubblewrap, Landlock). As root, `test_hostile_programs_as_a_non_root_user` of test_sandbox.py runs
the landlock tests of this file again as a user it creates.

A probe (tests/gaming_probes.py) answers with the logged successor of the state it is given when it finds it, else
with its fallback answer. Where a job held the buffer (the old data flow, kept in `old_evaluate`), the probes find
it; where the transitions are fed in order (`run_on_buffer`), every probe scores exactly what `FALLBACK` scores,
on the transitions, the determinism passes and the rollouts alike. APPS: a program that searches for the expected
outputs prints nothing more than its fallback does. Across jobs: a program that records what it is shown in a
kernel object that outlives its job (System V IPC, a POSIX message queue, a key ring) leaves nothing for a later
one. The real simulator: a program that imports gymnasium's CartPole by a name its source does not spell
scores what its fallback scores (tests/test_sandbox_files.py: no simulator can be imported or read). WorldCoder: a
transition program that answers with another state its job holds is right on no step its fallback gets wrong.
"""
import os
import random

import numpy as np
import pytest

from gaming_probes import FALLBACK, GRID_FALLBACK, NAMES, PAIRS, PROBES, SIMULATOR, old_evaluate
from cwm_nb.bench.cwm import evaluate_program
from cwm_nb.bench.program_runs import sandbox_inputs
from cwm_nb.bench.replay import load_buffer
from cwm_nb.sandbox.jobs import Sandbox
from cwm_nb.sandbox.landlock import landlock_support
from cwm_nb.sandbox.programs import SandboxLimits
from cwm_nb.search.llm_simulator import subset_buffer

pytestmark = pytest.mark.timeout(600)

MODES = ["bwrap", "landlock"]
LIMITS = SandboxLimits(wall_s=60, cpu_s=60, memory_mb=1024)   # a probe's searches are slow, not endless
FOUND_BY_HOLDING = ("gc", "frames", "inherited")   # the probes that find the buffer wherever a job holds it


def _skip_unavailable(mode: str) -> None:
    import shutil
    if mode == "bwrap" and shutil.which("bwrap") is None: pytest.skip("needs bubblewrap (not installed)")
    if mode == "landlock" and landlock_support(): pytest.skip(landlock_support())


@pytest.fixture(scope="module")
def buffer():
    "The first three episodes of the shipped CartPole buffer."
    full = load_buffer("CartPole-v1")
    a, b = full.episode_bounds()[0][0], full.episode_bounds()[2][1]
    return subset_buffer(full, range(a, b))


@pytest.fixture(scope="module", params=MODES)
def sandbox(request):
    _skip_unavailable(request.param)
    with Sandbox(LIMITS, isolation=request.param) as sb:
        assert sb.isolation == request.param
        yield sb


def _scores(ev) -> tuple:
    return ev.accuracy, ev.exact_replay, ev.components, ev.bug, ev.error


@pytest.fixture(scope="module")
def fallback(sandbox, buffer):
    "The fallback's evaluation, with the determinism check and the rollouts."
    ev = evaluate_program(FALLBACK, buffer, sandbox=sandbox, determinism=True, rollouts=True)
    assert not ev.bug and ev.deterministic, ev.error
    return ev


@pytest.mark.parametrize("probe", FOUND_BY_HOLDING)
def test_a_probe_finds_the_buffer_a_job_holds(sandbox, buffer, probe):
    "The old data flow (the buffer stored in the server, one job over all of it): the probe answers from the log."
    with Sandbox(LIMITS, isolation=sandbox.isolation) as old:
        found, base = old_evaluate(old, PROBES[probe], buffer), old_evaluate(old, FALLBACK, buffer)
    assert found.components["next_state"] == 1.0 and base.components["next_state"] == 0.0, (found.error, base.error)


@pytest.mark.parametrize("probe", list(PROBES))
def test_a_probe_scores_what_its_fallback_scores(sandbox, buffer, fallback, probe):
    "Transitions fed in order: on every transition, determinism pass and rollout, the probe finds nothing."
    ev = evaluate_program(PROBES[probe], buffer, sandbox=sandbox, determinism=True, rollouts=True)
    assert _scores(ev) == _scores(fallback), ev.error
    assert ev.deterministic is True and ev.determinism["first_difference"] is None
    assert ev.rollouts["horizons"] == fallback.rollouts["horizons"]
    assert ev.rollouts["by_step"] == fallback.rollouts["by_step"]


def test_the_names_of_fed_transitions_tell_nothing(sandbox, buffer, fallback, monkeypatch):
    """A program reads the names its transitions are fed under (13b `_labelled`): named by their buffer numbers, the
    first batch's names are the episodes' starts and give away each episode's last transition (`done`, and the last
    step of each rollout); under fresh random names it scores what its fallback scores, rollouts included."""
    ev = evaluate_program(NAMES, buffer, sandbox=sandbox, determinism=True, rollouts=True)
    assert _scores(ev) == _scores(fallback), ev.error
    assert ev.rollouts["horizons"] == fallback.rollouts["horizons"] and ev.deterministic is True
    from cwm_nb.bench import program_runs
    monkeypatch.setattr(program_runs, "_labelled", lambda n: np.arange(n, dtype=np.int64))   # as before: numbers
    told = evaluate_program(NAMES, buffer, sandbox=sandbox, determinism=True, rollouts=True)
    assert told.components["done"] > fallback.components["done"], (told.components, fallback.components)
    assert told.rollouts["horizons"] != fallback.rollouts["horizons"]


def test_a_program_cannot_learn_from_the_batches_it_answered(sandbox, monkeypatch):
    """A program that pairs the i-th transition of one fed batch with the i-th of the next: in episode order that is
    the next state of an answered transition, and on CliffWalking, whose (state, action) pairs repeat across episodes,
    its table answers later transitions. Two rules of 13b stop it, each alone: the fed order (`fed_batches`) hides
    which transition continues which, and each pair is asked once (`asked_once`), so no pair in its table is asked
    again, however it was paired. With both, it scores exactly its fallback."""
    from cwm_nb.bench import program_runs
    buf = load_buffer("CliffWalking-v0")
    score = lambda src: evaluate_program(src, buf, sandbox=sandbox, determinism=True).components
    base = score(GRID_FALLBACK)
    assert score(PAIRS) == base
    every = lambda batches, inputs: (batches, np.arange(len(inputs["obs"])))   # each transition asked
    with monkeypatch.context() as m:
        m.setattr(program_runs, "fed_batches", program_runs.episode_batches)    # in episode order
        assert score(PAIRS) == base                                              # pairs asked once: nothing to reuse
        m.setattr(program_runs, "asked_once", every)
        assert score(PAIRS)["next_state"] > base["next_state"] + 0.3             # neither rule: the table pays
        assert score(GRID_FALLBACK) == base                                      # a pure program: the same scores
    with monkeypatch.context() as m:
        m.setattr(program_runs, "asked_once", every)
        assert score(PAIRS)["next_state"] <= base["next_state"]                  # the fed order alone


def test_a_dropped_buffer_is_not_inherited(sandbox, buffer, fallback):
    "A buffer once stored in the server (put_data) and dropped: jobs forked after the drop do not hold it."
    sandbox.put_data("dropped", sandbox_inputs(buffer))
    sandbox.drop_data("dropped")
    for name in FOUND_BY_HOLDING:
        assert _scores(evaluate_program(PROBES[name], buffer, sandbox=sandbox)) == _scores(fallback), name



def test_a_dropped_buffer_leaves_no_freed_floats_for_a_later_job(sandbox):
    """The whole CartPole buffer stored and dropped, as `time_cwm_transitions` does: its values stay in the server's
    freed memory, which every later job would inherit (a red team read 95% of them back, accuracy 0.91), so
    `drop_data` replaces the server. The `floats` probe then scores its fallback; forgetting the data in the old
    server alone lets it answer from the freed floats."""
    full = load_buffer("CartPole-v1")
    with Sandbox(LIMITS, isolation=sandbox.isolation) as sb:
        base = evaluate_program(FALLBACK, full, sandbox=sb)
        sb.put_data("timed", sandbox_inputs(full)); sb._data.pop("timed")
        sb._request(("drop", "timed"), 30)   # the server forgets it, and stays
        old = evaluate_program(PROBES["floats"], full, sandbox=sb)
        sb.put_data("timed", sandbox_inputs(full)); restarts = sb.restarts
        sb.drop_data("timed")
        assert sb.restarts == restarts + 1
        new = evaluate_program(PROBES["floats"], full, sandbox=sb)
    assert old.components["next_state"] > 0.5 and base.components["next_state"] == 0.0, (old.components, old.error)
    assert _scores(new) == _scores(base), new.error

# --- kernel objects that outlive a job: one job records, a later one reads -------------------------------------------

STORE = r'''
import ctypes, os, platform
import numpy as np
KEY, WHERE = %d, %r
NAME, CAP = b"/cwm-nb-%%d" %% KEY, 8192
_libc = ctypes.CDLL(None, use_errno=True)
_libc.shmat.restype, _libc.shmat.argtypes = ctypes.c_void_p, [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
_libc.syscall.restype = ctypes.c_long
_ADD_KEY, _REQUEST_KEY, _KEYCTL = {"x86_64": (248, 249, 250), "aarch64": (217, 218, 219)}[platform.machine()]
_NOWAIT = 0o4000 | 0o20000   # IPC_NOWAIT | MSG_NOERROR

def _key_id():
    return _libc.syscall(_REQUEST_KEY, b"user", NAME, None, ctypes.c_long(0))

def _save(blob):
    "Leave `blob` (at most CAP bytes) under KEY or NAME in WHERE, replacing what was there; nothing where refused."
    if WHERE == "shm":
        sid = _libc.shmget(KEY, CAP + 8, 0o1600)   # IPC_CREAT | 0600
        addr = _libc.shmat(sid, None, 0) if sid >= 0 else None
        if addr in (None, ctypes.c_void_p(-1).value): return
        ctypes.memmove(addr, len(blob).to_bytes(8, "little") + blob, 8 + len(blob)); _libc.shmdt(ctypes.c_void_p(addr))
    elif WHERE == "msg":
        qid, buf = _libc.msgget(KEY, 0o1600), ctypes.create_string_buffer(8 + CAP)
        if qid < 0: return
        while _libc.msgrcv(qid, buf, CAP, ctypes.c_long(0), _NOWAIT) >= 0: pass
        _libc.msgsnd(qid, (1).to_bytes(8, "little") + blob, len(blob), 0o4000)
    elif WHERE == "mq":
        q, buf = _libc.mq_open(NAME, os.O_CREAT | os.O_RDWR | os.O_NONBLOCK, ctypes.c_int(0o600), None), ctypes.create_string_buffer(CAP)
        if q < 0: return
        while _libc.mq_receive(q, buf, CAP, None) >= 0: pass
        _libc.mq_send(q, blob, len(blob), 0); os.close(q)
    elif WHERE == "key":   # the user key ring (KEY_SPEC_USER_KEYRING); adding again updates the key
        _libc.syscall(_ADD_KEY, b"user", NAME, blob, ctypes.c_long(len(blob)), ctypes.c_long(-4))

def _load():
    "What `_save` left, or b''."
    buf = ctypes.create_string_buffer(8 + CAP)
    if WHERE == "shm":
        sid = _libc.shmget(KEY, 0, 0)
        addr = _libc.shmat(sid, None, 0o10000) if sid >= 0 else None   # SHM_RDONLY
        if addr in (None, ctypes.c_void_p(-1).value): return b""
        n = int.from_bytes(ctypes.string_at(addr, 8), "little")
        return ctypes.string_at(addr + 8, min(n, CAP))
    if WHERE == "msg":
        qid = _libc.msgget(KEY, 0)
        n = _libc.msgrcv(qid, buf, CAP, ctypes.c_long(0), _NOWAIT) if qid >= 0 else -1
        return buf.raw[8:8 + n] if n > 0 else b""
    if WHERE == "mq":
        q = _libc.mq_open(NAME, os.O_RDONLY | os.O_NONBLOCK)
        n = _libc.mq_receive(q, buf, CAP, None) if q >= 0 else -1
        return buf.raw[:n] if n > 0 else b""
    kid = _key_id()
    n = _libc.syscall(_KEYCTL, 11, ctypes.c_long(kid), buf, ctypes.c_long(CAP)) if kid >= 0 else -1   # KEYCTL_READ
    return buf.raw[:n] if n > 0 else b""

def _clear():
    "Remove what `_save` left (a test's clean-up)."
    if WHERE == "shm": _libc.shmctl(_libc.shmget(KEY, 0, 0), 0, None)   # IPC_RMID
    elif WHERE == "msg": _libc.msgctl(_libc.msgget(KEY, 0), 0, None)
    elif WHERE == "mq": _libc.mq_unlink(NAME)
    elif _key_id() >= 0: _libc.syscall(_KEYCTL, 21, ctypes.c_long(_key_id()))   # KEYCTL_INVALIDATE
'''

RECORDER = STORE + r'''
_rows = None
class Environment:
    "The fallback's answers; every state it is handed is added to the store."
    def set_state(self, s):
        global _rows
        self.s = np.asarray(s, dtype=np.float32)
        if _rows is None: b = _load(); _rows = dict.fromkeys(b[i:i + 16] for i in range(0, len(b) - 15, 16))
        if len(_rows) < CAP // 16: _rows[self.s.tobytes()] = None; _save(b"".join(_rows))
    def step(self, a): return self.s.copy(), 1.0, False
'''

READER = STORE + r'''
TAU, _rows = 0.02, None
def _successor(s):
    "A stored state that CartPole's Euler step could lead to from `s`, else None."
    global _rows
    if _rows is None: b = _load(); _rows = np.frombuffer(b[:len(b) // 16 * 16], np.float32).reshape(-1, 4).astype(np.float64)
    s, r = np.asarray(s, np.float64), _rows
    ok = (np.abs(r[:, 0] - (s[0] + TAU * s[1])) < 1e-5) & (np.abs(r[:, 2] - (s[2] + TAU * s[3])) < 1e-5) & ~(r == s).all(1)
    i = np.flatnonzero(ok)
    return r[i[0]].astype(np.float32) if len(i) else None
class Environment:
    "The fallback's answers, unless the store holds the state logged after the given one."
    def set_state(self, s): self.s = np.asarray(s, dtype=np.float32)
    def step(self, a):
        n = _successor(self.s)
        return (self.s.copy() if n is None else n), 1.0, False
'''

KERNEL_STORES = ("shm", "msg", "mq", "key")   # System V shared memory and message queues, POSIX queues, key rings


def _store_key(where: str) -> int:
    return 0x43560000 + (os.getpid() * 8 + KERNEL_STORES.index(where)) % 0xFFFF


def _clear_store(where: str, key: int) -> None:
    ns = {}
    exec(STORE % (key, where), ns)
    ns["_clear"]()


@pytest.mark.parametrize("where", KERNEL_STORES)
def test_recorder_and_reader_carry_successors_where_the_kernel_lets_them(buffer, where):
    """The control, in this process, unconfined: states the recorder was handed are read back by the reader, which then
    answers each with its logged successor. (What the sandboxed test below must stop.)"""
    key = _store_key(where)
    rec, rdr = {}, {}
    try:
        exec(RECORDER % (key, where), rec)
        env = rec["Environment"]()
        for s in list(buffer.obs) + list(buffer.next_obs): env.set_state(s)
        exec(READER % (key, where), rdr)
        env, hits = rdr["Environment"](), 0
        for s, n in zip(buffer.obs, buffer.next_obs):
            env.set_state(s); hits += bool(np.array_equal(env.step(0)[0], np.asarray(n, np.float32)))
    finally: _clear_store(where, key)
    assert hits >= len(buffer) - len(buffer.episode_bounds()), (hits, len(buffer))


@pytest.mark.parametrize("where", KERNEL_STORES)
def test_a_recorder_leaves_nothing_for_a_later_reader(sandbox, buffer, fallback, where):
    """One program records every state it is handed in a kernel object that would outlive its job; a second, evaluated
    next on the same buffer, looks each state's successor up there. It scores exactly what the fallback scores, and
    so does the recorder: no job can make such an object (02a_landlock, 02d_fork_server)."""
    key = _store_key(where)
    try:
        rec = evaluate_program(RECORDER % (key, where), buffer, sandbox=sandbox, determinism=True, rollouts=True)
        rdr = evaluate_program(READER % (key, where), buffer, sandbox=sandbox, determinism=True, rollouts=True)
    finally: _clear_store(where, key)   # landlock mode shares this process's IPC namespace
    for ev in (rec, rdr):
        assert _scores(ev) == _scores(fallback), ev.error
        assert ev.rollouts["horizons"] == fallback.rollouts["horizons"]


# --- APPS: the expected outputs never reach the job ------------------------------------------------------------------

APPS_PROBE = r'''
import gc, sys

def _tests_in(o):
    "(inputs, outputs) lists held by `o` (an AppsProblem, an AppsEvaluation, a dict of them), else None."
    try:
        d = o if type(o) is dict else getattr(o, "__dict__", None)
        if type(d) is not dict: return None
        ins = d.get("inputs")
        outs = d.get("outputs", d.get("expected"))
    except Exception: return None
    if type(ins) is list and type(outs) is list and len(ins) == len(outs): return ins, outs
    return None

def find(given):
    "The expected output of the test whose input is `given`, from anything in this process, else None."
    gc.unfreeze()
    places = list(gc.get_objects())
    fr = sys._getframe(0)
    while fr is not None: places += list(fr.f_locals.values()); fr = fr.f_back
    for m in list(sys.modules.values()): places += list(getattr(m, "__dict__", {}).values())
    for o in places:
        t = _tests_in(o)
        if t is not None and given in t[0]: return t[1][t[0].index(given)]
    return None

if SEARCH:
    out = find(sys.stdin.read())
    if out is not None: print(out, end="")
'''


def test_an_apps_program_cannot_find_the_expected_outputs(sandbox):
    "The APPS job gets the inputs only: a program searching for the outputs passes what printing nothing passes."
    from cwm_nb.apps.harness import evaluate_solution
    from cwm_nb.apps.problems import demo_problems
    p = next(q for q in demo_problems() if q.kind == "stdin")
    ns = {"SEARCH": False}
    exec(APPS_PROBE, ns)
    assert ns["find"](p.inputs[0]) == p.outputs[0]   # where the problem is held (here), the probe finds the answer
    probe = evaluate_solution("SEARCH = True\n" + APPS_PROBE, p, sandbox=sandbox)
    base = evaluate_solution("SEARCH = False\n" + APPS_PROBE, p, sandbox=sandbox)
    assert [t.passed for t in probe.tests] == [t.passed for t in base.tests] == [False] * p.n_tests
    assert [t.output for t in probe.tests] == [""] * p.n_tests


def test_the_mem_probe_reads_pickled_rows_from_memory(buffer):
    "Where a pickled buffer lies in a process's memory (here: this one), the `mem` probe finds every successor."
    import pickle
    blob = pickle.dumps(sandbox_inputs(buffer), protocol=5)
    ns = {}
    exec(PROBES["mem"], ns)
    finder = ns["_Finder"]()
    ns["search"](finder)
    assert len(finder.next) >= len(buffer) - len(buffer.episode_bounds()) and blob


DRIVER_SWAP = '''
import cwm_nb.sandbox.drivers as d
d.cwm_predict = lambda *a, **k: {"predictions": [[[0.0] * 4, 1.0, False]] * 1000, "malformed": [["x"], [10 ** 6, "done", "?"]],
                                 "distributions": "none"}
d._rollout_step = lambda *a, **k: {"predictions": "x", "malformed": None, "failed": [[0], ["a", "b"], 7]}
class Environment:
    def set_state(self, s): pass
    def step(self, a): return [0.0] * 4, 1.0, False
'''


def test_a_program_that_replaces_the_driver_gets_a_score(sandbox, buffer):
    "The driver runs in the program's process: a program may replace it. Its answers are checked, not trusted."
    ev = evaluate_program(DRIVER_SWAP, buffer, sandbox=sandbox, rollouts=True)
    assert not ev.bug and ev.components["next_state"] == 0.0, ev.error
    assert ev.rollouts["n_rollouts"] == len(buffer.episode_bounds()) and ev.rollouts["horizons"]["1"]["alive"] == 0.0


# --- WorldCoder: the logged outcomes never share a job with the steps they answer -----------------------------------

class _ItemsSeen:
    "A sandbox that records the items of every prediction job it runs (the real one runs them)."
    def __init__(self, sb): self.sb, self.jobs = sb, []
    def run(self, source, driver, args=None, **kw):
        self.jobs.append([it[0] for it in args["items"]]); return self.sb.run(source, driver, args, **kw)


def _minigrid_agent():
    "A stand-in WorldCoder agent with no logged steps, and its environment, MiniGrid-Empty-5x5."
    from cwm_nb.agent.minigrid import MINIGRID_ENTITY_NAMES
    from cwm_nb.agent.oo_state import entity_api_source
    from cwm_nb.agent.worldcoder import DOMAINS, AgentConfig, Evaluator, ReplayData, make_env
    from cwm_nb.testing.doubles import AgentDouble
    api = entity_api_source(MINIGRID_ENTITY_NAMES)
    return (AgentDouble(DOMAINS["minigrid"], AgentConfig(), api, api, ReplayData(), evaluator=Evaluator),
            make_env(DOMAINS["minigrid"], "MiniGrid-Empty-5x5-v0"))


def test_the_agent_never_sends_a_step_with_its_outcome(sandbox):
    "The WorldCoder evaluator's jobs: no step's next state, nor a later state of its chain, in the job that asks it."
    from cwm_nb.core import data_dir
    from cwm_nb.agent.worldcoder import transition_levels
    ag, env = _minigrid_agent()
    s, _ = env.reset(seed=0)
    for a in ("turn left", "move forward", "turn right", "move forward", "move forward"):
        n, r, t, *_ = env.step(a); ag.data.add_step(s, a, r, n, t, "get to the green goal square"); s = n
    ag.sandbox = seen = _ItemsSeen(sandbox)
    src = (data_dir()/"programs"/"worldcoder"/"minigrid_transition_0.py").read_text()
    assert [ok for ok, _, _ in ag.evaluator.transition(src, range(5))] == [True, False, True, True, True]
    steps, states = ag.data.steps, ag.data.states
    groups = transition_levels(ag.data, range(len(steps)))
    where = {i: g for g, group in enumerate(groups) for i in group}
    for j, x in enumerate(steps):   # a step whose state an earlier step led to is asked after it
        assert all(where[j] > where[i] for i in range(j) if steps[i]["s2"] == x["s"]), (j, groups)
    assert seen.jobs == [[states[steps[i]["s"]] for i in g] for g in groups]   # one job per group, in order
    assert len(groups) == len(steps)   # one chain: one step per job


def _held(data, groups) -> list:
    """(group, i, j): step j's input, in step i's group, is i's next state or a state logged after that one (from
    s_t and s_t+2 a program recovers s_t+1); a state equal to i's own input tells i nothing and is not counted."""
    st, succ = data.steps, {}
    for x in st: succ.setdefault(x["s"], set()).add(x["s2"])
    later = [({x["s2"]} | succ.get(x["s2"], set())) - {x["s"]} for x in st]
    return [(g, i, j) for g, group in enumerate(groups) for i in group for j in group
            if j != i and st[j]["s"] in later[i]]


def test_no_job_holds_a_later_state_of_a_grouped_steps_chain():
    """`transition_levels` whatever order the steps were logged in and whatever cycles their states make: by hand,
    a step logged later that leads into the state of a step at its level; then seeded random walks on small cyclic
    state graphs, all their steps and shuffled subsets. Every step once, in the order of `idx` within its group, after
    the earlier-logged steps that lead to its state, and no group holds another's next state or the state after it."""
    from cwm_nb.agent.worldcoder import ReplayData, transition_levels
    def logged(steps):
        return ReplayData.from_dict(dict(states={}, starts=[], steps=[
            dict(s=s, a=a, r=0.0, s2=s2, d=False, goal="g") for s, a, s2 in steps]))
    later = logged([("A", 0, "B"), ("C", 0, "A")])   # both at level 0: nothing led to A when step 0 was logged
    assert transition_levels(later, [0, 1]) == [[0], [1]]
    rng, n_groups, n_steps = random.Random(0), 0, 0
    for _ in range(100):
        n = rng.randint(3, 8)   # states; two actions each, a random next state: cycles and self-loops
        nxt = {(s, a): rng.randrange(n) for s in range(n) for a in (0, 1)}
        walked = {}
        for _ in range(rng.randint(1, 6)):
            s = rng.randrange(n)
            for _ in range(rng.randint(1, 10)):
                a = rng.randrange(2)
                walked.setdefault((str(s), a, str(nxt[s, a])), None); s = nxt[s, a]
        data = logged(walked)   # deduplicated, in the order first logged, as ReplayData.add_step keeps them
        every = list(range(len(data.steps)))
        for idx in (every, rng.sample(every, rng.randint(1, len(every)))):
            groups = transition_levels(data, idx)
            assert sorted(i for g in groups for i in g) == sorted(idx) and all(groups), groups
            assert all(g == [i for i in idx if i in g] for g in groups), (idx, groups)
            where = {i: k for k, g in enumerate(groups) for i in g}
            assert all(where[i] < where[j] for i in idx for j in idx
                       if i < j and data.steps[i]["s2"] == data.steps[j]["s"]), groups
            assert not _held(data, groups), (data.steps, groups, _held(data, groups))
        n_groups, n_steps = n_groups + len(transition_levels(data, every)), n_steps + len(every)
    assert n_groups < n_steps   # steps do share jobs


NEIGHBOUR = r"""
import sys
def _items():
    f = sys._getframe()
    while f is not None:
        a = f.f_locals.get("args")
        if type(a) is dict and type(a.get("items")) is list: return a["items"]
        f = f.f_back
    return []

def _agent(plain):
    return next((d for d in plain if d.get("name") == "Agent"), None)

def transition(state, action):
    "Another state of the job that differs from the input in the agent's position (forward) or direction alone."
    me = state_to_plain(state)
    a0 = _agent(me)
    rest0 = sorted(repr(d) for d in me if d is not a0)
    keys = ("x", "y") if action == "move forward" else ("direction",)
    for it in _items():
        other = it[0]
        a1 = _agent(other)
        if a1 is None or a0 is None or sorted(repr(d) for d in other if d is not a1) != rest0: continue
        diff = {k for k in set(a0) | set(a1) if a0.get(k) != a1.get(k)}
        if diff and diff <= set(keys): return state_from_plain(other)
    return list(state)
"""
IDENTITY = "def transition(state, action):\n    return list(state)\n"


def test_a_transition_program_finds_no_outcome_in_its_job(sandbox):
    """A red team's probe: a transition program that answers with another state its job holds (read from the
    driver's `args["items"]`) that differs from its input in the agent's position or direction alone, else with its
    input (the fallback, `IDENTITY`). On 30 random episodes of Empty-5x5 it is right on steps where the identity is
    wrong when one job holds every step, and on none through the evaluator (4 of 77 with the old grouping)."""
    from cwm_nb.agent.planning import predict_steps
    ag, env = _minigrid_agent()
    rng = random.Random(0)
    for ep in range(30):
        s, _ = env.reset(seed=ep)
        for _ in range(15):
            a = rng.choice(["turn left", "turn right", "move forward"])
            n, r, term, trunc, *_ = env.step(a)
            ag.data.add_step(s, a, r, n, term, "get to the green goal square"); s = n
            if term or trunc: break
    ag.sandbox, steps = sandbox, ag.data.steps
    one_job = predict_steps(ag.api, [(ag.data.states[x["s"]], x["a"]) for x in steps], "transition",
                            transition=NEIGHBOUR, sandbox=sandbox)
    base = [ok for ok, _, _ in ag.evaluator.transition(IDENTITY, range(len(steps)))]
    found = [ag.evaluator._check_next(o, i)[0] and not base[i] for i, o in enumerate(one_job)]
    assert sum(found) >= 10, sum(found)   # the probe works where a job holds the outcomes
    probe = [ok for ok, _, _ in ag.evaluator.transition(NEIGHBOUR, range(len(steps)))]
    assert [i for i, ok in enumerate(probe) if ok and not base[i]] == [], (sum(probe), sum(base))


# --- Planning: the model side cannot answer for the planner -----------------------------------------------------------

SEES_REGION = r'''
import ctypes, mmap, sys
import numpy as np

def _region():
    "The job's mapping of the session's shared region (the `shared` local of the job runner's frame), or None."
    f = sys._getframe()
    while f is not None:
        v = f.f_locals.get("shared")
        if isinstance(v, mmap.mmap): return v
        f = f.f_back
    return None

def _mapped(m) -> bool:
    "Whether `m`'s memory is mapped in this process (madvise fails with ENOMEM where it is not; nothing is read)."
    at = ctypes.addressof(ctypes.c_char.from_buffer(m))
    return ctypes.CDLL(None).madvise(ctypes.c_void_p(at), ctypes.c_size_t(len(m)), 0) == 0

M = _region()
HAS = M is not None and _mapped(M)   # where a job's answers go: the answers area of this region

def has_region(): return HAS

class Environment:
    def set_state(self, s): self.s = np.asarray(s, dtype=np.float32)
    def step(self, a):   # rewards action 0 where the region is mapped, action 1 where it is not
        return self.s.copy(), float(int(a) == (0 if HAS else 1)), False
'''


def test_a_planners_model_side_has_no_shared_region(sandbox):
    """The model side of a planning session runs the program; it must not hold the session's shared region, where it
    could write the planner's answer itself. A direct session's own job holds it (the probe can see it there)."""
    from dataclasses import asdict
    from cwm_nb.bench.planning import MCTSConfig
    first, s = sandbox.open_session(SEES_REGION, "cwm_nb.sandbox.programs:function_session", poll=True)
    with s:
        assert s.direct and s._shm is not None
        assert s.call({"name": "has_region", "args": []}).value is True   # the job itself answers through it
    static = {"planner": "mcts", "config": asdict(MCTSConfig(simulations=16, rollout_steps=0)), "obs_format": "array",
              "space": {"kind": "discrete", "n": 2}, "valid_actions": False, "session": True, "decision_cpu_s": 30}
    first, s = sandbox.open_session(SEES_REGION, "cwm_nb.bench.plan_driver:plan_driver", args=static, poll=True)
    assert s is not None, first.error
    with s:
        r = s.call({"state": [0.0, 0.0, 0.0, 0.0], "obs_dtype": "<f4", "root_actions": None, "seed": 0})
    assert r.ok, r.error
    assert r.value["action"] == 1   # the model side rewarded action 1: the region is not mapped there


UNNORMALISED = r'''
import numpy as np
import cwm_nb.sandbox.drivers as _d
_d.check_distribution = lambda out: [tuple(e) for e in out]   # the driver runs here: the program switches its check off
P = %s
class Environment:
    def set_state(self, s): self.s = np.asarray(s, dtype=np.float32)
    def step(self, a): return self.s.copy(), 1.0, False
    def step_distribution(self, a):
        return [(P, self.s.copy(), 1.0, False), (P, self.s.copy(), 1.0, True)]
'''


def test_probabilities_that_sum_past_one_earn_nothing(sandbox, buffer):
    "A program that disables the driver's check and puts 1 on each of two outcomes scores no outcome probability."
    hedge = evaluate_program(UNNORMALISED % "0.5", buffer, sandbox=sandbox)
    cheat = evaluate_program(UNNORMALISED % "1.0", buffer, sandbox=sandbox)
    assert hedge.outcome_probability > 0.0, hedge.error   # the legal hedge is counted
    assert cheat.outcome_probability == 0.0 and cheat.outcome_probability < hedge.outcome_probability


def test_the_simulator_probe_answers_with_the_real_environment(buffer):
    "Where a job may import gymnasium (isolation `none`), the probe answers every transition as the log does."
    with Sandbox(LIMITS, isolation="none") as sb:
        ev = evaluate_program(SIMULATOR, buffer, sandbox=sb)
    assert ev.components["next_state"] > 0.99 and ev.accuracy > 0.99, ev.error


def test_a_program_cannot_run_the_real_simulator(sandbox, buffer, fallback):
    "In either mode the import fails, so the probe scores what its fallback scores, determinism and rollouts included."
    ev = evaluate_program(SIMULATOR, buffer, sandbox=sandbox, determinism=True, rollouts=True)
    assert _scores(ev) == _scores(fallback), ev.error
