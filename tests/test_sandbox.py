"""Integration tests of cwm_nb.sandbox.jobs: hostile programs against a real fork server in each isolation mode this
machine can run: bubblewrap, Landlock + seccomp, and `none` (which holds only limits and a separate process). As root,
`test_hostile_programs_as_a_non_root_user` runs the landlock tests again as a user it creates, without bwrap on PATH.

After every hostile program: the test process is alive, nothing but the server and its one pre-forked child is
left under the sandbox (and no process of the job uid anywhere), no file appeared outside the scratch
directory, and a normal program still runs in the same Sandbox.
"""
import json, os, pwd, shutil, signal, socket, subprocess, sys, time
from pathlib import Path
import numpy as np
import psutil
import pytest

from cwm_nb.sandbox import jobs as sandbox_module
from cwm_nb.sandbox.landlock import landlock_support
from cwm_nb.core import CwmNbError
from cwm_nb.sandbox.jobs import Sandbox, SandboxSession, get_sandbox
from cwm_nb.sandbox.programs import SandboxLimits, call_function, exec_only, run_in_process

pytestmark = pytest.mark.timeout(120)

LIMITS = SandboxLimits(wall_s=1.5, cpu_s=5, memory_mb=512, nproc=32, fsize_mb=4, output_bytes=8192,
                       output_kill_bytes=1 << 20)
HOME = pwd.getpwuid(os.getuid()).pw_dir   # the real home directory ($HOME can lie)
OUTSIDE = [str(Path(__file__).resolve().parents[1]/"SHOULD_NOT_EXIST"), "/root/x", "/tmp/cwm_sandbox_should_not_exist",
           "/x_should_not_exist", os.path.join(HOME, "cwm_sandbox_should_not_exist")]
TOKEN = "tok-cwm-nb-test-7f3a"   # the content of a token file in the real home directory
MODES = ["bwrap", "landlock", "none"]
KERNEL_MODES = ("bwrap", "landlock")   # the modes that hold the hostile programs below
NORMAL = "import numpy as np\nprint(int(np.arange(4).sum()))"


def _have_bwrap() -> bool:
    return shutil.which("bwrap") is not None


def _skip_unavailable(mode: str) -> None:
    if mode == "bwrap" and not _have_bwrap(): pytest.skip("bubblewrap is not installed")
    if mode == "landlock" and landlock_support(): pytest.skip(landlock_support())


def _nspid(pid: int) -> int:
    "The pid of `pid` in its innermost pid namespace."
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("NSpid:"): return int(line.split()[-1])
    return pid


def strays(sb: Sandbox) -> list:
    "Processes left by the last job: the server's descendants except its pre-forked child, and any job-uid process."
    info = sb.ping()   # the server answers only after the previous job's cleanup finished
    srv = psutil.Process(sb.server_pid)
    idle = {q.pid for q in srv.children() if _nspid(q.pid) == info["idle"]}

    def kept(p) -> bool:   # the pre-forked child, or (a pid namespace per job) its init and job, forked meanwhile
        try: return p.pid in idle or any(a.pid in idle for a in p.parents())
        except psutil.NoSuchProcess: return True

    bad = [p for p in srv.children(recursive=True) if not kept(p)]
    uids = set(sb.protections.get("job_uids") or ())
    if uids:
        for p in psutil.process_iter(["uids"]):
            u = p.info["uids"]
            if u is not None and {u.real, u.effective} & uids and not kept(p): bad.append(p)
    if sb.isolation == "bwrap":   # the outer bwrap has exactly one child: the server
        bad += [p for p in psutil.Process(sb._proc.pid).children() if p.pid != sb.server_pid]
    return bad


@pytest.fixture(scope="module", autouse=True)
def secret_env():
    old = os.environ.get("OPENAI_API_KEY")
    os.environ["OPENAI_API_KEY"] = "sk-test-secret"   # set before any server starts
    token = Path(HOME)/".cwm_nb_test_token"
    had = token.exists()
    if not had: token.write_text(TOKEN); token.chmod(0o600)
    yield token
    if not had: token.unlink(missing_ok=True)
    if old is None: os.environ.pop("OPENAI_API_KEY", None)
    else: os.environ["OPENAI_API_KEY"] = old


@pytest.fixture(scope="module", params=MODES)
def module_sandbox(request, secret_env):
    _skip_unavailable(request.param)
    sb = Sandbox(LIMITS, isolation=request.param)
    assert sb.isolation == request.param
    yield sb
    server = sb.server_pid
    sb.close()
    time.sleep(0.2)
    assert not psutil.pid_exists(server), "close() left the server running"


@pytest.fixture
def sb(module_sandbox):
    "The module's sandbox, checked after the test: alive, no strays, no files outside, still works."
    for p in OUTSIDE: assert not os.path.exists(p), f"{p} exists before the test"
    yield module_sandbox
    assert psutil.Process(os.getpid()).is_running()
    left = strays(module_sandbox)
    assert not left, f"processes left behind: {[(p.pid, p.name()) for p in left]}"
    for p in OUTSIDE: assert not os.path.exists(p), f"a program created {p}"
    r = module_sandbox.run(NORMAL)
    assert r.ok and r.stdout == "6\n", (r.error, r.stdout)


def bwrap_only(sb):
    if sb.isolation != "bwrap": pytest.skip("needs bubblewrap isolation")


def kernel_only(sb):
    if sb.isolation not in KERNEL_MODES: pytest.skip("isolation='none' does not hold this (see 02d_fork_server)")


# --- endless programs -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("src", [
    "while True:\n    pass",
    "x = 0\nwhile True:\n    try:\n        x += 1\n    except BaseException:\n        pass",
    "import signal\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGALRM):\n"
    "    signal.signal(s, signal.SIG_IGN)\nwhile True:\n    pass",
], ids=["loop", "catch-BaseException", "ignore-signals"])
def test_endless_programs_time_out(sb, src):
    t = time.monotonic()
    r = sb.run(src)
    assert not r.ok and r.error["kind"] == "timeout", r.error
    # killed at the limit, not before; the upper bound only says it did not hang (shared machines are slow)
    assert LIMITS.wall_s <= time.monotonic() - t < LIMITS.wall_s + 30


def test_cpu_limit(sb):
    r = sb.run("while True: pass", limits=SandboxLimits(wall_s=5, cpu_s=1))
    assert r.error["kind"] == "cpu", r.error   # the CPU limit, not the 5 s wall-clock limit, stopped it


# --- resources --------------------------------------------------------------------------------------------------

def test_memory_bomb(sb):
    before = psutil.Process().memory_info().rss
    roomy = SandboxLimits(**{**LIMITS.__dict__, "wall_s": 30.0, "cpu_s": 30})   # the memory limit must be what stops it,
    r = sb.run("chunks = []\nwhile True:\n    chunks.append(bytearray(10 ** 7))", limits=roomy)   # even on a loaded machine
    assert r.error["kind"] == "memory" and r.error["line"] == 3, r.error
    assert psutil.Process().memory_info().rss < before + 100 * 2 ** 20
    assert sb.run("x = bytearray(2 ** 40)").error["kind"] == "memory"


def test_fork_storm(sb):
    if not sb.protections["nproc_enforced"]:   # e.g. isolation='none' as root: the storm would fill the machine
        pytest.skip("RLIMIT_NPROC does not hold in this mode (see the notebook)")
    r = sb.run("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass")
    assert r.error["kind"] in ("timeout", "killed"), r.error
    # the storm stops at RLIMIT_NPROC instead of filling the machine
    r = sb.run("import os\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n            import time\n"
               "            time.sleep(100)\n        n += 1\nexcept OSError as e:\n    print(n, e.errno)")
    assert r.ok, r.error
    n, errno = map(int, r.stdout.split())
    assert n < LIMITS.nproc and errno == 11, r.stdout


def test_file_size_limit(sb):
    r = sb.run("open('big', 'wb').write(b'x' * (8 * 2 ** 20))")
    assert r.error["kind"] == "exception" and "File too large" in r.error["message"], r.error


def test_output_flood(sb):
    "Output that never ends is killed at the hard cap `output_kill_bytes` (stdout and stderr together)."
    r = sb.run("while True:\n    print('spam ' * 200)")
    assert r.error["kind"] == "output_limit" and f"{LIMITS.output_kill_bytes} bytes" in r.error["message"], r.error
    assert r.stdout.startswith("spam spam") and "bytes of output dropped here" in r.stdout
    assert len(r.stdout.encode()) < LIMITS.output_bytes + 300   # what is kept stays within the capture cap
    r = sb.run("import os\nwhile True:\n    os.write(2, b'x' * 4096)")
    assert r.error["kind"] == "output_limit" and r.stderr.startswith("xxx"), r.error
    r = sb.run("import os\nwhile True:\n    os.write(1, b'o' * 4096); os.write(2, b'e' * 4096)")
    assert r.error["kind"] == "output_limit", r.error   # the two streams count together


def test_output_flood_with_the_default_limits(sb):
    "The default hard cap (64 MiB) is reached well within the default wall-clock limit."
    r = sb.run("while True:\n    print('spam ' * 200)", limits=SandboxLimits())
    assert r.error["kind"] == "output_limit", r.error


def test_output_over_the_cap_is_truncated_not_killed(sb):
    "A program that prints more than `output_bytes` but stops runs to the end; the head and the tail are kept."
    r = sb.run("import sys\nfor i in range(5000):\n    print('line', i)\n    print('err', i, file=sys.stderr)")
    assert r.ok, r.error
    full = "".join(f"line {i}\n" for i in range(5000))
    half = LIMITS.output_bytes // 2
    assert len(full) > 2 * LIMITS.output_bytes
    assert r.stdout.startswith(full[:half]) and r.stdout.endswith(full[-half:])
    assert f"{len(full) - 2 * half} bytes of output dropped here" in r.stdout[half:-half]
    assert r.stderr.startswith("err 0\nerr 1\n") and r.stderr.endswith("err 4999\n")
    r = sb.run("print('x' * 100)")   # under the cap: kept whole, no marker
    assert r.ok and r.stdout == "x" * 100 + "\n"


# --- processes --------------------------------------------------------------------------------------------------

def test_children_left_running(sb):
    r = sb.run("import subprocess\np = subprocess.Popen(['sleep', '1000'])\nprint(p.pid > 0)")
    assert r.ok and r.stdout == "True\n", r.error


def test_double_fork_setsid_escapes_are_swept(sb):
    src = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(1000)\n"
           "    os._exit(0)\ntime.sleep(0.1)\nprint('parent done')")
    r = sb.run(src)
    assert r.ok and r.stdout == "parent done\n", r.error
    r = sb.run(src.replace("print('parent done')", "while True: pass"))   # escapes, then a timeout
    assert r.error["kind"] == "timeout"


CHAIN = r"""import os, sys, time
LINK = '''
import ctypes, os, time
ctypes.CDLL(None).prctl(15, b"%s", 0, 0, 0)   # PR_SET_NAME: how the test finds the links
while True:   # each link forks the next, then sleeps; the leaf tries again while RLIMIT_NPROC refuses
    try: pid = os.fork()
    except OSError: time.sleep(0.0002); continue
    if pid:
        while True: time.sleep(100)
'''
if os.fork() == 0:
    os.setsid()
    os.execv(sys.executable, [sys.executable, "-S", "-c", LINK])   # a small process: its links fork fast
time.sleep(0.2)
print('started')
"""


