"""Sandbox overhead on the hot path: a correct CartPole CWM predicting 1,000 transitions.

Measured side by side in one run (interleaved, median of repeats), in each isolation mode (--modes):
  in-process : exec(compile(source)) + cwm_predict (set_state/step + strict conversion) + to_plain_value
  before     : the old data flow, kept here to compare: the buffer's inputs stored once in the fork server
               (put_data), then Sandbox.run(source, cwm_predict, data_key=...): one job holds every observation
  after      : run_on_buffer (13b_program_runs): a cwm_batches session fed the transitions in order, batch k the
               k-th transition of every episode, each answered before the next is handed over (SandboxSession.feed),
               the payloads made while the job starts (open_session's `meanwhile`), each pickled while the job answers
               the one before;
               the session is direct (03_sandbox): this process puts each batch in a region of memory it shares with
               the job and reads the answer there (the pipes carry what does not fit), the fork server is not on the
               way; both sides poll for the other `spin_s` (SPIN_S, 02_syscalls), each kept to its own half of the CPUs
               (`open_session(apart=True)`, `cpu_halves` in 02_syscalls)
  not apart  : the same with the two sides free to share a CPU (cpu_halves patched out), as before `apart`
  no polling : the same with Sandbox(spin_s=0)
  pipes only : `after` with the session's shared region left unmapped, so the pipes carry every batch and answer
  server     : the same session's batches fed through the fork server (the path of a session whose pipes could not be
               passed: SandboxSession without pipes), side by side with the direct one
  floor      : no sandbox at all: a child forked from this process compiles the program and answers the same 72 batches
               over two plain pipes (pickled calls, encode_result answers, decode_result here), or through a shared
               region with the session's protocol (02_syscalls), each after the one before; what feeding in order
               costs on this machine before any isolation (--repeats; --no-floor skips it)
  least      : less than the floor: workers forked and warmed (02c `warm_batches`) before the clock starts, the batches
               already in their memory, each answered when a counter in shared memory says so, the answers kept in the
               worker (nothing sent either way, nothing isolated); one worker, and two with the episodes split between
               them: the least that feeding in order costs here, whatever the protocol (--no-floor skips it)
Also: the default flow with the job's answers written by the standard library's json instead of `encode_result`
(orjson), alternated; and the default flow on a sandbox whose pre-forked child skips its warm-up (`warm_up=False`,
02d_fork_server), alternated. The goal is sandboxed / in-process <= 1.2 (issue #35, P1). Also shown: the round trip of an empty program (the fixed
per-job cost), the number of batches, and where the time of one evaluation in the default flow goes.

Run: .venv/bin/python benchmarks/bench_sandbox.py [--repeats 41] [--n 1000] [--modes bwrap,landlock]
"""
import argparse, contextlib, statistics, time
from pathlib import Path
import numpy as np

# the tests' CartPole program (written from the physics), so the benchmark scores the same code the tests do
CARTPOLE_CWM = (Path(__file__).resolve().parents[1]/'data'/'programs'/'CartPole-v1.py').read_text()


