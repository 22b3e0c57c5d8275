"The GIF-MCTS paper's replay buffers: restricted unpickling, conversion to ReplayBuffer, labels, and scoring on them."
import collections
import hashlib
import os
import pickle
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cwm_nb.core import CwmNbError
from cwm_nb.bench.cwm import evaluate_program
from cwm_nb.bench.paper_pickles import ALLOWED_GLOBALS, PAPER_BUFFERS_ENV_VAR, paper_buffers_dir, paper_env_name, read_paper_pickle
from cwm_nb.bench.paper_buffers import load_paper_buffer
from cwm_nb.bench.replay import ReplayBuffer, load_buffer

RTFM_CWM = Path(__file__).resolve().parents[1]/"data"/"programs"/"rtfm.py"   # the shipped reference CWM
CARTPOLE_CWM = Path(__file__).resolve().parents[1]/"data"/"programs"/"CartPole-v1.py"   # the shipped reference CWM

# transitions / episodes per file of the paper's released buffers, plus what our labelling rule gives
# (terminated, truncated, episodes ended by the collector without done) and the observation layout.
EXPECTED = {
    "Acrobot-v1": (4521, 10, 5, 5, 0, "array", "<f4", (6,)),
    "Ant-v4": (20, 2, 0, 0, 2, "array", "<f8", (27,)),
    "Blackjack-v1": (15, 10, 10, 0, 0, "tuple", "<i8", (3,)),
    "CartPole-v1": (402, 10, 10, 0, 0, "array", "<f4", (4,)),
    "CliffWalking-v0": (877, 10, 5, 0, 5, "int", "<i8", ()),
    "HalfCheetah-v4": (1000, 10, 0, 0, 10, "array", "<f8", (17,)),
    "Hopper-v4": (972, 10, 8, 0, 2, "array", "<f8", (11,)),
    "InvertedDoublePendulum-v4": (210, 10, 10, 0, 0, "array", "<f8", (11,)),
    "InvertedPendulum-v4": (381, 10, 10, 0, 0, "array", "<f8", (4,)),
    "MountainCar-v0": (1777, 10, 5, 5, 0, "array", "<f4", (2,)),
    "Pendulum-v1": (1000, 10, 0, 0, 10, "array", "<f4", (3,)),
    "Pusher-v4": (1000, 10, 0, 10, 0, "array", "<f8", (23,)),
    "Reacher-v4": (500, 10, 0, 10, 0, "array", "<f8", (11,)),
    "Swimmer-v4": (1000, 10, 0, 0, 10, "array", "<f8", (8,)),
    "Taxi-v3": (1574, 10, 5, 5, 0, "int", "<i8", ()),
    "Walker2d-v4": (969, 10, 5, 0, 5, "array", "<f8", (17,)),
    "rtfm-simple_stationary": (999, 57, 56, 0, 1, "rtfm", "<U", (73,)),
}


@pytest.fixture(scope="module")
def paper_dir():
    try:
        return paper_buffers_dir()
    except CwmNbError:
        pytest.skip("the paper's buffers are not here (set $CWM_NB_PAPER_BUFFERS to their folder)")


def _file(paper_dir, stem):
    p = paper_dir / f"{stem}.pkl"
    if not p.is_file():
        pytest.skip(f"{p.name} is not in {paper_dir}")
    return p


def test_paper_buffers_dir_honours_the_environment_variable(tmp_path, monkeypatch):
    monkeypatch.setenv(PAPER_BUFFERS_ENV_VAR, str(tmp_path))
    assert paper_buffers_dir() == tmp_path
    monkeypatch.setenv(PAPER_BUFFERS_ENV_VAR, str(tmp_path / "missing"))
    with pytest.raises(CwmNbError, match="does not exist") as e:
        paper_buffers_dir()
    assert PAPER_BUFFERS_ENV_VAR in str(e.value)


def test_the_folder_holds_the_seventeen_files(paper_dir):
    assert sorted(p.stem for p in paper_dir.glob("*.pkl")) == sorted(EXPECTED)


