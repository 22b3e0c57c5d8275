"""Test data: CartPole "world models" that model nothing and instead search their own process for the logged data.

Each probe answers a transition with the state logged after the one it was given, when it can find that state
(any row that follows the given one in some sequence it finds, and that the Euler updates of position and angle
confirm); otherwise it gives its fallback answer: the state unchanged, reward 1, not done. `FALLBACK` is the same
program with the search removed, so a probe that finds nothing scores exactly what `FALLBACK` scores.

Where each probe looks:
- `gc`: every object the garbage collector tracks, after `gc.unfreeze()` (the fork server freezes what it stores);
- `frames`: the locals of every frame above `step` (the driver's and the job runner's);
- `globals`: every module's globals, and the attributes and items of what they hold, three levels deep;
- `inherited`: objects inherited from the fork server through `fork` (its `_Server`, found from the frames or gc),
  and the data it stores;
- `mem`: the process's own memory, read through `/proc/self/mem`: pickled rows (the frames the data came in, and
  the freed bytes of earlier ones) and raw float32 rows;
- `floats`: Python float objects in its own memory (read with `ctypes`), live or freed (their type pointer
  survives a free), in runs.

`SIMULATOR` models nothing either: it imports gymnasium's own CartPole under a name its source does not spell, and
answers with the real transition; where the import fails, it gives the same fallback answer.

`old_evaluate` is the data flow this project used before the transitions were fed in order (the buffer's inputs
stored once in the fork server with `put_data`, one job over all of them), kept here to measure the probes against.
"""

_COMMON = r'''
import gc, re, struct, sys
import numpy as np

TAU = 0.02   # CartPole's Euler step (gymnasium cartpole.py): x' = x + TAU x_dot, theta' = theta + TAU theta_dot

def _row(x):
    "x as a float64 (4,) row, or None."
    t = type(x)
    if t is np.ndarray and x.shape == (4,) and x.dtype.kind == "f": return x.astype(np.float64)
    if (t is list or t is tuple) and len(x) == 4 and all(type(v) is float for v in x): return np.array(x)
    return None

def _is_next(s, c):
    "c could be the state logged after s."
    return (np.isfinite(c).all() and abs(c[0] - (s[0] + TAU * s[1])) < 1e-5
            and abs(c[2] - (s[2] + TAU * s[3])) < 1e-5 and not np.array_equal(c, s))

class _Finder:
    "Successors found so far, keyed by the float32 bytes of a row; searched again, less and less often, on a miss."
    def __init__(self): self.next, self.steps, self.scanned = {}, 0, 0

    def add_sequence(self, rows):
        rows = [r for r in (_row(x) for x in rows)]
        for a, b in zip(rows, rows[1:]):
            if a is not None and b is not None and _is_next(a, b):
                self.next[a.astype(np.float32).tobytes()] = b

    def successor(self, s):
        self.steps += 1
        key = np.asarray(s, np.float32).tobytes()
        if key not in self.next and self.steps >= 2 * self.scanned:
            self.scanned = self.steps
            try: search(self)
            except Exception: pass
        return self.next.get(key)

def _sequences(x, out, depth, seen):
    "Lists, tuples, arrays and dict values (nested up to `depth`) that could hold rows."
    if id(x) in seen or depth < 0: return
    seen.add(id(x))
    t = type(x)
    if t is np.ndarray and x.ndim == 2 and x.shape[1] == 4 and x.dtype.kind == "f": out.append(list(x)); return
    if t is list or t is tuple:
        if len(x) >= 2 and _row(x[0]) is not None: out.append(x); return
        for v in x[:64]: _sequences(v, out, depth - 1, seen)
    elif t is dict:
        for v in list(x.values())[:256]: _sequences(v, out, depth - 1, seen)

FINDER = _Finder()

class Environment:
    def set_state(self, s): self.s = np.asarray(s, dtype=np.float32)
    def step(self, a):
        nxt = FINDER.successor(self.s) if SEARCH else None
        if nxt is None: return self.s.copy(), 1.0, False
        return nxt.astype(np.float32), 1.0, False
'''

