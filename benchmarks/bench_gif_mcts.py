"""How much of a GIF-MCTS iteration is spent outside the LLM call (goal: <= 5 %).

One iteration = select, build the prompt, one LLM call, extract the program, evaluate it, update the tree, write
the checkpoint. The LLM is either a double that sleeps a fixed latency (default 1 s, well below the embedded
model's ~10-15 s per call, so the share printed here is an upper bound) and answers with CartPole programs of
varying quality, or the real embedded model (`--model embedded`). The evaluator is the project's
`cwm_nb.bench.cwm.evaluate_program` on the CartPole replay buffer in the sandbox when those modules work, else an
in-process checker of this file on a freshly collected CartPole buffer (`--evaluator own` forces it).

    .venv/bin/python benchmarks/bench_gif_mcts.py [--budget 20] [--latency 1.0] [--model double|embedded]
                                                  [--evaluator auto|project|own] [--max-tokens 400]

Prints the time in the LLM and outside it (evaluation, search bookkeeping, checkpoint) side by side.
"""
import argparse, sys, tempfile, time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from cwm_nb.search.gif_mcts import GIFMCTS, GIFMCTSConfig  # noqa: E402

# ------------------------------------------------------------------------------------------------------------
# CartPole programs of varying quality (the double's answers)
# program variants made from the tests' CartPole program (written from the physics): some right, some wrong, one buggy
HEAD = (Path(__file__).resolve().parents[1]/"data"/"programs"/"CartPole-v1.py").read_text()
HEAD = (HEAD.replace("FORCE_MAG, TAU = 10.0, 0.02", "FORCE_MAG, TAU = {force}, 0.02")
            .replace("THETA_LIMIT = 12 * 2", "THETA_LIMIT = {theta_deg} * 2")
            .replace("1.0, done", "{reward}, done"))
VARIANTS = [dict(force=10.0, theta_deg=12, reward=0.0), dict(force=9.0, theta_deg=12, reward=1.0),
            dict(force=10.0, theta_deg=10, reward=1.0), dict(force=12.0, theta_deg=12, reward=0.5), "bug"]


def program_for(draw: int) -> str:
    v = VARIANTS[draw % len(VARIANTS)]
    if v == "bug": return HEAD.format(force=10.0, theta_deg=12, reward=1.0).replace("c ** 2", "cos_theta ** 2")
    return HEAD.format(**v)