def _named(name: str) -> list[int]:
    "Processes of this machine named `name` (their comm), zombies left out."
    return [p.pid for p in psutil.process_iter(["name", "status"])
            if p.info["name"] == name and p.info["status"] != psutil.STATUS_ZOMBIE]


def test_a_chain_that_grows_at_its_leaf_is_swept(sb):
    """A job leaves a chain of processes, each forking the next and retrying while RLIMIT_NPROC refuses (a red team's
    escape in landlock mode, as root and not). A sweep that killed the server's children alone took the chain's top,
    one link a round, and so freed a slot for the leaf each time: it gave up after 3 s, the server was replaced, and
    the chain lived on under the machine's init. The sweep kills the whole tree: no new server, no link left."""
    if not sb.protections["nproc_enforced"]:   # isolation='none' as root: the chain would grow without bound
        pytest.skip("RLIMIT_NPROC does not hold in this mode (see the notebook)")
    name, restarts = f"cwmchain{os.getpid() % 100000}", sb.restarts
    r = sb.run(CHAIN % name)
    assert r.ok and r.stdout == "started\n", r.error
    r = sb.run("print(1)")
    assert r.ok and sb.restarts == restarts, (r.error, sb.restarts, restarts)
    time.sleep(0.5)
    assert _named(name) == []


def test_os_exit(sb):
    r = sb.run("import os\nos._exit(3)")
    assert r.error["kind"] == "killed" and "exit status 3" in r.error["message"], r.error


def test_sys_exit(sb):
    r = sb.run("import sys\n\nsys.exit(0)")
    assert r.error["kind"] == "exception" and r.error["line"] == 3 and "sys.exit" in r.error["message"], r.error


OPEN_FDS = "sorted(int(x) for x in os.listdir('/proc/self/fd') if int(x) > 2)"   # a program's own descriptors

PIPE_TAMPERING = {   # a session's program that turns on the pipes it answers through (a direct session: 03_sandbox)
    "closes them": "import os\ndef f():\n    os.closerange(3, 1 << 16)\n    return 1\n",
    "forges frames": ("import os\ndef f():\n    for fd in " + OPEN_FDS + ":\n        try: os.write(fd, (1 << 40).to_bytes(8, 'little') + b'x' * 64)\n"
                      "        except OSError: pass\n    return 1\n"),
    "answers ahead": ("import os, json\nfake = json.dumps({'ok': True, 'value': 7}).encode()\n"
                      "def f():\n    for fd in " + OPEN_FDS + ":\n        try: os.write(fd, len(fake).to_bytes(8, 'little') + fake)\n"
                      "        except OSError: pass\n    return 1\n"),
}


@pytest.mark.parametrize("how", PIPE_TAMPERING)
def test_a_session_that_tampers_with_its_pipes_harms_only_itself(sb, how):
    """This process writes a direct session's calls and reads its answers itself. A program that closes its pipes,
    writes a frame claiming 1 TiB, or writes answers ahead of the calls gets an error or its own forged answer, in
    time; the calls of another session and the next job are untouched (the fixture checks no process is left)."""
    first, s = sb.open_session(PIPE_TAMPERING[how], "cwm_nb.sandbox.programs:function_session")
    _, other = sb.open_session("def g(x):\n    return x + 1\n", "cwm_nb.sandbox.programs:function_session")
    assert s is not None and s.direct and other.direct, first.error
    t = time.monotonic()
    alive = None
    try: got = [s.call({"name": "f"}, wall_s=3) for _ in range(3)]; alive = s.alive   # before close() ends it anyway
    finally: s.close()
    assert time.monotonic() - t < 10
    seen = [(r.ok, r.value, r.error) for r in got]
    if how == "answers ahead":   # every answer is one it wrote; its writes also scribble on its own shared region (the
        # job holds a descriptor of it: Python's mmap keeps one), which may leave a later call unanswered: a timeout
        assert got[0].ok and got[0].value in (1, 7), seen
        assert all(r.value in (1, 7) if r.ok else r.error["kind"] in ("timeout", "bad_result", "server_died")
                   for r in got), seen   # server_died: "the session has ended", after the timeout ended it
    elif how == "closes them":   # its first answer needs no descriptor (shared memory); then it cannot hear a call
        assert got[0].ok and got[0].value == 1, seen
        assert not got[1].ok and got[1].error["kind"] in ("killed", "exited") and alive is False and not got[2].ok, seen
    else:   # its own answer through shared memory may be seen before the forged length: at most that, then the forged
        # length fails the call, classified, and the session is over
        fails = [r for r in got if not r.ok]
        assert all(r.value == 1 for r in got if r.ok) and len(fails) >= 2 and alive is False, seen
        assert fails[0].error["kind"] in ("killed", "output_limit"), seen
    assert other.call({"name": "g", "args": [1]}).value == 2
    s.close(); other.close()


SHM_TAMPERING = {   # a session's program that writes into the shared region its calls and answers pass through
    "claims a length past the area": "put(_OUT_LEN, 1 << 40); put(_OUT_SEQ, k)",
    "answers with garbage": "ctypes.memset(at + _OUT_AT, 255, 64); put(_OUT_LEN, 64); put(_OUT_SEQ, k)",
    "answers a later call": "put(_OUT_SEQ, k + 1)",
    "rewrites its call": "put(_IN_SEQ, 1 << 62); put(_IN_LEN, 1 << 40)",
}
SHM_PROGRAM = """import ctypes, time
_IN_SEQ, _IN_LEN, _OUT_SEQ, _OUT_LEN, _OUT_AT = {}, {}, {}, {}, {}
def f(how):
    with open("/proc/self/maps") as maps:   # the region is mapped in the job; ctypes writes straight into it
        at = [int(l.split("-")[0], 16) for l in maps if "cwm-session" in l][0]
    put = lambda off, v: setattr(ctypes.c_uint64.from_address(at + off), "value", v)
    k = ctypes.c_uint64.from_address(at + _IN_SEQ).value
    {{}}
    time.sleep(30)
"""


@pytest.mark.parametrize("how", SHM_TAMPERING)
def test_a_session_that_writes_into_its_shared_memory_harms_only_itself(sb, how):
    """A direct session's calls and answers pass through a region of shared memory (02_syscalls). A program that finds
    it and writes there, claiming an answer longer than the area, answering with garbage or ahead of the call, or
    rewriting its own call, gets a classified error at once (or the wall-clock limit), never an answer, and the other
    session and the next job are untouched."""
    from cwm_nb.sandbox.syscalls import _IN_LEN, _IN_SEQ, _OUT_AT, _OUT_LEN, _OUT_SEQ
    src = SHM_PROGRAM.format(_IN_SEQ, _IN_LEN, _OUT_SEQ, _OUT_LEN, _OUT_AT).replace("{}", SHM_TAMPERING[how])
    first, s = sb.open_session(src, "cwm_nb.sandbox.programs:function_session")
    _, other = sb.open_session("def g(x):\n    return x + 1\n", "cwm_nb.sandbox.programs:function_session")
    assert s is not None and s.direct and s._shm is not None and other._shm is not None, first.error
    t = time.monotonic()
    r = s.call({"name": "f", "args": [how]}, wall_s=2)
    took = time.monotonic() - t
    s.close()
    assert not r.ok and took < 8, (r.ok, r.value, r.error, took)
    if how in ("answers a later call", "rewrites its call"): assert r.error["kind"] == "timeout", r.error
    else: assert r.error["kind"] == "bad_result" and took < 1.5, (r.error, took)   # the parent read its claim, no more
    assert other.call({"name": "g", "args": [1]}).value == 2
    assert other.feed([{"name": "g", "args": [i]} for i in range(50)])[-1].value == 50
    other.close()


ECHO_SHOUT = "def echo(x):\n    return x\ndef shout(x):\n    print(x)\n    return x\n"


def test_shared_memory_and_pipes_carry_a_session_whatever_its_size_and_pace(sb):
    """Calls and answers that fit the shared area go through it, larger ones through the pipes, in one session; a job
    asleep on its pipe is woken by the token (no polling, long pauses); output of calls answered through the shared
    area reaches the feed's last result."""
    from cwm_nb.sandbox.syscalls import SHM_AREA
    big = "y" * (SHM_AREA + 1000)
    with Sandbox(LIMITS, isolation=sb.isolation, spin_s=0) as still:
        for box, poll in ((sb, True), (still, False)):
            _, s = box.open_session(ECHO_SHOUT, "cwm_nb.sandbox.programs:function_session", poll=poll)
            assert s._shm is not None
            got = s.feed([{"name": "echo", "args": [x]} for x in ("a", big, "b")])
            assert [r.value for r in got] == ["a", big, "b"]
            time.sleep(0.3)   # the job has stopped polling: only the token wakes it
            assert s.call({"name": "echo", "args": [3]}).value == 3
            assert s.call({"name": "echo", "args": [big]}).value == big
            out = s.feed([{"name": "shout", "args": [i]} for i in range(20)])
            assert all(r.ok for r in out) and out[-1].stdout.split() == [str(i) for i in range(20)], out[-1].stdout
            s.close()


def test_a_wake_up_token_left_over_never_answers_a_later_call(sb):
    """A call answered through shared memory while this process slept on the pipes leaves the job's wake-up token
    behind when the answer is seen first; a later call whose answer comes through the pipe (larger than the area)
    skips it, and every answer goes to its own call (found in review: the token was taken for the next answer, and
    each answer after it went to the call after its own)."""
    from cwm_nb.sandbox.syscalls import SHM_AREA
    big = ["a" * (SHM_AREA + 1000), "b" * (SHM_AREA + 2000)]
    src = "def shout(x):\n    print('z' * x)\n    return x\ndef n(x):\n    return len(x)\n"
    _, s = sb.open_session(src, "cwm_nb.sandbox.programs:function_session", poll=True)
    try:
        for i in range(20):
            assert s.call({"name": "shout", "args": [1000]}, wall_s=5).value == 1000
            got = [s.call({"name": "n", "args": [b]}, wall_s=5) for b in big]
            assert [r.value for r in got] == [len(b) for b in big], (i, [(r.value, r.error) for r in got])
    finally: s.close()


def test_a_job_that_floods_its_result_pipe_with_tokens_is_stopped_at_the_result_cap(sb):
    """Empty frames are wake-up tokens, skipped; a job that writes nothing else to its result pipe, without end, is
    stopped once their bytes pass the result cap, well within its wall-clock limit (found in review: it kept the call
    running as long as it wrote)."""
    src = ("import os, time\ndef f():\n    zeros, end = bytes(1 << 20), time.monotonic() + 20\n"
           "    while time.monotonic() < end:\n        for fd in " + OPEN_FDS + ":\n"
           "            try: os.write(fd, zeros)\n            except OSError: pass\n")
    _, s = sb.open_session(src, "cwm_nb.sandbox.programs:function_session")
    t = time.monotonic()
    r = s.call({"name": "f"}, wall_s=10)
    took = time.monotonic() - t
    s.close()
    assert not r.ok and r.error["kind"] == "output_limit" and "result is larger" in r.error["message"], r.error
    assert took < 9, took