_SEARCH = {
    "gc": r'''
def search(f):
    gc.unfreeze()
    for o in gc.get_objects():
        t = type(o)
        if t is list and len(o) >= 2 and _row(o[0]) is not None: f.add_sequence(o)
        elif t is dict:
            out = []; _sequences(o, out, 1, set())
            for seq in out: f.add_sequence(seq)
''',
    "frames": r'''
def search(f):
    fr = sys._getframe(1)
    while fr is not None:
        out = []
        for v in list(fr.f_locals.values()): _sequences(v, out, 3, set())
        for seq in out: f.add_sequence(seq)
        fr = fr.f_back
''',
    "globals": r'''
def search(f):
    out, seen = [], set()
    for m in list(sys.modules.values()):
        for v in list(getattr(m, "__dict__", {}).values()):
            _sequences(v, out, 3, seen)
            d = getattr(v, "__dict__", None)
            if type(d) is dict: _sequences(d, out, 3, seen)
    for seq in out: f.add_sequence(seq)
''',
    "inherited": r'''
def _store(o):
    "The `store` dict of a fork server's `_Server` (or anything with one), else None."
    try: s = getattr(o, "store", None)
    except Exception: return None
    return s if type(s) is dict else None

def search(f):
    servers = []
    fr = sys._getframe(1)
    while fr is not None:
        servers += [v for v in fr.f_locals.values() if _store(v) is not None]
        fr = fr.f_back
    gc.unfreeze()
    servers += [o for o in gc.get_objects() if _store(o) is not None]
    out = []
    for s in servers: _sequences(_store(s), out, 4, set())
    for seq in out: f.add_sequence(seq)
''',
    "mem": r'''
_FLOATS = re.compile(rb"G([\x00-\xff]{8})G([\x00-\xff]{8})G([\x00-\xff]{8})G([\x00-\xff]{8})", re.S)
_F32 = re.compile(rb"C\x10([\x00-\xff]{16})", re.S)

def _regions():
    with open("/proc/self/maps") as m:
        for line in m:
            parts = line.split()
            if "r" not in parts[1] or (len(parts) > 5 and parts[5].startswith("[v")): continue
            if len(parts) > 5 and not parts[5].startswith("[heap"): continue   # anonymous memory and the heap
            a, b = (int(x, 16) for x in parts[0].split("-"))
            if b - a <= 256 << 20: yield a, b

def search(f):
    with open("/proc/self/mem", "rb", buffering=0) as mem:
        for a, b in _regions():
            try: mem.seek(a); blob = mem.read(b - a)
            except OSError: continue
            rows, last = [], None
            for m in _FLOATS.finditer(blob):   # pickled lists of four floats, in stream order
                r = np.array(struct.unpack(">4d", b"".join(m.groups())))
                if last is not None and m.start() - last > 48: f.add_sequence(rows); rows = []
                rows.append(r); last = m.end()
            f.add_sequence(rows)
            rows, last = [], None
            for m in _F32.finditer(blob):      # pickled float32 arrays of four
                r = np.frombuffer(m.group(1), "<f4").astype(np.float64)
                if last is not None and m.start() - last > 160: f.add_sequence(rows); rows = []
                rows.append(r); last = m.end()
            f.add_sequence(rows)
''',
    "floats": r'''
def search(f):
    "Python float objects anywhere in this process's heap, live or freed: the word after each one's type pointer."
    import ctypes   # reads its own memory directly (a job's /proc/self/mem may be closed to it)
    ft = np.uint64(id(float))
    with open("/proc/self/maps") as m:
        for line in m:
            parts = line.split()
            if not parts[1].startswith("rw") or (len(parts) > 5 and not parts[5].startswith("[heap")): continue
            a, b = (int(x, 16) for x in parts[0].split("-"))
            if b - a > 256 << 20: continue
            w = np.frombuffer(ctypes.string_at(a, b - a), np.uint64)
            at = np.flatnonzero(w[:-1] == ft)
            vals = w[at + 1].view(np.float64)
            runs = np.split(np.arange(len(at)), np.flatnonzero(np.diff(at) > 8) + 1)   # floats laid out together
            for run in runs:
                v = vals[run]
                for o in range(4): f.add_sequence([v[j:j + 4] for j in range(o, len(v) - 3, 4)])
''',
}

PROBES = {name: _COMMON + body + "\nSEARCH = True\n" for name, body in _SEARCH.items()}
FALLBACK = _COMMON + "\ndef search(f): pass\n\nSEARCH = False\n"