def collect(n: int, seed: int = 0):
    "n CartPole-v1 transitions under a seeded uniform random policy (resets on termination/truncation), as a ReplayBuffer."
    import gymnasium as gym
    from cwm_nb.bench.replay import ReplayBuffer
    env = gym.make("CartPole-v1")
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    O, A, NO, R, T, TR, E, ep = [], [], [], [], [], [], [], 0
    for _ in range(n):
        a = np.int64(rng.integers(2))
        nobs, r, term, trunc, _ = env.step(int(a))
        O.append(obs); A.append(a); NO.append(nobs); R.append(float(r)); T.append(bool(term)); TR.append(bool(trunc))
        E.append(ep)
        if term or trunc: obs, ep = env.reset()[0], ep + 1
        else: obs = nobs
    return ReplayBuffer(obs=np.array(O), actions=np.array(A), next_obs=np.array(NO), rewards=np.array(R),
                        terminated=np.array(T), truncated=np.array(TR), episode=np.array(E),
                        meta={"env": "CartPole-v1"})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=41)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--modes", default="bwrap,landlock", help="isolation modes to compare, comma-separated (bwrap, landlock, none)")
    ap.add_argument("--no-floor", action="store_true", help="skip the floor (the batches answered by a plain forked child)")
    a = ap.parse_args()
    from cwm_nb.sandbox.jobs import Sandbox
    from cwm_nb.sandbox.programs import run_in_process, to_plain_value, _execute, _resolve_driver
    from cwm_nb.bench.program_runs import episode_batches, run_on_buffer, sandbox_inputs
    from cwm_nb.bench.cwm import score_predictions

    buf = collect(a.n)
    data = sandbox_inputs(buf)
    print(f"{a.n} CartPole transitions, {len(buf.episode_bounds())} episodes, the longest {max(buf.episode_lengths())} "
          f"transitions: {len(episode_batches(buf))} batches")

    # sanity: the program is right, and both sandboxed flows return what the in-process run returns
    ref = run_in_process(CARTPOLE_CWM, "cwm_nb.sandbox.drivers:cwm_predict", data=data)
    assert ref.ok, ref.error
    print(f"CartPole CWM vs gymnasium: accuracy {score_predictions(ref.value['predictions'], buf).accuracy:.4f}")

    drv = _resolve_driver("cwm_nb.sandbox.drivers:cwm_predict")

    def in_process():
        t = time.perf_counter()
        to_plain_value(_execute(CARTPOLE_CWM, drv, None, data))
        return time.perf_counter() - t

    modes = [m for m in a.modes.split(",") if m]
    sbs = {}
    for m in modes:
        t = time.perf_counter(); sb = Sandbox(isolation=m); t_start = time.perf_counter() - t
        old = Sandbox(isolation=m)   # the old flow on a sandbox of its own: its stored buffer reaches every later job
        still = Sandbox(isolation=m, spin_s=0)   # the new flow without polling
        old.put_data("cartpole", data)
        print(f"sandbox: isolation={sb.isolation}, start {t_start * 1e3:.0f} ms")
        assert old.run(CARTPOLE_CWM, "cwm_nb.sandbox.drivers:cwm_predict", data_key="cartpole").value == ref.value
        assert run_on_buffer(sb, CARTPOLE_CWM, buf, "cwm_nb.sandbox.drivers:cwm_predict").value == ref.value
        sbs[m] = (old, sb, still)

    def before(m):
        t = time.perf_counter()
        r = sbs[m][0].run(CARTPOLE_CWM, "cwm_nb.sandbox.drivers:cwm_predict", data_key="cartpole")
        dt = time.perf_counter() - t
        assert r.ok, r.error
        return dt

    def after(m, which=1):
        t = time.perf_counter()
        r = run_on_buffer(sbs[m][which], CARTPOLE_CWM, buf, "cwm_nb.sandbox.drivers:cwm_predict")
        dt = time.perf_counter() - t
        assert r.ok, r.error
        return dt

    def not_apart(m):
        "`after` with the job and the parent free to share a CPU (no `cpu_halves`): the scheduler places both."
        with free_cpus(): return after(m)

    def pipes_only(m):
        "`after` with the session's shared region left unmapped: every call and answer goes through the pipes."
        with no_shared_region(): return after(m)

    def through_server(m):
        "run_on_buffer's work with the session's calls run by the server (the session left without its pipes)."
        from cwm_nb.sandbox.jobs import SandboxSession
        from cwm_nb.bench.program_runs import _labelled, _payloads, _in_buffer_order
        sb = sbs[m][1]
        t = time.perf_counter()
        inp = sandbox_inputs(buf, True); batches = episode_batches(buf)
        form = {k: inp[k] for k in ("obs_dtype", "action_dtype", "obs_format", "valid_actions")}
        first, sid, pipes = sb._submit(CARTPOLE_CWM, "cwm_nb.sandbox.drivers:cwm_batches", form, None, None, session=True, poll=True)
        pipes.close()
        res = SandboxSession(sb, sid, sb.limits, None, True).feed(_payloads(inp, batches, False, _labelled(len(buf))), close=True)
        _in_buffer_order(res, batches, len(buf), 1)
        dt = time.perf_counter() - t
        assert first.ok and len(res) == len(batches) and all(r.ok for r in res)
        return dt

    def empty(m):
        t = time.perf_counter()
        r = sbs[m][1].run("pass")
        dt = time.perf_counter() - t
        assert r.ok, r.error
        return dt

    for _ in range(5):  # warm up every side
        in_process()
        for m in modes: before(m); after(m); after(m, 2); through_server(m); pipes_only(m); not_apart(m)
    T = {"in_process": []}
    for m in modes: T.update({f"{m}:{k}": [] for k in ("before", "after", "free", "still", "server", "empty", "pipes")})
    for rep in range(a.repeats):
        T["in_process"].append(in_process())
        for m in (modes if rep % 2 == 0 else modes[::-1]):   # alternate the order: no mode always follows another's cleanup
            T[f"{m}:before"].append(before(m)); time.sleep(0.02)
            T[f"{m}:after"].append(after(m)); time.sleep(0.02)
            T[f"{m}:free"].append(not_apart(m)); time.sleep(0.02)
            T[f"{m}:still"].append(after(m, 2)); time.sleep(0.02)
            T[f"{m}:pipes"].append(pipes_only(m)); time.sleep(0.02)
            T[f"{m}:server"].append(through_server(m)); time.sleep(0.02)
            T[f"{m}:empty"].append(empty(m)); time.sleep(0.02)
    med = {k: statistics.median(v) for k, v in T.items()}
    nb = len(episode_batches(buf))
    print(f"\n{a.n} transitions, median of {a.repeats} interleaved repeats:")
    print(f"  in-process  (exec + set_state/step + to_plain)  {med['in_process'] * 1e3:7.2f} ms"
          f"  ({med['in_process'] / a.n * 1e6:.1f} us/transition)")
    print(f"  {'mode':9s} {'before':>9s} {'ratio':>6s} {'after':>9s} {'ratio':>6s} {'paired':>6s} {'not apart':>9s} {'ratio':>6s} {'paired':>6s} {'no polling':>10s} "
          f"{'ratio':>6s} {'pipes only':>10s} {'ratio':>6s} {'server':>9s} {'ratio':>6s} {'empty job':>9s} {'after - before':>14s} {'per batch':>9s}")
    for m in modes:
        paired = statistics.median(s / i for s, i in zip(T[f"{m}:after"], T["in_process"]))
        paired_free = statistics.median(s / i for s, i in zip(T[f"{m}:free"], T["in_process"]))
        split = med[m + ':after'] - med[m + ':before']
        print(f"  {m:9s} {med[m + ':before'] * 1e3:7.2f}ms {med[m + ':before'] / med['in_process']:6.2f} "
              f"{med[m + ':after'] * 1e3:7.2f}ms {med[m + ':after'] / med['in_process']:6.2f} {paired:6.2f} "
              f"{med[m + ':free'] * 1e3:7.2f}ms {med[m + ':free'] / med['in_process']:6.2f} {paired_free:6.2f} "
              f"{med[m + ':still'] * 1e3:8.2f}ms {med[m + ':still'] / med['in_process']:6.2f} "
              f"{med[m + ':pipes'] * 1e3:8.2f}ms {med[m + ':pipes'] / med['in_process']:6.2f} "
              f"{med[m + ':server'] * 1e3:7.2f}ms {med[m + ':server'] / med['in_process']:6.2f} "
              f"{med[m + ':empty'] * 1e3:7.2f}ms {split * 1e3:12.2f}ms {split / nb * 1e6:7.0f}us")
    print("  (ratio: sandboxed / in-process, goal <= 1.2; paired: the median of the per-repeat ratios; not apart: the "
          "default flow with the job and the parent free to share a CPU; pipes only: "
          "the default flow with no shared memory; server: the batches fed through the fork server; empty job: a `pass` program's round trip; per batch: (after - before) / batches)")
    call_cost(sbs, modes)
    encoder_cost(sbs, modes, buf, a.repeats)
    warm_up_cost(sbs, modes, buf, a.repeats)
    if not a.no_floor: floor(buf, in_process, a.repeats); least(buf, in_process, a.repeats)
    for m in modes: profile(sbs[m][1], buf, m)
    for m in modes:
        for s_ in sbs[m]: s_.close()
    if "landlock" in modes: landlock_setup_cost(a.repeats)