def test_a_closed_session_lets_go_of_its_shared_region():
    "close() unmaps the session's region and closes its descriptor at once, even while the object is still referenced."
    def mapped() -> int:
        with open("/proc/self/maps") as f: return sum("cwm-session" in line for line in f)
    with Sandbox(LIMITS) as box:
        fds, before = len(os.listdir("/proc/self/fd")), mapped()
        kept = [box.open_session("def g(x):\n    return x\n", "cwm_nb.sandbox.programs:function_session")[1]
                for _ in range(10)]
        assert all(k._shm is not None for k in kept) and mapped() == before + 10
        for k in kept: k.close()
        assert mapped() == before and len(os.listdir("/proc/self/fd")) == fds


def test_sessions_dropped_without_close_are_ended_by_the_next_request(sb):
    """A session collected without close() (a workbook variable reassigned, say) no longer holds one of the server's
    MAX_SESSIONS places until it restarts: the next request ends it first, so more sessions than that can be opened and
    dropped one after another, and none of their jobs is left running."""
    import gc
    from cwm_nb.sandbox.fork_server import MAX_SESSIONS
    for i in range(MAX_SESSIONS + 4):
        _, s = sb.open_session("def g(x):\n    return x + 1\n", "cwm_nb.sandbox.programs:function_session")
        assert s is not None and s.call({"name": "g", "args": [i]}).value == i + 1
        del s   # dropped, never closed
        gc.collect()
    seen = sb.ping()   # the last one's `end` goes first
    assert set(seen["children"]) <= {seen["idle"]}, seen
    _, kept = sb.open_session("def g(x):\n    return x + 1\n", "cwm_nb.sandbox.programs:function_session")
    assert kept.call({"name": "g", "args": [1]}).value == 2   # a session still open is not touched by the others' ends
    held = [kept] + [sb.open_session("def g(x):\n    return x\n", "cwm_nb.sandbox.programs:function_session")[1]
                     for _ in range(MAX_SESSIONS - 1)]
    try:   # sessions still referenced keep their places: the limit holds for them
        with pytest.raises(CwmNbError, match="refused a new session"):
            sb.open_session("def g(x):\n    return x\n", "cwm_nb.sandbox.programs:function_session")
        assert all(h.call({"name": "g", "args": [3]}).value in (3, 4) for h in held)
    finally:
        for h in held: h.close()


def test_the_next_child_is_forked_when_a_direct_session_ends(sb):
    """While the parent feeds a direct session, the server forks no child beside it (the fork and its set-up would take
    CPU time from the feed, 02d_fork_server): none is waiting during the session, one is once it ends, and a job asked
    for meanwhile still runs (its child forked on demand)."""
    sb.run("pass")
    assert sb.ping()["idle"] is not None   # after a plain job, as before
    first, s = sb.open_session("def g(x):\n    return x\n", "cwm_nb.sandbox.programs:function_session")
    try:
        assert s is not None and s.direct, first.error
        assert sb.ping()["idle"] is None
        assert [r.value for r in s.feed([{"name": "g", "args": [k]} for k in range(3)])] == [0, 1, 2]
        assert sb.run("print(7)").stdout == "7\n"   # forked on demand
        assert s.call({"name": "g", "args": [5]}).value == 5
    finally: s.close()
    seen = sb.ping()
    assert seen["idle"] is not None and set(seen["children"]) == {seen["idle"]}, seen
    # ended by its own feed, directly or through the server (its pipes left): the next child is forked after the end
    _, s = sb.open_session("def g(x):\n    return x\n", "cwm_nb.sandbox.programs:function_session")
    assert [r.value for r in s.feed([{"name": "g", "args": [1]}], close=True)] == [1]
    first, sid, pipes = sb._submit("def g(x):\n    return x\n", "cwm_nb.sandbox.programs:function_session", None, None,
                                   None, session=True)
    if pipes is not None: pipes.close()
    s = SandboxSession(sb, sid, sb.limits)
    assert [r.value for r in s.feed([{"name": "g", "args": [2]}], close=True)] == [2] and not s.direct
    seen = sb.ping()
    assert seen["idle"] is not None and set(seen["children"]) == {seen["idle"]}, seen


def counting_cartpole(steps: int) -> str:
    "The CartPole CWM of data/programs, printing its job's minor page faults from its first line to its `steps`-th step."
    src = (Path(__file__).resolve().parents[1]/"data"/"programs"/"CartPole-v1.py").read_text()
    assert src.count("class Environment:") == 1 and src.count("    def step(self, action):\n") == 1
    head = "import resource\n_F0, _N = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, [0]\nclass Environment:"
    count = (f"    def step(self, action):\n        _N[0] += 1\n        if _N[0] == {steps}: "
             "print('faults', resource.getrusage(resource.RUSAGE_SELF).ru_minflt - _F0)\n")
    return src.replace("class Environment:", head).replace("    def step(self, action):\n", count)


def test_the_warm_up_takes_first_writes_off_a_fed_job(sb):
    """The pre-forked child runs a small CWM of its own before its job (02d_fork_server, `_warm_up`): the job of a fed
    evaluation of the shipped CartPole buffer then takes far fewer page faults than with `warm_up=False`, and both
    answer the same. Each evaluation waits for an idle child that has had time to warm up."""
    if sb.isolation not in KERNEL_MODES: pytest.skip("measured where jobs are confined")
    from cwm_nb.bench.program_runs import run_on_buffer
    from cwm_nb.bench.replay import ReplayBuffer
    buf = ReplayBuffer.load(Path(__file__).resolve().parents[1]/"data"/"buffers"/"CartPole-v1")   # 494 transitions
    program = counting_cartpole(len(buf))
    faults, values = {}, {}
    with Sandbox(LIMITS, isolation=sb.isolation, warm_up=False) as cold:
        for name, box in (("warm", sb), ("cold", cold)):
            got = []
            for _ in range(3):
                time.sleep(0.3)   # the idle child's warm-up (a few ms) is done
                r = run_on_buffer(box, program, buf, "cwm_nb.sandbox.drivers:cwm_predict")
                assert r.ok and r.stdout.startswith("faults"), (r.error, r.stdout)
                got.append(int(r.stdout.split()[1])); values[name] = r.value
            faults[name] = min(got)
    assert values["warm"] == values["cold"]
    assert faults["warm"] < 0.7 * faults["cold"], faults


def test_a_dropped_sessions_end_never_reaches_the_next_server(sb):
    """A session collected unclosed whose server then died: its queued `end` belongs to the dead server, and the new one
    starts as usual (the configuration is its first frame)."""
    import gc
    with Sandbox(LIMITS, isolation=sb.isolation) as own:
        _, s = own.open_session("def g(x):\n    return x\n", "cwm_nb.sandbox.programs:function_session")
        del s; gc.collect()
        assert own._dropped, "the finalizer queued nothing"
        os.kill(own._proc.pid, signal.SIGKILL); own._proc.wait()
        r = own.run("print(1)")
        assert r.ok and r.stdout == "1\n" and own.restarts == 1, r.error


def test_a_failed_direct_call_does_not_wait_for_another_threads_job(sb):
    """A direct call that overruns its wall-clock limit while another thread's job holds the server returns at once:
    this process kills the job through the pidfd it holds, and the server ends the session with its next request."""
    import threading
    _, s = sb.open_session("def spin(x):\n    while True: pass\n", "cwm_nb.sandbox.programs:function_session")
    held, done = threading.Event(), {}
    def other():   # the server is busy with this thread's job for about 3 s
        with sb._lock: held.set(); done["r"] = sb.run("import time\ntime.sleep(3)", limits=SandboxLimits(wall_s=20))
    th = threading.Thread(target=other); th.start()
    assert held.wait(20)
    t = time.monotonic(); r = s.call({"name": "spin", "args": [0]}, wall_s=0.5); took = time.monotonic() - t
    still = th.is_alive()
    th.join()
    assert r.error["kind"] == "timeout" and took < 2.5 and still, (took, still, r.error)
    assert done["r"].ok and not s.alive
    seen = sb.ping()   # the queued `end` goes first: the killed job is reaped and swept
    assert set(seen["children"]) <= {seen["idle"]}, seen


def test_an_interrupted_request_leaves_no_reply_for_the_next(sb):
    """Ctrl-C between a request (put_data here; ping and drop_data alike) and its reply: the server is replaced, so no
    later request reads the reply meant for that one, and the stored data is sent again."""
    with Sandbox(LIMITS, isolation=sb.isolation) as own:
        real = own._recv
        def interrupted(deadline):   # the request went out; the interrupt comes before its reply is read
            own._recv = real
            raise KeyboardInterrupt
        own._recv = interrupted
        with pytest.raises(KeyboardInterrupt): own.put_data("k", [1, 2, 3])
        for i in range(3):
            r = own.run(f"print({i})")
            assert r.ok and r.stdout == f"{i}\n", (i, r.stdout, r.error)
        r = own.run("def f():\n    return 1\n", "cwm_nb.sandbox.programs:exec_only", data_key="k")
        assert r.ok and own.restarts == 1, r.error


FORKS_THEN_SPINS = ("import os, time\ndef spin(x):\n    for _ in range(3):\n        if os.fork() == 0:\n"
                    "            while True: time.sleep(1)\n    while True: pass\ndef ready(x):\n    return x\n")


def test_a_failed_direct_calls_leftovers_go_once_the_server_is_free(sb):
    """A direct call that overran its limit while another thread held the server (`_end_later`): the processes its
    program forked are swept as soon as that thread lets go, with no further request from anyone; and `close()` of
    such a session returns only once they are gone. With a pid namespace per job they are killed with the job, at
    once: the kernel then holds each for as long as its exit takes (seconds, on a busy machine), and none runs a line
    of the program again."""
    import threading
    def jobs() -> list:   # the server's descendants still named as jobs (the pre-forked child is `cwm-idle`)
        out = []
        for p in psutil.Process(sb.server_pid).children(recursive=True):
            try:
                if p.name() == "cwm-job": out.append(p)
            except psutil.NoSuchProcess: pass
        return out
    def unkilled() -> list:   # (pid, state) of each of `jobs()` neither exiting (PF_EXITING) nor with SIGKILL pending
        out = []
        for p in jobs():
            try: stat, status = (Path(f"/proc/{p.pid}/{f}").read_text() for f in ("stat", "status"))
            except OSError: continue   # gone
            pending = (int(l.split()[1], 16) for l in status.splitlines() if l.startswith(("SigPnd:", "ShdPnd:")))
            stat = stat.rsplit(")", 1)[1].split()
            if not int(stat[6]) & 0x4 and not any(m & 1 << (signal.SIGKILL - 1) for m in pending): out.append((p.pid, stat[0]))
        return out
    for closing in (False, True):
        _, s = sb.open_session(FORKS_THEN_SPINS, "cwm_nb.sandbox.programs:function_session")
        assert s.call({"name": "ready", "args": [1]}).value == 1
        assert [p for p, _ in unkilled()] == [p.pid for p in jobs()] != [], "the job is not seen as running: nothing tested"
        held, free = threading.Event(), threading.Event()
        def other():   # holds the server without a request of its own (a request would sweep)
            with sb._lock: held.set(); free.wait(20)
        th = threading.Thread(target=other); th.start()
        assert held.wait(20)
        r = s.call({"name": "spin", "args": [0]}, wall_s=0.5)
        assert r.error["kind"] == "timeout", r.error
        if sb.protections["jobs_apart"] == "pid namespace per job":
            # the job's namespace ends with the job and takes what it forked: nothing waits for the server's sweep.
            # Once killed, a process stays so; before, none is hidden (a scan can miss only those whose parent just died)
            deadline = time.monotonic() + 10
            while (left := unkilled()) and time.monotonic() < deadline: time.sleep(0.05)
            assert not left, left
            free.set(); th.join()
            if closing: s.close()
            continue
        assert jobs(), "the program's children were gone before the server was free: nothing tested"
        if closing:
            threading.Timer(1.0, free.set).start()
            s.close()   # waits for the server, then for the sweep
            assert not jobs(), jobs()
        else:
            free.set()
            deadline = time.monotonic() + 10
            while jobs() and time.monotonic() < deadline: time.sleep(0.05)
            assert not jobs(), jobs()
        th.join()