@pytest.mark.parametrize("stem", sorted(EXPECTED))
def test_every_paper_buffer_loads_with_the_published_counts(paper_dir, stem):
    path = _file(paper_dir, stem)
    n, n_eps, n_term, n_trunc, n_cut, fmt, dtype, shape = EXPECTED[stem]
    buf = load_paper_buffer(path)
    raw = read_paper_pickle(path)
    assert isinstance(buf, ReplayBuffer) and buf.meta["env"] == paper_env_name(path)
    assert (len(buf), len(buf.episode_bounds())) == (n, n_eps)
    assert (int(buf.terminated.sum()), int(buf.truncated.sum())) == (n_term, n_trunc)
    ends = collections.Counter(e["end"] for e in buf.meta["episodes"])
    assert ends["cut"] == n_cut and sum(ends.values()) == n_eps
    assert buf.meta["obs_format"] == fmt and buf.obs.shape[1:] == shape and buf.next_obs.shape == buf.obs.shape
    assert buf.obs.dtype.str.startswith(dtype)
    # the paper's done is exactly terminated | truncated, and the rewards are the stored float32 values
    assert np.array_equal(buf.done, raw["dones"][:n])
    assert buf.rewards.dtype == np.float64 and np.array_equal(buf.rewards.astype(np.float32), raw["rewards"][:n])
    assert np.array_equal(buf.rewards, raw["rewards"][:n].astype(np.float64))
    assert buf.meta["labels"]["unexplained_done"] == 0 and buf.meta["labels"]["test_disagrees"] in (0, None)
    assert buf.meta["done_merged"] is True and buf.meta["source_file"] == path.name
    assert buf.meta["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    # observations are the stored values, in the stored order
    if fmt == "array":
        assert np.array_equal(buf.obs, np.stack(raw["obs"])) and np.array_equal(buf.next_obs[-1], raw["next_obs"][-1])
    elif fmt == "int":
        assert buf.obs.tolist() == [int(o) for o in raw["obs"]]
    elif fmt == "tuple":
        assert [tuple(r) for r in buf.obs.tolist()] == raw["obs"]
    # episodes from traj_starts
    starts = sorted(set(raw["traj_starts"][:n].tolist()))
    assert [a for a, _ in buf.episode_bounds()] == starts


def test_discrete_buffers_match_the_spec(paper_dir):
    cliff = load_paper_buffer(_file(paper_dir, "CliffWalking-v0"))
    # 5 random episodes of 100 steps that never end, then 5 that reach the goal in 44-99 steps
    assert cliff.episode_lengths()[:5] == [100] * 5 and all(44 <= k <= 99 for k in cliff.episode_lengths()[5:])
    assert min(cliff.episode_returns()[:5]) == -1486 and max(cliff.episode_returns()[:5]) == -298
    assert cliff.next_obs[cliff.terminated].tolist() == [47] * 5
    taxi = load_paper_buffer(_file(paper_dir, "Taxi-v3"))
    assert taxi.episode_lengths()[:5] == [200] * 5 and taxi.truncated.sum() == 5
    assert taxi.rewards[taxi.terminated].tolist() == [20.0] * 5
    car = load_paper_buffer(_file(paper_dir, "MountainCar-v0"))
    assert all(144 <= k <= 167 for k in car.episode_lengths()[:5]) and car.episode_lengths()[5:] == [200] * 5
    jack = load_paper_buffer(_file(paper_dir, "Blackjack-v1"))
    assert jack.obs.dtype == np.int64 and jack.obs[0].tolist() == [21, 5, 1]
    assert collections.Counter(jack.rewards[jack.done].tolist()) == {1.0: 3, -1.0: 4, 0.0: 3}
    assert load_paper_buffer(_file(paper_dir, "Ant-v4")).meta["action_space"]["shape"] == [8]
    assert load_paper_buffer(_file(paper_dir, "CartPole-v1")).meta["action_space"] == {"type": "Discrete", "n": 2, "start": 0}


def test_rtfm_buffer(paper_dir):
    path = _file(paper_dir, "rtfm-simple_stationary")
    buf = load_paper_buffer(path)
    assert buf.meta["env"] == "rtfm" and buf.meta["valid_actions"] is True
    assert collections.Counter(buf.rewards.tolist()) == {0.0: 943, -1.0: 49, 1.0: 7}
    assert buf.obs.shape == (999, 73) and buf.obs.dtype.kind == "U"
    assert buf.next_valid_actions.shape == (999, 5) and buf.next_valid_actions.dtype == bool
    assert buf.next_valid_actions[:, 0].all()          # Stay is always valid
    assert 100 in buf.episode_lengths()                 # the one episode cut at the collector's 100 steps
    raw = read_paper_pickle(path)
    board, inventory = raw["obs"][0]
    assert buf.obs[0].tolist() == [*board.reshape(-1).tolist(), inventory]
    rtfm = pytest.importorskip("cwm_nb.bench.rtfm_env")   # the rules (valid_actions) live beside the env
    n_alive = 0
    for i in range(len(buf)):
        obs = rtfm.rtfm_row_to_obs(buf.next_obs[i])
        assert buf.obs[i].tolist() == rtfm.rtfm_obs_to_row(raw["obs"][i])
        if rtfm.agent_position(obs[0]) is not None:   # the stored masks are those of the next boards
            n_alive += 1
            assert np.flatnonzero(buf.next_valid_actions[i]).tolist() == rtfm.valid_actions(obs).tolist()
        else:
            assert buf.next_valid_actions[i].all() and buf.terminated[i]
    assert n_alive == 959


def test_env_name_is_checked(paper_dir, tmp_path):
    taxi = _file(paper_dir, "Taxi-v3")
    with pytest.raises(CwmNbError, match="not of 'CartPole-v1'") as e:
        load_paper_buffer(taxi, "CartPole-v1")
    assert e.value.todo.startswith("pass --buffer with the paper's CartPole-v1.pkl, or run with --env Taxi-v3")
    with pytest.raises(CwmNbError, match="rtfm-simple_stationary.pkl"):
        load_paper_buffer(taxi, "rtfm")
    renamed = tmp_path / "buffer.pkl"
    renamed.write_bytes(taxi.read_bytes())
    with pytest.raises(CwmNbError, match="pass env_name") as e:
        load_paper_buffer(renamed)
    assert e.value.todo.index("--env") < e.value.todo.index("env_name=")
    assert len(load_paper_buffer(renamed, "Taxi-v3")) == 1574
    with pytest.raises(CwmNbError, match="expected form") as e:      # a Taxi file read as CartPole: ints, not arrays
        load_paper_buffer(renamed, "CartPole-v1")
    assert e.value.todo.startswith("pass --buffer with one of the GIF-MCTS paper's released pickles")


def test_loading_imports_neither_torch_nor_gymnasium(paper_dir):
    path = _file(paper_dir, "CartPole-v1")
    code = ("import sys\nfrom cwm_nb.bench.paper_buffers import load_paper_buffer\n"
            f"b = load_paper_buffer({str(path)!r})\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'gymnasium'))\n"
            "assert len(b) == 402 and not bad, bad\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_load_buffer_delegates_pickles(paper_dir):
    path = _file(paper_dir, "CartPole-v1")
    assert load_buffer("CartPole-v1", path).same_transitions(load_paper_buffer(path))


# ---- hostile pickles: refused by name, nothing executed --------------------------------------------------------

class _Reduce:
    def __init__(self, fn, args): self.fn, self.args = fn, args
    def __reduce__(self): return (self.fn, self.args)


def _hostile(tmp_path):
    marker = tmp_path / "pwned"
    yield "posix.system", pickle.dumps({"obs": [_Reduce(os.system, (f"touch {marker}",))], "idx": 1})
    yield "builtins.exec", pickle.dumps([_Reduce(exec, (f"open({str(marker)!r}, 'w').write('x')",))])
    yield "builtins.getattr", pickle.dumps(_Reduce(getattr, (_Reduce(os.system, ("true",)), "x")))
    yield "torch.load", b"\x80\x02ctorch\nload\nq\x00X\x08\x00\x00\x00model.ptq\x01\x85q\x02Rq\x03."
    yield "subprocess.Popen", pickle.dumps(_Reduce(subprocess.Popen, (["touch", str(marker)],)), protocol=4)
    # an allowed stand-in used as a vehicle: its argument is a disallowed global
    yield "posix.system", b"\x80\x02ctorch\ndevice\ncposix\nsystem\n\x85R."


def test_hostile_pickles_are_refused_without_running_anything(tmp_path):
    marker = tmp_path / "pwned"
    for name, blob in _hostile(tmp_path):
        p = tmp_path / "hostile.pkl"
        p.write_bytes(blob)
        with pytest.raises(CwmNbError, match="not on the allow-list") as e:
            read_paper_pickle(p)
        assert name in str(e.value), (name, str(e.value))
        with pytest.raises(CwmNbError):
            load_paper_buffer(p, "CartPole-v1")
        assert not marker.exists(), name
    assert "torch.load" not in {".".join(k) for k in ALLOWED_GLOBALS}


def test_memory_bombs_are_refused(tmp_path):
    p = tmp_path / "bomb.pkl"
    # a memo index of four billion: CPython's unpickler would size its memo table to it
    p.write_bytes(b"\x80\x04N" + b"r" + struct.pack("<I", 0xFFFFFFF0) + b".")
    with pytest.raises(CwmNbError, match="memory bomb"):
        read_paper_pickle(p)
    p.write_bytes(b"\x80\x02Np4000000000\n.")                      # the same with the text opcode PUT
    with pytest.raises(CwmNbError, match="memory bomb"):
        read_paper_pickle(p)
    # an array record that claims 2**40 elements but holds 8 bytes
    p.write_bytes(b"\x80\x02cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85C\x01b\x87R"
                  b"(K\x01\x8a\x06\x00\x00\x00\x00\x00\x01\x85cnumpy\ndtype\nX\x02\x00\x00\x00f8\x89\x88\x87R"
                  b"\x89C\x08\x00\x00\x00\x00\x00\x00\x00\x00tb.")
    with pytest.raises(CwmNbError, match="max_array_bytes"):
        read_paper_pickle(p)
    with pytest.raises(CwmNbError, match="needs 8796093022208 bytes"):
        read_paper_pickle(p, max_array_bytes=1 << 62)
    # 1000 array records sharing one 1 MB bytes object through the memo: 1 GB once materialized
    class Shared:
        def __init__(self, data): self.data = data
        def __reduce__(self):
            return (np._core.multiarray._reconstruct, (np.ndarray, (0,), b"b"),
                    (1, (len(self.data),), np.dtype("u1"), False, self.data))
    data = bytes(1 << 20)
    p.write_bytes(pickle.dumps([Shared(data) for _ in range(1000)], protocol=4))
    assert p.stat().st_size < 2 << 20
    with pytest.raises(CwmNbError, match="max_array_bytes"):
        read_paper_pickle(p)
    assert len(read_paper_pickle(p, max_array_bytes=1 << 31)) == 1000
    # trailing bytes, truncation, oversize
    p.write_bytes(pickle.dumps([1, 2]) + b"junk")
    with pytest.raises(CwmNbError, match="follow the pickle's STOP"):
        read_paper_pickle(p)
    p.write_bytes(pickle.dumps(list(range(100)))[:-5])
    with pytest.raises(CwmNbError, match="not a valid pickle"):
        read_paper_pickle(p)
    with pytest.raises(CwmNbError, match="max_file_bytes"):
        read_paper_pickle(p, max_file_bytes=10)


def test_numpy_values_are_built_by_our_code(tmp_path):
    "Arrays, scalars and object arrays come back as real numpy values; unusual dtypes are refused."
    p = tmp_path / "ok.pkl"
    p.write_bytes(pickle.dumps({"a": np.arange(3, dtype=np.int32), "s": np.float32(1.5), "o": np.array(["x", 1], dtype=object),
                                "f": np.asfortranarray(np.arange(6.).reshape(2, 3))}))
    out = read_paper_pickle(p)
    assert out["a"].dtype == np.int32 and out["a"].tolist() == [0, 1, 2] and out["a"].flags.writeable
    assert type(out["s"]) is np.float32 and out["s"] == 1.5
    assert out["o"].dtype == object and out["o"].tolist() == ["x", 1]
    assert out["f"].tolist() == [[0., 1., 2.], [3., 4., 5.]]
    p.write_bytes(pickle.dumps(np.zeros(2, dtype=[("x", "f8")])))
    with pytest.raises(CwmNbError, match="dtype"):
        read_paper_pickle(p)
    p.write_bytes(pickle.dumps({np.float64(1.0): 1}))           # a numpy scalar key is rebuilt as a key
    assert read_paper_pickle(p) == {1.0: 1}
    p.write_bytes(b"\x80\x03}" + pickle.dumps(np.zeros(1), protocol=3)[2:-1] + b"K\x01s.")   # an array as a dict key
    with pytest.raises(CwmNbError, match="cannot be rebuilt"):
        read_paper_pickle(p)


# ---- scoring on the paper's buffers -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sandbox():
    from cwm_nb.sandbox.jobs import Sandbox
    with Sandbox() as sb:
        yield sb


def test_correct_cartpole_program_is_perfect_on_the_papers_buffer_and_ours(paper_dir, sandbox):
    src = CARTPOLE_CWM.read_text()
    paper = load_paper_buffer(_file(paper_dir, "CartPole-v1"))
    ours = load_buffer("CartPole-v1")
    for buf in (paper, ours):
        for compat in (False, True):
            ev = evaluate_program(src, buf, sandbox=sandbox, paper_compat=compat)
            assert not ev.bug, ev.error
            assert ev.accuracy == 1.0 and ev.perfect and ev.failures == [], (buf.meta["env"], compat, ev.failures[:1])
    broken = evaluate_program(src.replace("12 * 2", "15 * 2"), paper, sandbox=sandbox)
    assert not broken.perfect and broken.failures[0]["wrong"] == ["done"]


def test_correct_rtfm_program_is_perfect_on_the_papers_buffer(paper_dir, sandbox):
    buf = load_paper_buffer(_file(paper_dir, "rtfm-simple_stationary"))
    for compat in (False, True):
        ev = evaluate_program(RTFM_CWM.read_text(), buf, sandbox=sandbox, paper_compat=compat)
        assert not ev.bug, ev.error
        assert ev.perfect and ev.components == {"next_state": 1.0, "reward": 1.0, "done": 1.0, "valid_actions": 1.0}