@contextlib.contextmanager
def free_cpus():
    "Sessions opened meanwhile are not kept to CPUs apart from this thread's feeds (as before `apart`)."
    from cwm_nb.sandbox import jobs as sandbox_jobs
    real, sandbox_jobs.cpu_halves = sandbox_jobs.cpu_halves, lambda: None
    try: yield
    finally: sandbox_jobs.cpu_halves = real


@contextlib.contextmanager
def no_shared_region():
    "Sessions opened meanwhile leave their shared region unmapped: the pipes carry every call and answer."
    from cwm_nb.sandbox import jobs as sandbox_jobs
    real, sandbox_jobs.map_shared_region = sandbox_jobs.map_shared_region, lambda fd: None
    try: yield
    finally: sandbox_jobs.map_shared_region = real


def call_cost(sbs: dict, modes: list, blocks: int = 20) -> None:
    """One call of a fed session, both sides polling: an echo program fed 100 calls a feed, through the shared region
    and through the pipes alone (the region left unmapped), the two alternated; median of the feeds' per-call times."""
    print(f"\na call of a fed session (echo, 100 calls a feed, median of {blocks} feeds each, alternated):")
    for m in modes:
        sb, got = sbs[m][1], {True: [], False: []}
        for i in range(2 * blocks):
            shared = i % 2 == 0
            with contextlib.nullcontext() if shared else no_shared_region():
                _, s = sb.open_session("def f(x):\n    return x\n", "cwm_nb.sandbox.programs:function_session", poll=True)
            s.feed([{"name": "f", "args": [0]}] * 10)   # warm
            t = time.perf_counter(); res = s.feed([{"name": "f", "args": [j]} for j in range(100)])
            got[shared].append((time.perf_counter() - t) / 100)
            assert [r.value for r in res] == list(range(100)) and (s._shm is not None) == shared
            s.close()
        print(f"  {m:9s} shared memory {statistics.median(got[True]) * 1e6:5.1f} us, pipes alone "
              f"{statistics.median(got[False]) * 1e6:5.1f} us")