class SleepLLM:
    "An LLM double with a fixed latency; continues the pre-filled prefix when the program starts with it."
    name = "sleep-double"

    def __init__(self, latency_s: float):
        self.latency_s = latency_s

    def complete(self, messages, *, seed=0, draw=0, max_tokens=None, temperature=None, top_p=None, stop=None):
        time.sleep(self.latency_s)
        pre, prog = messages[-1]["content"], program_for(draw)
        code_so_far = pre.split("```python\n", 1)[1] if "```python\n" in pre else ""
        if code_so_far and prog.startswith(code_so_far): out = prog[len(code_so_far):] + "```"
        elif "```python\n" in pre: out = prog + "```"
        else: out = "The constants are off.\n## Corrected program\n```python\n" + prog + "```"
        return SimpleNamespace(text=pre + out, prompt_tokens=1500, completion_tokens=len(out) // 4, cached=False)


# ------------------------------------------------------------------------------------------------------------
# evaluators
def own_evaluator(n_transitions: int = 1000, seed: int = 0):
    "In-process checker on a random-policy CartPole buffer: mean of next-state/reward/done credit per transition."
    import gymnasium as gym
    env = gym.make("CartPole-v1")
    rng = np.random.default_rng(seed)
    rows, obs = [], env.reset(seed=seed)[0]
    while len(rows) < n_transitions:
        a = int(rng.integers(2))
        nxt, r, term, trunc, _ = env.step(a)
        rows.append((obs, a, nxt, float(r), bool(term)))
        obs = env.reset()[0] if term or trunc else nxt

    obs_a = np.array([r[0] for r in rows], np.float64); act_a = [r[1] for r in rows]
    nxt_a = np.array([r[2] for r in rows], np.float64)
    rew_a = np.array([r[3] for r in rows]); done_a = np.array([r[4] for r in rows])

    def evaluate(src: str):
        try:
            ns: dict = {}
            exec(compile(src, "<cwm-program>", "exec"), ns)
            e = ns["Environment"]()
            preds = []
            for o, a in zip(obs_a, act_a):
                e.set_state(o)
                preds.append(e.step(a))
            pn = np.array([np.asarray(p[0], np.float64) for p in preds])
            pr = np.array([float(p[1]) for p in preds]); pd = np.array([bool(p[2]) for p in preds])
            ok_s = done_a | np.isclose(pn, nxt_a, rtol=1e-5, atol=1e-5).all(axis=1)
            ok_r, ok_d = np.abs(pr - rew_a) <= 1e-6, pd == done_a
            credit = (ok_s.astype(float) + ok_r + ok_d) / 3
            fails = [dict(obs=obs_a[i], action=act_a[i], expected=dict(next_obs=nxt_a[i], reward=rew_a[i], done=done_a[i]),
                          predicted=dict(next_obs=pn[i], reward=pr[i], done=pd[i]))
                     for i in np.flatnonzero(credit < 1)[:3]]
            acc = float(credit.mean())
            return SimpleNamespace(accuracy=acc, bug=False, error=None, failures=fails, perfect=acc >= 1 - 1e-9,
                                   to_dict=lambda: dict(accuracy=acc))
        except Exception as ex:  # noqa: BLE001 - any failure of the candidate is a bug
            return SimpleNamespace(accuracy=0.0, bug=True, error=f"{type(ex).__name__}: {ex}", failures=[],
                                   perfect=False, to_dict=lambda: dict(accuracy=0.0, bug=True))
    return evaluate, f"own in-process checker, {n_transitions} CartPole transitions"


def project_evaluator():
    "cwm_nb.bench.cwm.evaluate_program on the CartPole buffer, in the sandbox."
    from cwm_nb.bench import cwm, replay
    from cwm_nb.sandbox.jobs import get_sandbox
    try: buf = replay.load_buffer("CartPole-v1")
    except Exception: buf = replay.collect_buffer("CartPole-v1", seed=0)
    sb = get_sandbox()
    evaluate = lambda src: cwm.evaluate_program(src, buf, sandbox=sb)
    ev = evaluate(program_for(0))                         # a smoke test (and the sandbox's warm-up)
    if ev.bug: raise RuntimeError(f"the project evaluator failed on a valid program: {ev.error}")
    return evaluate, f"cwm_nb.bench.cwm.evaluate_program, sandbox={getattr(sb, 'isolation', '?')}, {len(buf)} transitions"


# ------------------------------------------------------------------------------------------------------------
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--budget", type=int, default=20)
    p.add_argument("--latency", type=float, default=1.0, help="seconds per call of the LLM double")
    p.add_argument("--model", default="double", help="'double' or a model name for cwm_nb.llm.models.get_llm such as 'embedded'")
    p.add_argument("--evaluator", default="auto", choices=["auto", "project", "own"])
    p.add_argument("--max-tokens", type=int, default=400)
    a = p.parse_args(argv)

    evaluate = None
    if a.evaluator in ("auto", "project"):
        try: evaluate, ev_name = project_evaluator()
        except Exception as e:  # noqa: BLE001
            if a.evaluator == "project": raise
            print(f"project evaluator unavailable ({type(e).__name__}: {str(e)[:120]}); using the own checker")
    if evaluate is None: evaluate, ev_name = own_evaluator()
    per_call = []                                         # (seconds, score or error) of every evaluation

    def timed(src, _ev=evaluate):
        t = time.perf_counter(); e = _ev(src)
        per_call.append((time.perf_counter() - t, (e.error or "")[:70] if e.bug else f"score {e.accuracy:.3f}"))
        return e

    if a.model == "double": llm, llm_name = SleepLLM(a.latency), f"double sleeping {a.latency:.2f} s per call"
    else:
        from cwm_nb.llm.models import get_llm
        llm, llm_name = get_llm(a.model, cache=False), a.model

    from cwm_nb.bench.envs import describe_env
    try: description = describe_env("CartPole-v1")
    except Exception: description = "CartPole: a pole on a cart; push left (0) or right (1)."
    cfg = GIFMCTSConfig(max_tokens=a.max_tokens)
    with tempfile.TemporaryDirectory() as d:
        s = GIFMCTS(llm, timed, description, cfg, seed=0, checkpoint=Path(d) / "checkpoint.json", progress=False)
        t0 = time.perf_counter()
        res = s.run(a.budget)
        wall = time.perf_counter() - t0
        ck_size = (Path(d) / "checkpoint.json").stat().st_size
    t = res.timing
    n = max(res.llm_calls, 1)
    outside = wall - t["llm_s"]
    print(f"\nGIF-MCTS, {res.llm_calls} iterations ({res.stop_reason}); LLM: {llm_name}; evaluator: {ev_name}")
    print(f"best value {res.best_value:.3f}; tree {res.action_stats['n_expansions']} expansions "
          f"(g {res.action_stats['n_generate']}, i {res.action_stats['n_improve']}, f {res.action_stats['n_fix']}); "
          f"checkpoint {ck_size / 1024:.0f} KiB")
    rows = [("LLM call", t["llm_s"]), ("evaluation", t["evaluate_s"]), ("search bookkeeping", t["search_s"]),
            ("checkpoint write", t["checkpoint_s"]),
            ("unaccounted", wall - t["llm_s"] - t["evaluate_s"] - t["search_s"] - t["checkpoint_s"])]
    print(f"\n{'part':<22}{'total s':>10}{'per iter ms':>14}{'share':>9}")
    for name, v in rows: print(f"{name:<22}{v:>10.3f}{1000 * v / n:>14.1f}{100 * v / wall:>8.2f}%")
    print(f"{'wall':<22}{wall:>10.3f}{1000 * wall / n:>14.1f}{100.0:>8.2f}%")
    slow = [(round(t, 2), what) for t, what in per_call if t > 0.5]
    if slow: print(f"\nevaluations slower than 0.5 s: {slow}")
    print(f"\ninside the LLM call: {100 * t['llm_s'] / wall:.2f}%   outside it: {100 * outside / wall:.2f}%   "
          f"(goal: outside <= 5%; search+checkpoint alone: {100 * (t['search_s'] + t['checkpoint_s']) / wall:.2f}%)")
    return dict(wall_s=wall, **t, outside_share=outside / wall, calls=res.llm_calls)


if __name__ == "__main__":
    main()