SLEEPER = "import time\ndef nap(x):\n    time.sleep(x)\n    return x\ndef echo(x):\n    return x\n"


def test_a_direct_call_ends_well_whatever_this_process_does_meanwhile(sb):
    """A direct session's call (03_sandbox) closed from another thread, interrupted, or given a payload that cannot be
    sent: the call ends at once, the session ends with it, and no answer meant for one call reaches another."""
    import threading, _thread
    opened = [sb.open_session(SLEEPER, "cwm_nb.sandbox.programs:function_session")[1] for _ in range(3)]
    old = signal.signal(signal.SIGINT, signal.default_int_handler)   # as in a workbook (a test run may have changed it)
    try:
        s = opened[0]
        assert s.direct
        threading.Timer(0.3, s.close).start()
        t = time.monotonic(); r = s.call({"name": "nap", "args": [1.0]}, wall_s=5)
        assert time.monotonic() - t < 0.9 and r.error["kind"] == "server_died" and "closed during the call" in r.error["message"], r.error
        s = opened[1]
        threading.Timer(0.3, _thread.interrupt_main).start()
        with pytest.raises(KeyboardInterrupt): s.call({"name": "nap", "args": [1.0]}, wall_s=5)
        assert not s.alive and s.call({"name": "echo", "args": [2]}).error["kind"] == "server_died"   # not the nap's answer
        s = opened[2]
        with pytest.raises(Exception): s.feed([{"name": "echo", "args": [lambda: 0]}])
        assert s.alive and s.call({"name": "echo", "args": [3]}).value == 3   # nothing of the feed was sent
        with pytest.raises(Exception): s.feed([{"name": "echo", "args": [1]}, {"name": "echo", "args": [lambda: 0]}])
        assert not s.alive and s.call({"name": "echo", "args": [4]}).error["kind"] == "server_died"   # pickled as sent
    finally:
        signal.signal(signal.SIGINT, old)
        for s in opened: s.close()


def test_a_direct_call_whose_server_died_says_so(secret_env):
    "The server killed between two calls of a direct session: the next call is `server_died`, not the program's fault."
    with Sandbox(LIMITS) as sb:
        _, s = sb.open_session(SLEEPER, "cwm_nb.sandbox.programs:function_session")
        assert s.direct and s.call({"name": "echo", "args": [1]}).value == 1
        os.killpg(sb._proc.pid, signal.SIGKILL); sb._proc.wait(5)
        time.sleep(0.2)
        r = s.call({"name": "echo", "args": [2]})
        assert r.error["kind"] == "server_died", r.error
        assert sb.run("print(4)").stdout == "4\n"