# prefixed to the program: the job's own module then encodes its answers as before orjson (json alone), or unchanged
JSON_ANSWERS = ("import sys as _s, json as _j\n_P = _s.modules['cwm_nb.sandbox.programs']\n"
                "_P.encode_result = lambda o: _j.dumps(o, default=_P._json_default, separators=(',', ':')).encode()\n")
SAME_ANSWERS = ("import sys as _s, json as _j\n_P = _s.modules['cwm_nb.sandbox.programs']\n"
                "_P.encode_result = _P.encode_result\n")   # the same length of prefix, nothing changed


def alternated(runs: list, repeats: int) -> tuple[float, float, float]:
    """Time `runs[0]()` and `runs[1]()` (each returns a SandboxResult) alternated ABBA, 10 ms apart, `repeats` times
    each after four that warm up: (the first's median s, the second's, the median of the paired ratios first / second)."""
    got = ([], [])
    for i in range(2 * repeats + 4):
        w = (i + i // 2) % 2   # ABBA: neither always goes first
        t = time.perf_counter()
        r = runs[w]()
        dt = time.perf_counter() - t
        assert r.ok, r.error
        if i >= 4: got[w].append(dt)
        time.sleep(0.01)
    return statistics.median(got[0]), statistics.median(got[1]), statistics.median(a / b for a, b in zip(*got))


def warm_up_cost(sbs: dict, modes: list, buf, repeats: int) -> None:
    """The pre-forked child's warm-up (02d_fork_server, `_warm_up`): the default flow's evaluation on the benchmark's
    sandbox and on one with `warm_up=False`, `alternated`."""
    from cwm_nb.sandbox.jobs import Sandbox
    from cwm_nb.bench.program_runs import run_on_buffer
    print(f"\nthe pre-forked child's warm-up, the default flow with and without it (median of {repeats}, alternated):")
    for m in modes:
        with Sandbox(isolation=m, warm_up=False) as cold:
            on, off, paired = alternated([lambda box=box: run_on_buffer(box, CARTPOLE_CWM, buf,
                                          "cwm_nb.sandbox.drivers:cwm_predict") for box in (sbs[m][1], cold)], repeats)
        print(f"  {m:9s} warm-up {on * 1e3:6.2f} ms, none {off * 1e3:6.2f} ms: with / without {paired:.3f} (paired)")


def encoder_cost(sbs: dict, modes: list, buf, repeats: int) -> None:
    """The job's answers encoded by `encode_result` (orjson, 02b_programs) or by the standard library's json as before:
    the default flow's evaluation with either prefix, `alternated`."""
    from cwm_nb.bench.program_runs import run_on_buffer
    print(f"\nthe job's answers by orjson (encode_result) vs json alone, the default flow (median of {repeats}, alternated):")
    for m in modes:
        o, j, paired = alternated([lambda prefix=prefix: run_on_buffer(sbs[m][1], prefix + CARTPOLE_CWM, buf,
                                   "cwm_nb.sandbox.drivers:cwm_predict") for prefix in (SAME_ANSWERS, JSON_ANSWERS)],
                                  repeats)
        print(f"  {m:9s} orjson {o * 1e3:6.2f} ms, json {j * 1e3:6.2f} ms: orjson / json {paired:.3f} (paired)")


def floor(buf, in_process, repeats: int) -> None:
    """No isolation: a forked child answers the batches over plain pipes, or through a shared region as a direct
    session does, each after the one before (the protocol of the new flow with nothing else). Times fork to last answer
    decoded, interleaved with in-process runs."""
    import os, pickle
    from cwm_nb.sandbox import drivers
    from cwm_nb.sandbox.programs import encode_result, decode_result
    from types import SimpleNamespace
    from cwm_nb.bench.program_runs import _labelled, _payloads, _in_buffer_order, episode_batches, sandbox_inputs
    from cwm_nb.sandbox.syscalls import (SPIN_S, _CALLS, _recv_frame, _send_frame, _shm_put, _shm_take, _shm_wait,
                                         await_readable, make_shared_region, map_shared_region, spin_cap)
    from cwm_nb.sandbox.programs import _await_call, _send_answer

    def once(spin: float, shared: bool = False) -> tuple[float, float, float]:
        t0 = time.perf_counter()
        inp, batches = sandbox_inputs(buf, True), episode_batches(buf)
        form = {k: inp[k] for k in ("obs_dtype", "action_dtype", "obs_format", "valid_actions")}
        frames = [pickle.dumps(p, protocol=5) for p in _payloads(inp, batches, False, _labelled(len(buf)))]
        m = None
        if shared: m = map_shared_region(fd := make_shared_region()); os.close(fd)
        (r1, w1), (r2, w2) = os.pipe(), os.pipe()
        pid = os.fork()
        if pid == 0:   # the child: no limits, no namespaces, no Landlock
            try:
                ns: dict = {}
                exec(compile(CARTPOLE_CWM, "<cwm-program>", "exec"), ns)
                serve, busy, k = drivers.cwm_batches(ns, form), 0.0, 0
                _send_frame(w2, encode_result({"ok": True}))
                for _ in frames:
                    if shared:   # the session's protocol (02_syscalls): the call in the shared area, a counter polled
                        while not (got := _await_call(m, k, r1, spin)): os.read(r1, 8)   # a wake-up token
                        k = got
                        p = pickle.loads(_shm_take(m, k, _CALLS))
                    else:
                        if spin: await_readable(r1, spin)
                        p = pickle.loads(_recv_frame(r1))
                    t = time.perf_counter()
                    v = serve.handle(p); busy += time.perf_counter() - t
                    if shared: _send_answer({"ok": True, "value": v}, w2, m, k)
                    else: _send_frame(w2, encode_result({"ok": True, "value": v}))
                _send_frame(w2, repr(busy).encode())
            finally: os._exit(0)
        os.close(r1); os.close(w2)
        decode_result(_recv_frame(r2))
        answers, t1 = [], time.perf_counter()
        for k, f in enumerate(frames, 1):
            if shared:
                _shm_put(m, _CALLS, k, f, w1)
                while (a := _shm_wait(m, k, 1.0)) is None: pass
            else:
                _send_frame(w1, f)
                if spin: await_readable(r2, spin)
                a = _recv_frame(r2)
            answers.append(decode_result(a))
        t2 = time.perf_counter()
        value = _in_buffer_order([SimpleNamespace(value=a["value"]) for a in answers], batches, len(buf), 1)
        dt = time.perf_counter() - t0
        busy = float(_recv_frame(r2)); os.waitpid(pid, 0); os.close(w1); os.close(r2)
        if m is not None: m.close()
        assert len(value["predictions"]) == len(buf) and None not in value["predictions"]
        return dt, t2 - t1, busy

    spins = {"both sides polling": (spin_cap(SPIN_S), False), "blocking": (0.0, False),
             "shared memory": (spin_cap(SPIN_S), True)}
    for sp in spins.values():
        for _ in range(3): once(*sp)
    I, R = [], {k: [] for k in spins}
    for _ in range(repeats):
        I.append(in_process()); time.sleep(0.02)
        for k, sp in spins.items(): R[k].append(once(*sp)); time.sleep(0.02)
    mi = statistics.median(I)
    print(f"\nfloor, no sandbox: a forked child fed the same batches over plain pipes, or through shared memory as a "
          f"direct session's are (median of {repeats}, interleaved with "
          f"in-process, {mi * 1e3:.2f} ms)")
    for k, v in R.items():
        md = [statistics.median(x[i] for x in v) for i in range(3)]
        print(f"  {k:18s}: fork to last answer {md[0] * 1e3:6.2f} ms ({md[0] / mi:.2f} x in-process); the feed alone "
              f"{md[1] * 1e3:6.2f} ms ({md[1] / mi:.2f} x); the child's own handle() time {md[2] * 1e3:5.2f} ms")


def least(buf, in_process, repeats: int) -> None:
    """What feeding in order costs with nothing else: one or two workers forked before the clock starts, each warmed
    as the fork server's pre-forked child is (`warm_batches`), then given the program's source in shared memory; each
    compiles it and answers its batches (made before the fork: nothing is sent) one at a time, when its counter says
    so, keeping the answers. Both sides poll and yield the CPU between looks (three processes share two CPUs here).
    Times the source's hand-over to the last answer, interleaved with in-process runs."""
    import mmap, os
    from cwm_nb.sandbox import drivers
    from cwm_nb.sandbox.programs import PROGRAM_FILENAME, _new_program_module
    from cwm_nb.bench.program_runs import _form, _labelled, _payloads, fed_batches, sandbox_inputs
    form, batches = _form(buf), fed_batches(buf)
    payloads = _payloads(sandbox_inputs(buf, True), batches, False, _labelled(len(buf)))
    lengths = np.bincount(buf.episode)
    side, load = np.zeros(len(lengths), np.int64), [0, 0]
    for e in np.argsort(-lengths): side[e] = int(np.argmin(load)); load[side[e]] += lengths[e]   # longest first
    def part(w):   # worker w's batches: the transitions of its episodes, in the fed order
        out = []
        for b, p in zip(batches, payloads):
            keep = [i for i, t in enumerate(b) if side[buf.episode[t]] == w]
            if keep: out.append({"index": [p["index"][i] for i in keep], "obs": p["obs"][keep], "actions": p["actions"][keep]})
        return out
    parts = {1: [payloads], 2: [part(0), part(1)]}

    def once(nw: int) -> float:
        region = mmap.mmap(-1, 1 << 16)
        c = np.frombuffer(region, np.int64, 8)   # c[2w]: batches handed to worker w, c[2w+1]: answered; c[6]: the source's length; c[7]: a worker failed
        pids = []
        for w in range(nw):
            pid = os.fork()
            if pid == 0:
                try:
                    drivers.warm_batches()
                    while c[6] == 0: os.sched_yield()
                    mod = _new_program_module()
                    exec(compile(bytes(region[4096:4096 + int(c[6])]).decode(), PROGRAM_FILENAME, "exec"), mod.__dict__)
                    handle, kept = drivers.cwm_batches(mod.__dict__, form).handle, []
                    for k, p in enumerate(parts[nw][w], 1):
                        while c[2 * w] < k: os.sched_yield()
                        kept.append(handle(p)); c[2 * w + 1] = k
                except BaseException: c[7] = 1   # the loop below stops instead of waiting for ever
                finally: os._exit(0)
            pids.append(pid)
        time.sleep(0.02)   # the workers are warm
        t0 = time.perf_counter()
        src = CARTPOLE_CWM.encode(); region[4096:4096 + len(src)] = src; c[6] = len(src)
        left = [len(parts[nw][w]) for w in range(nw)]
        for w in range(nw): c[2 * w] = 1
        while any(left):
            os.sched_yield()
            if c[7]: raise RuntimeError("a worker of `least` failed")
            for w in range(nw):
                if left[w] and c[2 * w + 1] == c[2 * w]:
                    left[w] -= 1
                    if left[w]: c[2 * w] += 1
        dt = time.perf_counter() - t0
        for pid in pids: os.waitpid(pid, 0)
        del c; region.close()
        return dt

    for _ in range(3): once(1); once(2)
    I, R = [], {1: [], 2: []}
    for _ in range(repeats):
        I.append(in_process()); time.sleep(0.02)
        for nw in (1, 2): R[nw].append(once(nw)); time.sleep(0.02)
    mi = statistics.median(I)
    print(f"\nleast, no sandbox and nothing sent: warmed workers forked beforehand, their batches in memory, each "
          f"answered when a counter says so (median of {repeats}, interleaved with in-process, {mi * 1e3:.2f} ms)")
    for nw, label in ((1, "one worker"), (2, f"two workers ({load[0]} and {load[1]} transitions)")):
        paired = statistics.median(r / i for r, i in zip(R[nw], I))
        print(f"  {label:34s}: source to last answer {statistics.median(R[nw]) * 1e3:6.2f} ms "
              f"({statistics.median(R[nw]) / mi:.2f} x in-process, paired {paired:.2f})")


def profile(sb, buf, mode: str, repeats: int = 21) -> None:
    """Where the time of one evaluation in the default flow goes, spent as run_on_buffer spends it: the session's start
    (the payloads made meanwhile, `open_session(meanwhile=...)`, their own time shown apart), the feed (the session
    ended by it, close=True), the answers put in buffer order."""
    from cwm_nb.bench.program_runs import _form, _labelled, _payloads, _in_buffer_order, fed_batches, sandbox_inputs
    form = _form(buf)
    T = {k: [] for k in ("open", "of it the payloads", "feed", "merge")}
    for _ in range(repeats):
        made = {}
        def prepare():
            t = time.perf_counter(); made["batches"] = fed_batches(buf)
            made["payloads"] = _payloads(sandbox_inputs(buf, True), made["batches"], False, _labelled(len(buf)))
            made["s"] = time.perf_counter() - t
        t1 = time.perf_counter()
        first, sess = sb.open_session(CARTPOLE_CWM, "cwm_nb.sandbox.drivers:cwm_batches", form, poll=True,
                                      apart=True, meanwhile=prepare)   # as run_on_buffer
        t2 = time.perf_counter(); res = sess.feed(made["payloads"], close=True); t3 = time.perf_counter()
        _in_buffer_order(res, made["batches"], len(buf), 1); t4 = time.perf_counter()
        for k, v in zip(T, (t2 - t1, made["s"], t3 - t2, t4 - t3)): T[k].append(v)
        time.sleep(0.02)
    nb = len(made["batches"])
    print(f"\n{mode}: one evaluation in the default flow, median ms: " +
          ", ".join(f"{k} {statistics.median(v) * 1e3:.2f}" for k, v in T.items()) +
          f" (feed: {statistics.median(T['feed']) / nb * 1e6:.0f} us per batch)")


def landlock_setup_cost(repeats: int) -> None:
    "What the per-job Landlock ruleset costs: restrict_self timed inside forked children (the pre-forked child pays it)."
    import os, tempfile
    from cwm_nb.sandbox.landlock import make_policy, restrict_self, set_no_new_privs
    from cwm_nb.sandbox.fork_server import SYSTEM_READ
    from cwm_nb.sandbox.jobs import _listed_dirs, _needed_paths
    paths = _needed_paths()
    policy = make_policy(paths + list(SYSTEM_READ), ["/dev/null"], listed=_listed_dirs(paths))
    d = tempfile.mkdtemp()
    def one() -> float:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            set_no_new_privs()
            t = time.perf_counter(); restrict_self(policy, d)
            os.write(w, repr(time.perf_counter() - t).encode()); os._exit(0)
        os.close(w); dt = float(os.read(r, 100)); os.waitpid(pid, 0); os.close(r)
        return dt
    v = [one() for _ in range(repeats)]
    print(f"\nLandlock per job: restrict_self with {len(policy.rules) + 2} path rules, "
          f"median {statistics.median(v) * 1e6:.0f} us (in the pre-forked child, before the job arrives)")


if __name__ == "__main__":
    main()