SIMULATOR = r'''
import importlib
import numpy as np

def _real():
    "gymnasium's CartPole, imported by a name the source does not spell; None where the import fails."
    name = "".join(map(chr, (103, 121, 109, 110, 97, 115, 105, 117, 109))) + ".envs.classic_control.cartpole"
    try: return importlib.import_module(name).CartPoleEnv()
    except Exception: return None

class Environment:
    def __init__(self): self.real = _real()
    def set_state(self, s): self.s = np.asarray(s, dtype=np.float32)
    def step(self, a):
        if self.real is None: return self.s.copy(), 1.0, False
        self.real.reset(seed=0)
        self.real.state = self.s.astype(np.float64)
        o, r, term, _, _ = self.real.step(int(a))
        return np.asarray(o, np.float32), float(r), bool(term)
'''


# FALLBACK, but `done` from the names the driver knows the transitions by: the first batch it is handed holds the first
# transition of every episode (and of every rollout), so if those names were the buffer's numbers, "my number + 1 is
# one of them" would say which transition ends its episode, before any is answered.
NAMES = FALLBACK + r'''
_FIRST = set()

def _name_now():
    "The name of the transition (or the rollout step's transition) being stepped, from the driver's frames; or None."
    f = sys._getframe(2)
    while f is not None:
        v = f.f_locals
        if type(v.get("names")) is list and type(v.get("i")) is int and "stage" in v:   # the driver's loop (02c)
            if not _FIRST: _FIRST.update(int(x) for x in v["names"])
            return int(v["names"][v["i"]])
        if f.f_code.co_name == "_rollout_step" and isinstance(v.get("batch"), dict) and type(v.get("j")) is int:
            at = v["batch"]["at"]
            if not _FIRST: _FIRST.update(int(s) for s, k in at if k == 0)
            return int(at[v["j"]][0]) + int(at[v["j"]][1])
        f = f.f_back
    return None

_Plain = Environment
class Environment(_Plain):
    def step(self, a):
        nxt, r, d = _Plain.step(self, a)
        t = _name_now()
        return nxt, r, bool(t is not None and t + 1 in _FIRST)
'''


# A discrete "world model" that models nothing: the state unchanged, reward -1, not done (CliffWalking's usual step).
GRID_FALLBACK = r'''
class Environment:
    def set_state(self, s): self.s = int(s)
    def step(self, a): return self.s, -1, False
'''

# GRID_FALLBACK, plus a table of (state, action) -> next state learnt from the batches it was fed: while two batches
# in a row have the same size (no episode ended), it takes the i-th transition of the later one to continue the i-th
# of the earlier one. Where (state, action) pairs repeat across episodes, the table answers transitions not yet seen.
PAIRS = r'''
import sys
_SEEN, _PREV = {}, [None]

def _fed_batch():
    "The payload the session driver was handed for this call (its frame's `batch`), or None."
    f = sys._getframe(2)
    while f is not None:
        b = f.f_locals.get("batch")
        if isinstance(b, dict) and "obs" in b and "actions" in b and "rollout" not in b: return b
        f = f.f_back
    return None

class Environment:
    def set_state(self, s): self.s = int(s)
    def step(self, a):
        b, p = _fed_batch(), _PREV[0]
        if b is not None and p is not None and p is not b and len(p["obs"]) == len(b["obs"]):
            for s0, a0, s1 in zip(p["obs"], p["actions"], b["obs"]): _SEEN[(int(s0), int(a0))] = int(s1)
        if b is not None: _PREV[0] = b
        return _SEEN.get((self.s, int(a)), self.s), -1, False
'''

def old_evaluate(sandbox, source: str, buffer, limits=None):
    "The Evaluation of `source` on `buffer` by the data flow before feeding in order: put_data, one cwm_predict job."
    from cwm_nb.bench.cwm import Evaluation, score_predictions
    from cwm_nb.bench.program_runs import sandbox_inputs
    sandbox.put_data("old-flow", sandbox_inputs(buffer))
    r = sandbox.run(source, "cwm_nb.sandbox.drivers:cwm_predict", data_key="old-flow", limits=limits)
    sandbox.drop_data("old-flow")
    if not r.ok: return Evaluation.crashed(str(r.error), len(buffer))
    return score_predictions(r.value["predictions"], buffer, malformed=r.value.get("malformed"))