def test_direct_sessions_take_any_descriptor_number(sb):
    "select(2) stops at descriptor 1024; a workbook with many files open still writes and reads its calls."
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200: pytest.skip("needs 1,200 open files")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        _, s = sb.open_session(SLEEPER, "cwm_nb.sandbox.programs:function_session")
        assert min(s.pipes.job_w, s.pipes.pidfd) >= 1024
        assert s.call({"name": "echo", "args": ["x" * 300_000]}).value == "x" * 300_000   # more than a pipe holds
        s.close()
    finally:
        for fd in held: os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_job_that_hangs_up_does_not_kill_a_process_that_takes_sigpipe():
    "A workbook whose SIGPIPE is the default (as in many command-line tools) survives a session's job that exits between calls."
    code = ("import signal; signal.signal(signal.SIGPIPE, signal.SIG_DFL)\n"
            "import time; from cwm_nb.sandbox.jobs import Sandbox\n"
            "src = 'import os, threading, time\\ndef f():\\n    threading.Thread(target=lambda: (time.sleep(0.2), os._exit(0))).start()\\n    return 1\\n'\n"
            "with Sandbox() as sb:\n"
            "    _, s = sb.open_session(src, 'cwm_nb.sandbox.programs:function_session')\n"
            "    assert s.direct and s.call({'name': 'f'}).value == 1\n"
            "    time.sleep(0.5)\n"
            "    print(s.call({'name': 'f'}).error['kind'])\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "killed", (r.returncode, r.stdout, r.stderr[-2000:])


def test_kill_by_signal(sb):
    r = sb.run("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)")
    assert r.error["kind"] == "killed" and "SIGSEGV" in r.error["message"], r.error


def test_kill_parent_server_workbook_and_everyone(sb):
    "A program cannot kill its server, the workbook process (this test) or every process it may signal."
    kernel_only(sb)
    restarts, server = sb.restarts, sb.server_pid
    for src in ["import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint('alive')",
                "import os, signal\nos.kill(%d, signal.SIGKILL)\nprint('alive')" % server,
                "import os, signal\nos.kill(%d, signal.SIGKILL)\nprint('alive')" % os.getpid(),
                "import os, signal\ntry:\n    os.kill(-1, signal.SIGKILL)\nexcept OSError:\n    pass\nprint('alive')"]:
        r = sb.run(src)
        assert r.error is None or r.error["kind"] == "exception", r.error
        assert sb.restarts == restarts and psutil.pid_exists(server), "the program could kill the server"
    assert psutil.Process(os.getpid()).is_running()


VICTIM = ("import os, resource\ndef state():\n"
          "    return [int(os.readlink('/proc/self')), os.getpriority(os.PRIO_PROCESS, 0),\n"
          "            list(resource.getrlimit(resource.RLIMIT_CPU)), list(resource.getrlimit(resource.RLIMIT_NOFILE))]")
ATTACKER = r"""
import ctypes, errno, fcntl, json, os, resource, signal, socket, struct
libc = ctypes.CDLL(None, use_errno=True)
pid, out = %d, {}
def attempt(name, f):
    try: f(); out[name] = "done"
    except OSError as e: out[name] = errno.errorcode.get(e.errno, str(e.errno))
def ptrace():
    if libc.ptrace(16, pid, 0, 0) != 0: raise OSError(ctypes.get_errno(), "ptrace")   # PTRACE_ATTACH
def proc_write():
    with open(f"/proc/{pid}/oom_score_adj", "w") as f: f.write("1000")
def sigio_pipe():   # SIGIO (whose default action kills) aimed at the other job
    r, w = os.pipe(); fcntl.fcntl(r, fcntl.F_SETOWN, pid); fcntl.fcntl(r, fcntl.F_SETFL, os.O_ASYNC); os.write(w, b"x")
def sigio_socket():
    a, b = socket.socketpair(); fcntl.ioctl(a.fileno(), 0x8901, struct.pack("i", pid))   # FIOSETOWN
    fcntl.fcntl(a.fileno(), fcntl.F_SETFL, os.O_ASYNC); b.send(b"x")
attempt("kill", lambda: os.kill(pid, signal.SIGKILL))
attempt("setpriority", lambda: os.setpriority(os.PRIO_PROCESS, pid, 19))
attempt("prlimit_cpu", lambda: resource.prlimit(pid, resource.RLIMIT_CPU, (1, 1)))
attempt("prlimit_nofile", lambda: resource.prlimit(pid, resource.RLIMIT_NOFILE, (3, 3)))
attempt("ptrace", ptrace)
attempt("proc_write", proc_write)
attempt("proc_mem", lambda: open(f"/proc/{pid}/mem", "rb").close())
attempt("sigio_pipe", sigio_pipe)
attempt("sigio_socket", sigio_socket)
print(json.dumps(out))
"""
REFUSED = {"kill", "setpriority", "prlimit_cpu", "prlimit_nofile", "ptrace", "proc_write", "proc_mem"}


def attack_another_job(sb: Sandbox) -> dict:
    """A job tries to kill, renice, limit, trace and write to a session job of the same server (by the pid that /proc
    shows, the one a program can find): what each attempt got. Asserts the session is untouched afterwards."""
    _, sess = sb.open_session(VICTIM, "cwm_nb.sandbox.programs:function_session")
    with sess:
        before = sess.call({"name": "state"}).value
        r = sb.run(ATTACKER % before[0])
        assert r.ok, r.error
        after = sess.call({"name": "state"})
        assert after.ok and after.value == before, (after.error, after.value, before)   # alive, same priority and limits
    return json.loads(r.stdout)


def test_jobs_apart(sb):
    """Two jobs of one server cannot signal or limit each other (02d_fork_server, Jobs apart): a uid per job as root, a
    pid namespace per job in bwrap without root, Landlock and seccomp in landlock mode without root."""
    kernel_only(sb)
    assert sb.protections["jobs_apart"] is not None
    got = attack_another_job(sb)
    assert all(got[k] != "done" for k in REFUSED), got



MEETS = ("import socket\nKEEP = []\n"
         "def bind(name):\n    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n    s.bind('\\0' + name); s.listen(1)\n"
         "    KEEP.append(s)\n    return 'bound'\n"
         "def connect(name):\n    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n    s.connect('\\0' + name)\n"
         "    return 'connected'\n")


def _two_at_once(sb, source: str, first: dict, second: dict) -> tuple:
    "The results of `first` in one session of `source` and then `second` in another, both open at once."
    _, a = sb.open_session(source, "cwm_nb.sandbox.programs:function_session")
    _, b = sb.open_session(source, "cwm_nb.sandbox.programs:function_session")
    try: return a.call(first), b.call(second)
    finally: a.close(); b.close()


def _both_refused(*results) -> None:
    for r in results: assert not r.ok and "PermissionError" in r.error["message"], r


def test_two_jobs_open_at_once_cannot_meet_at_a_unix_socket(sb):
    """A unix socket bound to an abstract name is found by any process of the network namespace: two sessions open at
    once could pass each other what they are shown (found by a red team in bwrap). No job can make a socket; without
    isolation the two meet."""
    name = f"cwm-nb-meet-{os.getpid()}-{sb.isolation}"
    bound, met = _two_at_once(sb, MEETS, {"name": "bind", "args": [name]}, {"name": "connect", "args": [name]})
    if sb.isolation != "none": _both_refused(bound, met)
    else: assert (bound.value, met.value) == ("bound", "connected"), (bound.error, met.error)


LOCKS = ("import fcntl, struct, numpy\nF = open(numpy.__file__, 'rb')\n"
         "def put(v):\n    fcntl.fcntl(F, fcntl.F_SETLK, struct.pack('hhqqi', fcntl.F_RDLCK, 0, v, 1, 0))\n    return 'locked'\n"
         "def get():\n    r = fcntl.fcntl(F, fcntl.F_GETLK, struct.pack('hhqqi', fcntl.F_WRLCK, 0, 0, 0, 0))\n"
         "    t, _, start, _, _ = struct.unpack('hhqqi', r)\n    return None if t == fcntl.F_UNLCK else start\n")


def test_two_jobs_open_at_once_cannot_pass_data_through_a_files_locks(sb):
    """A record lock on a file both jobs can open (numpy's) is seen by the other, whatever its uid, namespace or server;
    its offset carries 63 bits (a red team passed a timed buffer to a program scored beside it this way). Jobs can take
    no lock, lease or watch; without isolation the value passes."""
    put, got = _two_at_once(sb, LOCKS, {"name": "put", "args": [123456789]}, {"name": "get"})
    if sb.isolation != "none": _both_refused(put, got)
    else: assert (put.value, got.value) == ("locked", 123456789), (put.error, got.error)


PEEKS = ("import os\n"
         "def mark():\n    os.chmod('.', 0o777); open('msg', 'w').write('secret')\n    return os.path.basename(os.getcwd())\n"
         "def find():\n    try: names = set(os.listdir('..'))\n    except OSError: names = set()\n    found = []\n"
         "    for n in names | {f'job{k}' for k in range(1, 500)}:\n"
         "        try: found.append(open(os.path.join('..', n, 'msg')).read())\n        except OSError: pass\n"
         "    return found\n")


def test_a_job_cannot_find_another_jobs_scratch_directory(sb):
    """A job that opens its scratch directory to all (`chmod 0777`) and leaves a file there: another job open at the same
    time can neither list the directory above nor guess the name (`job<n>-<64 random bits>`; a red team read `../job<n>`
    as root in bwrap). Without isolation the same uid lists it."""
    name, found = _two_at_once(sb, PEEKS, {"name": "mark"}, {"name": "find"})
    assert name.ok and len(name.value.rsplit("-", 1)[1]) == 16, name
    assert found.ok and found.value == (["secret"] if sb.isolation == "none" else []), found


FILLS_ITS_SCRATCH = ("import os\ndef fill():\n    n = 0\n    try:\n        while True:\n            with open(f'f{n}', 'wb') as f: f.write(b'x' * (3 << 20))\n"
                     "            n += 1\n    except OSError as e: return [n, e.errno]\n")
ELSEWHERE = ("import os\nout = []\nfor p in ('/tmp/x', '/var/tmp/x', '/run/x', '/dev/x', '/dev/shm/x'):\n"
             "    try: open(p, 'w').write('x'); out.append('wrote')\n    except OSError as e: out.append(e.errno)\n"
             "print(out, os.listdir('..'))\n")


def test_each_job_writes_in_a_tmpfs_of_its_own(sb):
    """In bwrap without root each job writes in a tmpfs of its own (02d_fork_server, Jobs apart): a job that fills it
    stops at its own size; a job beside it sees none of its files, still has room, and, as with a uid per job, cannot
    write in bwrap's tmpfs over /tmp, /var/tmp, /run or in /dev, which all jobs would share."""
    bwrap_only(sb)
    if not sb.protections.get("job_tmp_mb"): pytest.skip("a tmpfs of its own per job: bwrap without root only")
    _, filler = sb.open_session(FILLS_ITS_SCRATCH, "cwm_nb.sandbox.programs:function_session")
    try:
        n, err = filler.call({"name": "fill"}).value
        assert err == 28 and (n + 1) * 3 >= sb.protections["job_tmp_mb"] - 3, (n, err)   # ENOSPC at its own size
        r = sb.run("open('mine', 'wb').write(b'y' * (3 << 20))\n" + ELSEWHERE)
        assert r.ok, r.error
        out, siblings = eval(r.stdout.rsplit("] ", 1)[0] + "]"), eval(r.stdout.rsplit("] ", 1)[1])
        assert "wrote" not in out[:4] and len(siblings) == 1, r.stdout   # /dev/shm: a small tmpfs of its own
    finally: filler.close()


def test_signals_scoped_by_seccomp_where_landlock_cannot(monkeypatch, secret_env):
    "The fallback for kernels before Landlock ABI 6: a seccomp filter lets signals reach only the job's own group."
    _skip_unavailable("landlock")
    monkeypatch.setattr(sandbox_module, "_SIGNAL_SCOPE", "seccomp")
    with Sandbox(LIMITS, isolation="landlock") as sb:
        assert sb.protections["signal_scope"] == "seccomp"
        restarts = sb.restarts
        r = sb.run("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)")
        assert r.error["kind"] == "exception" and r.error["exc_type"] == "PermissionError", r.error
        r = sb.run("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)")   # itself: allowed
        assert r.error["kind"] == "killed" and "SIGSEGV" in r.error["message"], r.error
        r = sb.run("import fcntl, os\nr, w = os.pipe()\nfcntl.fcntl(r, fcntl.F_SETOWN, os.getppid())")   # SIGIO to the server
        assert r.error["exc_type"] == "PermissionError", r.error
        r = sb.run("import signal, os\nsignal.pthread_kill(__import__('threading').main_thread().ident, 0)\nprint('ok')")
        assert r.ok, r.error   # its own threads: allowed
        r = sb.run("import fcntl, os, socket, struct\na, b = socket.socketpair()\n"
                   "fcntl.ioctl(a.fileno(), 0x8901, struct.pack('i', os.getppid()))")   # FIOSETOWN: SIGIO to the server
        assert r.error["exc_type"] == "PermissionError", r.error
        got = attack_another_job(sb)
        assert all(got[k] != "done" for k in REFUSED), got
        assert sb.restarts == restarts


def test_kill_parent_without_bwrap_restarts_the_server(sb):
    if sb.isolation != "none" or sb.protections.get("job_uid") is not None:
        pytest.skip("only where a job can signal its server (isolation='none', same uid)")
    restarts = sb.restarts
    r = sb.run("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nimport time\ntime.sleep(5)")
    assert r.error["kind"] == "server_died", r.error
    assert sb.run(NORMAL).ok and sb.restarts == restarts + 1


def test_server_killed_from_outside_mid_job(sb):
    restarts, old = sb.restarts, sb.server_pid
    sb.put_data("d", {"obs": [np.zeros(2, np.float32)], "actions": [np.int64(1)]})
    import threading
    threading.Timer(0.3, lambda: os.kill(old, signal.SIGKILL)).start()
    r = sb.run("import time\ntime.sleep(1)")
    assert r.error["kind"] == "server_died", r.error
    r = sb.run("class Environment:\n    def set_state(self, s): self.s = s\n    def step(self, a): return self.s, 1.0, False",
               "cwm_nb.sandbox.drivers:cwm_predict", data_key="d")   # the data was re-sent to the new server
    assert r.ok and r.value == {"predictions": [[[0.0, 0.0], 1.0, False]]}, r.error
    assert sb.restarts == restarts + 1 and sb.server_pid != old and not psutil.pid_exists(old)


@pytest.mark.parametrize("mode", MODES)
def test_parent_killed_mid_job_leaves_nothing(mode):
    _skip_unavailable(mode)
    import subprocess, sys
    code = ("import os, threading\nfrom cwm_nb.sandbox.jobs import Sandbox\ns = Sandbox(isolation=%r)\n"
            "print(s.server_pid, flush=True)\nthreading.Timer(0.5, lambda: os.kill(os.getpid(), 9)).start()\n"
            "s.run('import subprocess, time\\nsubprocess.Popen([\"sleep\", \"4321\"])\\ntime.sleep(5)')\n") % mode
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert p.returncode == -9, p.stderr
    server = int(p.stdout.split()[0])
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        alive = [q for q in psutil.process_iter(["cmdline", "status"]) if q.info["status"] != psutil.STATUS_ZOMBIE
                 and (q.pid == server or (q.info["cmdline"] or [])[-1:] == ["4321"])]
        if not alive: break
        time.sleep(0.1)
    assert not alive, [(q.pid, q.info["cmdline"]) for q in alive]


# --- isolation --------------------------------------------------------------------------------------------------

def test_writes_outside_scratch(sb):
    kernel_only(sb)   # isolation='none' does not protect the filesystem (see the notebook)
    src = ("import os\nout = []\nfor p in %r:\n    try:\n        open(p, 'w').write('x')\n        out.append('wrote')\n"
           "    except OSError as e:\n        out.append(type(e).__name__ if isinstance(e, PermissionError) else 'OSError')\nopen('inside.txt', 'w').write('ok')\n"
           "print(out, open(os.path.join(os.getcwd(), 'inside.txt')).read())") % (OUTSIDE,)
    r = sb.run(src)
    assert r.ok and r.stdout.strip().endswith("ok"), (r.error, r.stdout)
    out = eval(r.stdout.rsplit(" ", 1)[0])
    if sb.isolation == "bwrap":   # a read-only root of the sandbox's own; the checkout is not in it: a file there cannot be
        # made (EROFS, or EACCES where the checkout lies below /tmp, in a directory bwrap made on its tmpfs)
        assert out[0] in ("OSError", "PermissionError") and out[3] == "OSError" and "wrote" not in out[:2], out
    if sb.isolation == "landlock":   # Landlock: nothing outside the scratch directory
        assert out == ["PermissionError"] * len(OUTSIDE), out


def test_no_network(sb):
    if not sb.protections["network_cut"]: pytest.skip("this mode leaves the network open")
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(8); srv.setblocking(False)
    port = srv.getsockname()[1]
    try:
        r = sb.run("import socket\ns = socket.socket()\ns.settimeout(1)\ns.connect(('127.0.0.1', %d))\nprint('connected')" % port)
        assert r.error["kind"] == "exception" and r.error["exc_type"] in ("ConnectionRefusedError", "OSError", "PermissionError"), r.error
        assert "connected" not in r.stdout
        with pytest.raises(BlockingIOError): srv.accept()   # nothing ever arrived
        r = sb.run("import socket\nsocket.create_connection(('pypi.org', 443), timeout=1)")
        assert r.error["kind"] == "exception", r.error
    finally:
        srv.close()


def test_no_udp(sb):
    "UDP to 127.0.0.1 never arrives (Landlock has no UDP rule: seccomp refuses the socket)."
    kernel_only(sb)
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); rx.bind(("127.0.0.1", 0)); rx.setblocking(False)
    try:
        r = sb.run("import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.sendto(b'leak', ('127.0.0.1', %d))\n"
                   "print('sent')" % rx.getsockname()[1])
        time.sleep(0.2)
        with pytest.raises(BlockingIOError): rx.recv(64)   # nothing arrived
        if sb.isolation == "landlock": assert r.error["exc_type"] == "PermissionError", r.error
    finally:
        rx.close()


def test_netlink_packet_and_unix_sockets(sb):
    "No netlink or packet socket, and no unix socket that could reach a daemon by path (landlock mode)."
    if sb.isolation != "landlock": pytest.skip("bwrap: own network namespace; none: open")
    for fam in ("AF_NETLINK", "AF_PACKET", "AF_UNIX", "AF_INET6"):
        r = sb.run("import socket\nsocket.socket(socket.%s, socket.SOCK_RAW if '%s' != 'AF_UNIX' else socket.SOCK_STREAM)" % (fam, fam))
        assert r.error["exc_type"] == "PermissionError", (fam, r.error)
    assert sb.run("import socket\na, b = socket.socketpair()\na.send(b'x')\nprint(b.recv(1))").stdout == "b'x'\n"


def test_no_ptrace_or_process_vm(sb):
    "A job cannot attach to or read the memory of another process."
    kernel_only(sb)
    src = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
           "print(libc.ptrace(16, %d, 0, 0), ctypes.get_errno())" % sb.server_pid)   # PTRACE_ATTACH to the server
    r = sb.run(src)
    rc, err = map(int, r.stdout.split())
    assert rc == -1 and err in (1, 3), r.stdout   # EPERM (or ESRCH: not visible from its pid namespace)


def test_no_limits_or_priority_of_other_processes(sb):
    "A job cannot set the workbook's or the server's resource limits or priority (same uid as non-root)."
    kernel_only(sb)
    for pid in (os.getpid(), sb.server_pid):
        r = sb.run("import resource\nresource.prlimit(%d, resource.RLIMIT_CPU, (1, 1))" % pid)
        assert r.error["exc_type"] in ("PermissionError", "ProcessLookupError"), r.error
        r = sb.run("import os\nos.setpriority(os.PRIO_PROCESS, %d, 19)" % pid)
        assert r.error["exc_type"] in ("PermissionError", "ProcessLookupError"), r.error
    assert psutil.Process(os.getpid()).rlimit(psutil.RLIMIT_CPU)[0] == psutil.RLIM_INFINITY
    assert psutil.Process(os.getpid()).nice() < 19


# Each job tries to make, or then to find, a System V segment, semaphore set and message queue, a POSIX message queue
# and a key in its user key ring, all under one key or name; prints {kind: [return value, errno]}.
NAMED_OBJECTS = r'''
import ctypes, json, os, platform
KEY, MAKE = %d, %r
libc = ctypes.CDLL(None, use_errno=True)
KEYCALLS = {"x86_64": (248, 249), "aarch64": (217, 218)}.get(platform.machine(), (-1, -1))   # add_key, request_key
name, flags = b"/cwm-nb-%d", (0o1600 if MAKE else 0)   # IPC_CREAT | 0600
calls = {
    "shm": lambda: libc.shmget(KEY, 4096 if MAKE else 0, flags),
    "sem": lambda: libc.semget(KEY, 1 if MAKE else 0, flags),
    "msg": lambda: libc.msgget(KEY, flags),
    "mq": lambda: libc.mq_open(name, (os.O_CREAT | os.O_RDWR) if MAKE else os.O_RDONLY, 0o600, None),
    "key": (lambda: libc.syscall(KEYCALLS[0], b"user", name, b"x", 1, -4)) if MAKE else   # KEY_SPEC_USER_KEYRING
           (lambda: libc.syscall(KEYCALLS[1], b"user", name, None, 0)),
}
out = {}
for kind, f in calls.items():
    ctypes.set_errno(0); rc = f(); out[kind] = [rc, ctypes.get_errno()]
print(json.dumps(out))
'''


def _remove_named_objects(key: int) -> None:
    "Remove what a job may have left under `key` in this process's IPC namespace (landlock mode shares the host's)."
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    for get, rm in ((lambda: libc.shmget(key, 0, 0), lambda i: libc.shmctl(i, 0, None)),
                    (lambda: libc.semget(key, 0, 0), lambda i: libc.semctl(i, 0, 0)),
                    (lambda: libc.msgget(key, 0), lambda i: libc.msgctl(i, 0, None))):
        i = get()
        if i >= 0: rm(i)
    libc.mq_unlink(b"/cwm-nb-%d" % key)


def test_no_kernel_object_outlives_a_job(sb):
    """System V IPC, POSIX message queues and key rings outlive the job that makes them, and a later job finds them by
    key or name: a job that could make one could leave what it was shown for the next. The calls are refused (EPERM)
    in every kernel mode, and a later job finds nothing under the same key (where refusing failed, it would)."""
    kernel_only(sb)
    assert sb.protections["ipc_apart"], sb.protections
    key = 0x43570000 + os.getpid() % 0xFFFF
    try:
        made = json.loads(sb.run(NAMED_OBJECTS % (key, True, key)).stdout)
        found = json.loads(sb.run(NAMED_OBJECTS % (key, False, key)).stdout)
    finally: _remove_named_objects(key)
    assert set(made) == {"shm", "sem", "msg", "mq", "key"}, made
    assert all(v == [-1, 1] for v in made.values()), made      # EPERM: refused by seccomp
    assert all(v[0] == -1 for v in found.values()), found


IPC_NAMESPACE = "import os\ndef ns():\n    return os.readlink('/proc/self/ns/ipc')\nprint(ns())\n"


def test_an_ipc_namespace_per_job_in_bwrap_without_root(sb):
    """Where jobs get namespaces of their own (bwrap without root), IPC is one of them: two jobs alive at once are in
    different IPC namespaces, each gone with its job; with a uid per job they share the server's, as protections say."""
    bwrap_only(sb)
    _, other = sb.open_session(IPC_NAMESPACE, "cwm_nb.sandbox.programs:function_session")
    try:
        theirs, mine = other.call({"name": "ns"}).value, sb.run(IPC_NAMESPACE).stdout.strip()
    finally: other.close()
    assert theirs.startswith("ipc:[") and mine.startswith("ipc:["), (theirs, mine)
    own = sb.protections["jobs_apart"] == "pid namespace per job"
    assert (theirs != mine) == own, (theirs, mine, sb.protections["jobs_apart"])
    assert ("IPC namespace per job" in sb.protections["ipc_apart"]) == own, sb.protections["ipc_apart"]


def test_token_in_real_home_not_leaked(sb, secret_env):
    "A token file in the real home directory (found through pwd) reaches neither output nor error text."
    kernel_only(sb)
    r = sb.run("import pwd, os\nhome = pwd.getpwuid(%d).pw_dir\nt = open(os.path.join(home, '.cwm_nb_test_token')).read()\n"
               "print(t)\nraise ValueError(t)" % os.getuid())
    text = json.dumps([r.stdout, r.stderr, r.error, r.value])
    assert TOKEN not in text and r.error["kind"] == "exception", r.error


def test_secrets_not_visible(sb):
    assert os.environ["OPENAI_API_KEY"] == "sk-test-secret"
    r = sb.run("import os, glob, json\nenv = [k for k in os.environ if 'KEY' in k or 'sk-test' in os.environ[k]]\nproc = []\n"
               "for f in glob.glob('/proc/*/environ'):\n    try:\n        proc += [f] if b'sk-test' in open(f, 'rb').read() else []\n"
               "    except OSError:\n        pass\nprint(json.dumps(dict(env=env, proc=proc, names=sorted(os.environ))))")
    assert r.ok, r.error
    seen = json.loads(r.stdout)
    assert seen["env"] == [] and "OPENAI_API_KEY" not in seen["names"], seen   # the job's environment is stripped
    if sb.isolation in KERNEL_MODES:   # no other process's environment can be read (own pid namespace; Landlock)
        assert seen["proc"] == [], seen   # (isolation='none' cannot hide /proc of processes that run as the same uid)
        r = sb.run("print(open('/proc/%d/environ', 'rb').read())" % os.getpid())   # the workbook's, by pid
        assert not r.ok and "sk-test" not in json.dumps([r.stdout, r.error]), r.error
    if sb.isolation == "bwrap":
        r = sb.run("import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))")
        assert max(eval(r.stdout)) < 100, r.stdout   # only the sandbox's own processes are visible


# --- wrong programs ---------------------------------------------------------------------------------------------

def test_syntax_error_names_the_line(sb):
    r = sb.run("import numpy as np\n\nclass Environment:\n    def step(self, a)\n        return a\n")
    assert r.error["kind"] == "syntax" and r.error["line"] == 4, r.error
    assert r.error["source_line"] == "def step(self, a)"


def test_missing_environment(sb):
    sb.put_data("one", {"obs": [np.zeros(2, np.float32)], "actions": [np.int64(0)]})
    r = sb.run("class Env:\n    pass", "cwm_nb.sandbox.drivers:cwm_predict", data_key="one")
    assert r.error["kind"] == "no_environment", r.error


LIAR = """
import numpy as np
class Yes(float):
    def __eq__(self, other): return True
    __hash__ = float.__hash__
class Long(list):
    def __len__(self): return 4
    def __eq__(self, other): return True
class Environment:
    def set_state(self, s): self.s = s
    def step(self, a):
        if a == 0: return Long([0.0]), 1.0, False
        return self.s, Yes(1.0), False
"""


def test_lying_return_values(sb):
    "Lying objects never reach the parent: each becomes None in its row and a note of what it was."
    sb.put_data("liar", {"obs": [np.zeros(4, np.float32)] * 2, "actions": [np.int64(1), np.int64(0)]})
    r = sb.run(LIAR, "cwm_nb.sandbox.drivers:cwm_predict", data_key="liar")
    assert r.ok, r.error
    assert r.value["predictions"] == [[[0.0] * 4, None, False], [None, 1.0, False]]
    (i0, part0, why0), (i1, part1, why1) = r.value["malformed"]
    assert (i0, part0, i1, part1) == (0, "reward", 1, "next_obs")
    assert "not Yes" in why0 and "type Long" in why1, r.value["malformed"]


def test_exception_blames_program_line_and_transition(sb):
    sb.put_data("three", {"obs": [np.zeros(2, np.float32)] * 3, "actions": [np.int64(0), np.int64(1), np.int64(2)]})
    src = "class Environment:\n    def set_state(self, s): self.s = s\n    def step(self, a):\n        return self.s, 1.0 / (2 - int(a)), False\n"
    r = sb.run(src, "cwm_nb.sandbox.drivers:cwm_predict", data_key="three")
    e = r.error
    assert (e["kind"], e["index"], e["line"], e["exc_type"]) == ("exception", 2, 4, "ZeroDivisionError"), e
    assert "transition 2" in e["message"] and "line 4" in e["message"]
    r = sb.run(src, "cwm_nb.sandbox.drivers:cwm_predict", {"n": 2}, data_key="three")
    assert r.ok and [p[1] for p in r.value["predictions"]] == [0.5, 1.0]


# --- the happy path ---------------------------------------------------------------------------------------------

CARTPOLE = """
import math
import numpy as np
class Environment:
    def set_state(self, s): self.s = np.asarray(s, dtype=np.float64)
    def step(self, action):
        x, x_dot, th, th_dot = (float(v) for v in self.s)
        f = 10.0 if int(action) == 1 else -10.0
        c, s = math.cos(th), math.sin(th)
        tmp = (f + 0.05 * th_dot ** 2 * s) / 1.1
        tha = (9.8 * s - c * tmp) / (0.5 * (4.0 / 3.0 - 0.1 * c ** 2 / 1.1))
        xa = tmp - 0.05 * tha * c / 1.1
        x, x_dot, th, th_dot = x + 0.02 * x_dot, x_dot + 0.02 * xa, th + 0.02 * th_dot, th_dot + 0.02 * tha
        self.s = np.array([x, x_dot, th, th_dot])
        done = bool(abs(x) > 2.4 or abs(th) > 12 * 2 * math.pi / 360)
        return self.s.astype(np.float32), 1.0, done
"""


def test_cwm_predict_matches_gymnasium_and_in_process(sb):
    import gymnasium as gym
    env = gym.make("CartPole-v1"); obs, _ = env.reset(seed=1); rng = np.random.default_rng(1)
    O, A, NO, D = [], [], [], []
    for _ in range(200):
        a = np.int64(rng.integers(2)); nobs, r, term, trunc, _ = env.step(int(a))
        O.append(obs); A.append(a); NO.append(nobs); D.append(term)
        obs = env.reset()[0] if term or trunc else nobs
    data = {"obs": O, "actions": A}
    sb.put_data("cartpole", data)
    r = sb.run(CARTPOLE, "cwm_nb.sandbox.drivers:cwm_predict", data_key="cartpole")
    assert r.ok, r.error
    assert r.value == run_in_process(CARTPOLE, "cwm_nb.sandbox.drivers:cwm_predict", data=data).value
    pred = r.value["predictions"]
    assert np.allclose([p[0] for p in pred], NO, rtol=1e-5, atol=1e-5)
    assert [p[2] for p in pred] == D and all(type(p[1]) is float for p in pred)
    plain = {"obs": np.array(O).tolist(), "actions": np.array(A).tolist(), "obs_dtype": "<f4", "action_dtype": "<i8"}
    sb.put_data("cartpole-plain", plain)
    assert sb.run(CARTPOLE, "cwm_nb.sandbox.drivers:cwm_predict", data_key="cartpole-plain").value == r.value


def test_call_function_and_stdout(sb):
    r = sb.run("def add(a, b):\n    print('adding')\n    return {'sum': a + b, 'arr': __import__('numpy').ones(2)}",
               "cwm_nb.sandbox.programs:call_function", {"name": "add", "args": [2, 3]})
    assert r.ok and r.value == {"sum": 5, "arr": [1.0, 1.0]} and r.stdout == "adding\n", r.error
    assert r.isolation == sb.isolation


def test_program_is_not_a_file_and_not_main(sb):
    r = sb.run("import sys\nprint(__name__, __file__ if '__file__' in dir() else None)\n"
               "if __name__ == '__main__':\n    raise SystemExit('ran the main block')")
    assert r.ok and r.stdout == "__cwm_program__ None\n", (r.error, r.stdout)


def test_get_sandbox_is_shared():
    if not _have_bwrap(): pytest.skip("bubblewrap is not installed")
    a, b = get_sandbox(), get_sandbox()
    assert a is b and a.isolation in KERNEL_MODES and a.run("print(1)").stdout == "1\n"


def test_bwrap_mode_protections(module_sandbox):
    bwrap_only(module_sandbox)
    p = module_sandbox.protections
    assert p["network_cut"] and p["read_only_root"] and p["pid_namespace"] and p["env_cleared"]
    if os.geteuid() == 0: assert p["job_uid"] not in (None, 0) and p["nproc_enforced"]


# --- choosing the isolation mode --------------------------------------------------------------------------------

def test_auto_takes_landlock_then_refuses(tmp_path, monkeypatch):
    "auto: bubblewrap that cannot make namespaces -> Landlock; neither -> an error that says what to do, never 'none'."
    from cwm_nb.core import CwmNbError
    fake = tmp_path / "bwrap"   # a bwrap that cannot create namespaces
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n"); fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    if not landlock_support():
        with Sandbox(LIMITS, isolation="auto") as sb:
            assert sb.isolation == "landlock" and sb.run("print(1)").isolation == "landlock"
    with pytest.raises(CwmNbError, match="Permission denied"): Sandbox(LIMITS, isolation="bwrap")
    monkeypatch.setattr(sandbox_module, "landlock_support", lambda: "the kernel has no Landlock (test)")
    with pytest.raises(CwmNbError, match="(?s)no isolation for generated code.*CWM_NB_ISOLATION=none"): Sandbox(LIMITS)
    with pytest.raises(CwmNbError, match="no Landlock"): Sandbox(LIMITS, isolation="landlock")
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(CwmNbError, match="not installed"): Sandbox(LIMITS, isolation="bwrap")
    with Sandbox(LIMITS, isolation="none") as sb: assert sb.run("print(1)").isolation == "none"   # only when named


def test_isolation_from_the_environment(monkeypatch):
    "CWM_NB_ISOLATION chooses the mode of every Sandbox made without one, and passes to child processes."
    from cwm_nb.core import CwmNbError
    monkeypatch.setenv("CWM_NB_ISOLATION", "none")
    with Sandbox(LIMITS) as sb: assert sb.isolation == "none"
    monkeypatch.setenv("CWM_NB_ISOLATION", "nsjail")
    with pytest.raises(CwmNbError, match="unknown CWM_NB_ISOLATION 'nsjail'"): Sandbox(LIMITS)
    from cwm_nb.experiments.sweeps import _env_vars
    monkeypatch.setenv("CWM_NB_ISOLATION", "landlock")
    assert _env_vars()["CWM_NB_ISOLATION"] == "landlock"   # every sweep job gets it (local, Dask, SLURM)


def test_isolation_reaches_a_papermill_kernel(tmp_path, monkeypatch):
    "The variable reaches the kernel of a papermill run (how `cwm-nb run` executes the experiment notebooks)."
    _skip_unavailable("landlock")
    import nbformat, papermill as pm
    from cwm_nb.experiments.notebooks import KERNEL_NAME
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("from cwm_nb.sandbox.jobs import Sandbox\nwith Sandbox() as sb:\n    print(sb.isolation)")]
    nbformat.write(nb, tmp_path/"in.ipynb")
    monkeypatch.setenv("CWM_NB_ISOLATION", "landlock")
    out = pm.execute_notebook(str(tmp_path/"in.ipynb"), str(tmp_path/"out.ipynb"), kernel_name=KERNEL_NAME, progress_bar=False)
    assert out.cells[0].outputs[0]["text"].strip() == "landlock"


def test_cli_isolation_option_reaches_eval_program_json(tmp_path):
    "`cwm-nb eval-program --json --isolation landlock`: the record names the mode that ran."
    _skip_unavailable("landlock")
    prog = Path(__file__).resolve().parents[1]/"data"/"programs"/"CartPole-v1.py"
    p = subprocess.run([sys.executable, "-c", "import sys; from cwm_nb.experiments.cli import main; sys.exit(main(sys.argv[1:]))",
                        "eval-program", str(prog), "--env", "CartPole-v1", "--json", "--no-determinism", "--isolation", "landlock"],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "CWM_NB_ISOLATION": "bwrap"})
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["isolation"] == "landlock" and d["accuracy"] == 1.0, d


def test_before_exec_can_answer_for_the_program():
    "A driver's before_exec that returns a value answers the job; the program is then not executed in this process."
    from cwm_nb.sandbox.programs import _execute
    seen = []
    def driver(ns, args, data):
        seen.append(ns["x"]); return "driver"
    driver.before_exec = lambda args, data, source, in_job: None
    assert _execute("x = 1\n", driver, None, None) == "driver" and seen == [1]
    driver.before_exec = lambda args, data, source, in_job: {"answer": args["k"]}
    assert _execute("raise SystemExit('must not run')\n", driver, {"k": 3}, None) == {"answer": 3} and seen == [1]


# --- landlock as a non-root user, without bubblewrap ----------------------------------------------------------------

TEST_USER = "cwmnbtest"


def _blocked_dir(path: str) -> str | None:
    "The highest ancestor of `path` that other users cannot cross (no o+x), or None."
    for a in reversed(Path(path).parents):
        if str(a) != "/" and not os.stat(a).st_mode & 0o001: return str(a)
    return None


def _expose_script(paths: list[str]) -> str:
    """Shell lines for a private mount namespace in which other users can reach `paths`: a directory they cannot cross
    (e.g. /root, above pyenv's interpreter) is covered by an empty tmpfs (mode 755) with the needed parts bound back."""
    lines, done = ["set -e", "mount --make-rprivate /"], set()
    for blocked in sorted({b for b in map(_blocked_dir, paths) if b}):
        if blocked in done: continue
        done.add(blocked)
        parts = sorted({str(Path(blocked)/Path(p).relative_to(blocked).parts[0]) for p in paths if _blocked_dir(p) == blocked})
        keep = "/run/cwmnb-expose"
        lines += [f"mkdir -p {keep}", f"mount -t tmpfs tmpfs {keep}"]
        for i, part in enumerate(parts): lines += [f"mkdir {keep}/{i}", f"mount --bind {part} {keep}/{i}"]
        lines.append(f"mount -t tmpfs -o mode=755 tmpfs {blocked}")
        for i, part in enumerate(parts): lines += [f"mkdir -p {part}", f"mount --move {keep}/{i} {part}"]
    return "\n".join(lines)


def test_child_run_is_a_user_without_bwrap():
    "In the child run of the test below: not root, no bubblewrap on PATH, and auto takes Landlock."
    if not os.environ.get("CWM_NB_TEST_CHILD"): pytest.skip("only in the child run")
    assert os.geteuid() != 0 and shutil.which("bwrap") is None
    with Sandbox(LIMITS) as sb: assert sb.isolation == "landlock" and sb.protections["job_uid"] is None


def _pytest_as_test_user(select: str, bwrap: bool, timeout: int, also: tuple = ()) -> subprocess.CompletedProcess:
    """As root: create a user, then run this file's tests (and those of the files `also`) selected by `select` (-k) as
    that user (a child pytest, via setpriv, in a private mount namespace that lets the user reach this interpreter),
    with or without bwrap on PATH. Removes the user after."""
    if os.geteuid() != 0: pytest.skip("needs root to create the test user (the non-root run is the child)")
    if os.environ.get("CWM_NB_TEST_CHILD"): pytest.skip("already the child run")
    for tool in ("useradd", "userdel", "setpriv", "unshare", "mount"):
        if not shutil.which(tool): pytest.skip(f"{tool} is not installed")
    created = False
    try: pw = pwd.getpwnam(TEST_USER)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", TEST_USER], check=True, capture_output=True)
        created, pw = True, pwd.getpwnam(TEST_USER)
    shutil.rmtree(f"/tmp/pytest-of-{TEST_USER}", ignore_errors=True)   # left by a run whose test user had another uid
    try:
        root = Path(__file__).resolve().parents[1]
        venv_bin = Path(sys.executable).parent   # the venv's bin: python and pytest, and no bwrap
        assert not (venv_bin/"bwrap").exists()
        path = f"{venv_bin}:{Path(shutil.which('bwrap')).parent}" if bwrap else str(venv_bin)
        need = [os.path.realpath(sys.executable), sys.prefix, sys.base_prefix, str(root)]
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": pw.pw_dir, "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
               "PYTHONPATH": str(root), "CWM_NB_TEST_CHILD": "1", "TMPDIR": "/tmp"}
        run = (f"exec env PATH={path} {shutil.which('setpriv')} --reuid={pw.pw_uid} --regid={pw.pw_gid} --clear-groups --inh-caps=-all -- "
               f"{sys.executable} -m pytest -p no:cacheprovider -q -x -rs -k '{select}' {Path(__file__)} "
               + " ".join(str(Path(__file__).parent/f) for f in also) + " -o addopts=''")
        return subprocess.run([shutil.which("unshare"), "--mount", "sh", "-c", _expose_script(need) + "\n" + run], cwd=str(root),
                              capture_output=True, text=True, timeout=timeout, env=env)
    finally:
        if created: subprocess.run(["userdel", "--remove", TEST_USER], capture_output=True)


def _passed(p: subprocess.CompletedProcess) -> int:
    "How many tests the child pytest passed; asserts it ended well."
    tail = (p.stdout + p.stderr)[-3000:]
    assert p.returncode == 0, tail
    assert "failed" not in p.stdout.splitlines()[-1], tail
    return int(next(l for l in p.stdout.splitlines()[::-1] if " passed" in l).split(" passed")[0].split()[-1])


@pytest.mark.timeout(900)
def test_hostile_programs_as_a_non_root_user(tmp_path):
    """As root: run this file's landlock tests (and test_gaming.py's and test_sandbox_files.py's) again as a user it
    creates, with no bwrap on PATH."""
    _skip_unavailable("landlock")
    p = _pytest_as_test_user("landlock or child_run", bwrap=False, timeout=850, also=("test_gaming.py", "test_sandbox_files.py"))
    assert _passed(p) >= 30, (p.stdout + p.stderr)[-3000:]
    skips = [l for l in p.stdout.splitlines() if l.startswith("SKIPPED")]   # only tests of other modes may skip, and
    assert all("isolation='none'" in l or "needs bubblewrap" in l or "needs git" in l for l in skips), skips   # git:
    # it lives beside bwrap, off this run's PATH (the git probe runs as root in both modes, and in bwrap as this user)


@pytest.mark.timeout(400)
def test_hostile_programs_in_bwrap_as_a_non_root_user():
    """As root: this file's bwrap tests (and test_sandbox_files.py's) as a user it creates, bwrap on PATH (there a user,
    pid and mount namespace per job keeps jobs apart, and each writes in a tmpfs of its own)."""
    _skip_unavailable("bwrap")
    p = _pytest_as_test_user("bwrap and not non_root and not child_run", bwrap=True, timeout=350,
                             also=("test_sandbox_files.py",))
    assert _passed(p) >= 30, (p.stdout + p.stderr)[-3000:]   # test_jobs_apart[bwrap] among them, not skipped:
    skips = [l for l in p.stdout.splitlines() if l.startswith("SKIPPED")]
    assert not any("jobs_apart" in l or "tmpfs of its own" in l for l in skips), skips


def test_not_linux_refuses(monkeypatch):
    "On macOS (or any system but Linux) no sandbox starts, so no generated code runs (see the guide)."
    from cwm_nb.core import CwmNbError
    monkeypatch.setattr(sys, "platform", "darwin")
    with pytest.raises(CwmNbError, match="the sandbox needs Linux"): Sandbox(LIMITS)


def test_planning_uses_the_program_in_every_mode(sb):
    """The planner forks the program's model side inside the job (15a_plan_driver): that fork must work in every mode
    (under Landlock it cannot list /proc/self/fd). The reference CartPole program then plans as well as the oracle."""
    from cwm_nb.core import data_dir
    from cwm_nb.bench.oracle import evaluate_planning
    src = (data_dir()/"programs"/"CartPole-v1.py").read_text()
    pr = evaluate_planning("CartPole-v1", src, episodes=1, preset="quick", seed=0, sandbox=sb, progress=False)
    assert (pr.fallbacks, pr.normalized_return) == (0, 1.0), pr.fallback_kinds


CPUS_SEEN = "import os\ndef cpus():\n    return sorted(os.sched_getaffinity(0))\n"


def test_a_fed_session_opened_apart_polls_on_cpus_apart(sb, monkeypatch):
    """`open_session(poll=True, apart=True)` (as fed evaluations open theirs, 13b): the job keeps to one half of this
    thread's CPUs, each `feed` holds this thread to the other half while it polls and then gives back what it had;
    without `apart` the job may run anywhere (03_sandbox, `cpu_halves` in 02_syscalls)."""
    mine = os.sched_getaffinity(0)
    if len(mine) < 2: pytest.skip("one CPU: nothing to keep apart, and neither side polls")
    during, real = [], sandbox_module._shm_wait
    def waiting(*a):   # this thread's CPUs while it polls for an answer
        during.append(os.sched_getaffinity(0)); return real(*a)
    monkeypatch.setattr(sandbox_module, "_shm_wait", waiting)
    for apart in (True, False):
        during.clear()
        first, s = sb.open_session(CPUS_SEEN, "cwm_nb.sandbox.programs:function_session", poll=True, apart=apart)
        assert s is not None, first.error
        with s: res = s.feed([{"name": "cpus", "args": []}] * 3)
        assert [r.ok for r in res] == [True] * 3, res[-1].error
        job = set(res[0].value)
        assert during and os.sched_getaffinity(0) == mine, (during, os.sched_getaffinity(0))
        if apart: got = (not job & s.cpus, job | s.cpus, all(d == s.cpus for d in during))
        else: got = (s.cpus is None, job, all(d == mine for d in during))
        assert got == (True, mine, True), (apart, job, s.cpus, during)


def test_in_process_a_driver_can_be_the_function_itself_and_its_program_error_is_reported():
    "run_in_process takes a driver function as well as its name; the program's error comes back as a result."
    r = run_in_process("def main():\n    return 1 / 0", call_function, {"name": "main"})
    assert not r.ok and r.error["kind"] == "exception" and r.error["message"].startswith("ZeroDivisionError"), r.error
    assert run_in_process("def main(): return [1, 2]", call_function, {"name": "main"}).value == [1, 2]


def test_a_sandboxed_job_names_its_driver(sb):
    "A driver function cannot cross into the server: the job is refused in the parent with a clear error."
    with pytest.raises(sandbox_module.CwmNbError, match="names its driver, not a function"):
        sb.run("x = 1", exec_only)


PARTS = ('from cwm_nb.sandbox.programs import reply\nimport time\n'
         'def count(n, size=1):\n    for i in range(n - 1): reply([i] * size)\n    return [n - 1] * size\n'
         'def burn():\n    reply("started")\n    while True: pass\n'
         'def nap():\n    reply("started")\n    time.sleep(30)\n'
         'def forever():\n    while True: reply(0)\n')


def test_a_call_answered_in_parts_comes_in_order_and_keeps_the_session_in_step(sb):
    """`stream` gives each part of one call's answer (`reply` in the job), small ones through the shared area and ones
    larger than it through the pipes; the next call is a call of its own; leaving a stream early ends the session."""
    from cwm_nb.sandbox.syscalls import SHM_AREA
    _, s = sb.open_session(PARTS, "cwm_nb.sandbox.programs:function_session", poll=True)
    assert s.direct and s._shm is not None
    for size in (1, SHM_AREA // 8):   # the second: each part ~3x the shared area
        got = [(r.ok, r.more, r.value) for r in s.stream({"name": "count", "args": [4, size]})]
        assert got == [(True, True, [0] * size), (True, True, [1] * size), (True, True, [2] * size),
                       (True, False, [3] * size)], [g[:2] for g in got]
    assert s.call({"name": "count", "args": [1]}).value == [0]   # in step
    for r in s.stream({"name": "count", "args": [5]}): break
    assert not s.alive   # left mid-answer: the session ended


@pytest.mark.parametrize("fn", ["burn", "nap"])
def test_a_cpu_cap_ends_a_call_that_burns_it_and_spares_one_that_sleeps(sb, fn):
    """`cap_cpu` holds in every mode: this process reads the job's CPU clock while it waits and kills a job past its cap
    (a `cpu` error, long before the wall-clock limit); a job that sleeps spends nothing and meets the wall-clock limit."""
    _, s = sb.open_session(PARTS, "cwm_nb.sandbox.programs:function_session", poll=True)
    s.cap_cpu(0.3)
    t = time.monotonic()
    got = list(s.stream({"name": fn}, wall_s=4))
    took = time.monotonic() - t
    assert got[0].value == "started" and not got[-1].ok and not s.alive, got[-1].error
    if fn == "burn": assert got[-1].error["kind"] == "cpu" and took < 3, (got[-1].error, took)
    else: assert got[-1].error["kind"] == "timeout" and took >= 3.9, (got[-1].error, took)


@pytest.mark.parametrize("cap", [None, 0.3])
def test_parts_without_end_meet_the_wall_clock_limit_or_the_cpu_cap(sb, cap):
    """A job that answers in parts forever, each part in time for the caller's polling, still meets the stream's
    wall-clock limit, or its CPU cap, which the caller checks at each part. The cap's wall-clock limit is far beyond
    it: on a busy machine the job may get a small share of a CPU."""
    _, s = sb.open_session(PARTS, "cwm_nb.sandbox.programs:function_session", poll=True)
    if cap: s.cap_cpu(cap)
    t, wall = time.monotonic(), (20 if cap else 1.5)
    n, last = 0, None
    for last in s.stream({"name": "forever"}, wall_s=wall): n += 1
    took = time.monotonic() - t
    assert n > 10 and not last.ok and not s.alive and took < wall + 4.5, (n, last.error, took)
    assert last.error["kind"] == ("cpu" if cap else "timeout"), last.error


def test_a_decision_planned_by_the_caller_keeps_its_cpu_cap(sb):
    """MCTS planned in this process (15a_plan_session) caps the job, which runs the program, in every mode and as any
    user: in bwrap without root the job sits below its pid namespace's keeper and init, and its own clock is read."""
    from cwm_nb.bench.plan_session import decide_in_session
    prog = "class Environment:\n    def set_state(self, s): pass\n    def step(self, a):\n        while True: pass\n"
    args = {"planner": "mcts", "config": {"simulations": 4, "rollout_steps": 5}, "obs_format": "array",
            "space": {"kind": "discrete", "n": 2}, "valid_actions": False, "session": True, "model_only": True,
            "decision_cpu_s": 0.5}
    first, s = sb.open_session(prog, "cwm_nb.bench.plan_driver:plan_driver", args=args, poll=True)
    assert first.ok and s.direct, first.error
    t = time.monotonic()
    r = decide_in_session(s, prog, args, {"state": [0.0] * 4, "obs_dtype": "<f4", "root_actions": None, "seed": 0},
                          wall_s=30)
    assert not r.ok and r.error["kind"] == "cpu" and not s.alive and time.monotonic() - t < 15, r.error
