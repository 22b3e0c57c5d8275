"""Tests of the baselines (23_baselines): WorldCoder's REx refinement, zero-shot CoT and the method registry.

Search logic is driven by the project's `ScriptedLLM`; program scores come from the real sandbox evaluator on
the shipped CartPole buffer (correct, wrong-reward and crashing variants of data/programs/CartPole-v1.py)
or, for bookkeeping-only tests, from a marker-comment evaluator. The last tests run `cwm-nb run` end to end
with the embedded model.
"""
import json, math, os, subprocess, sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from cwm_nb.search.baselines import (METHODS, RExRefinement, RExConfig, ZeroShotCoT, ZeroShotCoTConfig, COT_OPENER,
                              beta_params, rex_select, make_search)
from cwm_nb.core import CwmNbError, make_rng
from cwm_nb.search.gif_mcts import GIFMCTS, plot_tree, plot_best_value, action_stats, tree_to_networkx
from cwm_nb.llm.demo import ScriptedLLM
from cwm_nb.search.prompts import prefill_opens_code

ROOT = Path(__file__).resolve().parents[1]
CLI = str(Path(sys.executable).parent/"cwm-nb")
CORRECT = (ROOT/"data"/"programs"/"CartPole-v1.py").read_text()
WRONG = CORRECT.replace("return self.state.astype(np.float32), 1.0, done", "return self.state.astype(np.float32), 0.5, done")
CRASH = CORRECT.replace("done = bool(x < -X_LIMIT", "done = bool(undefined_name < -X_LIMIT")
assert WRONG != CORRECT and CRASH != CORRECT


# ---------------------------------------------------------------------------------------------------------------
# helpers
def reply(messages, code):
    "What a model would write after the pre-fill: the rest of an opened code block, or a sectioned answer."
    if prefill_opens_code(messages):
        so_far = messages[-1]["content"].rsplit("```python\n", 1)[-1]
        return (code[len(so_far):] if code.startswith(so_far) else code) + "\n```\n"
    return "The program is wrong somewhere.\n## Corrected program\n```python\n" + code + "\n```\n"


def scripted(program_of_draw):
    "A `ScriptedLLM` answering call `draw` with `program_of_draw(draw)`; records the draws."
    draws = []
    def answer(messages, draw):
        draws.append(draw)
        return reply(messages, program_of_draw(draw))
    llm = ScriptedLLM(answer)
    llm.draws = draws
    return llm


@pytest.fixture(scope="module")
def real_evaluate():
    from cwm_nb.bench import cwm, replay
    buf = replay.load_buffer("CartPole-v1")
    return lambda src: cwm.evaluate_program(src, buf)


def marker(score):
    return f"x = 1\ny = 2\n# score={score}\n"


def fake_evaluate(src):
    "Score a program by its last `# score=` / `# bug` / `# perfect` comment (bookkeeping tests only)."
    marks = [l[2:] for l in src.split("\n") if l.startswith("# ") and l[2:].split("=")[0] in ("score", "bug", "perfect")]
    m = marks[-1] if marks else "bug"
    bug = m == "bug"
    acc = 1.0 if m == "perfect" else float(m.split("=")[1]) if m.startswith("score") else 0.0
    fails = [] if acc >= 1 or bug else [dict(index=0, obs=[0.0], action=0, expected=dict(next_obs=[1.0], reward=1.0, done=False),
                                             predicted=dict(next_obs=[0.5], reward=1.0, done=False))]
    return SimpleNamespace(accuracy=acc, bug=bug, error="NameError: name 'q' is not defined" if bug else None,
                           failures=fails, perfect=acc >= 1 and not bug, to_dict=lambda: dict(accuracy=acc, bug=bug))


varied = lambda d: "x = 1\n# bug\n" if d % 4 == 1 else marker(f"{(d * 37 % 9 + 1) / 10:.1f}")


# ---------------------------------------------------------------------------------------------------------------
# REx selection and the Beta update
def beta_max_probabilities(alphas, betas, n=200_001):
    "P(arm i's Beta sample is the largest) = ∫ f_i(x) Π_{j≠i} F_j(x) dx, by quadrature on a grid (no sampling)."
    x = np.linspace(0.0, 1.0, n)[1:-1]
    pdf = np.array([np.exp((a - 1) * np.log(x) + (b - 1) * np.log1p(-x)
                           - (math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b))) for a, b in zip(alphas, betas)])
    dx = x[1] - x[0]
    cdf = np.cumsum(pdf, axis=1) * dx
    cdf /= cdf[:, -1:]
    out = []
    for i in range(len(alphas)):
        others = np.prod(np.delete(cdf, i, axis=0), axis=0)
        out.append(float(np.sum(pdf[i] * others) * dx))
    return np.array(out)


def test_rex_selection_follows_the_beta_posteriors():
    scores_fails = [(0.0, 0), (0.3, 0), (0.6, 0), (0.9, 0), (0.9, 4)]   # the last: a strong program refined 4 times in vain
    arms = [beta_params(r, 5.0, failures=f) for r, f in scores_fails]
    assert arms[3] == (5.5, 1.5) and arms[4] == (5.5, 5.5)
    al, be = [a for a, _ in arms], [b for _, b in arms]
    p = beta_max_probabilities(al, be)
    assert p.sum() == pytest.approx(1.0, abs=1e-3)
    rng = make_rng(0, "worldcoder")
    n = 20_000
    freq = np.bincount([rex_select(al, be, rng) for _ in range(n)], minlength=len(arms)) / n
    assert np.abs(freq - p).max() < 4 * np.sqrt(0.25 / n)        # within 4 standard errors everywhere
    assert freq.argmax() == 3 == p.argmax()                       # the strong, fresh arm is picked most
    assert freq[4] < freq[3] and freq[0] < 0.01                   # failures and a zero score count against an arm
    # seeded: the same generator state gives the same picks
    picks = lambda: [rex_select(al, be, r) for r in [make_rng(5, "worldcoder")] for _ in range(50)]
    assert picks() == picks()
    with pytest.raises(CwmNbError):
        rex_select([1.0, 2.0], [1.0], rng)
    with pytest.raises(CwmNbError):
        rex_select([0.0], [1.0], rng)


def test_strict_update_moves_alpha_and_beta():
    # call 1: 0.4; calls 2, 3: not perfect; call 4: perfect -> the program refined at call 4 gets α + 1
    prog = {1: marker("0.4"), 2: marker("0.6"), 3: "x = 1\n# bug\n", 4: "x = 1\n# perfect\n"}
    llm = scripted(lambda d: prog[d])
    wc = RExRefinement(llm, fake_evaluate, "toy", seed=3, progress=False)
    res = wc.run(10)
    assert (res.llm_calls, res.stop_reason, res.best_value) == (4, "perfect", 1.0)
    nodes = {n["id"]: n for n in res.tree["nodes"]}
    for n in list(nodes.values())[1:]:
        kids = [nodes[c] for c in n["children"]]
        wins = sum(k["perfect"] for k in kids)
        a0, b0 = beta_params(n["score"], 5.0)
        assert (n["alpha"], n["beta"]) == pytest.approx((a0 + wins, b0 + len(kids) - wins)), n
        assert n["visits"] == len(kids)
    assert sum(n["alpha"] - beta_params(n["score"])[0] for n in list(nodes.values())[1:]) == pytest.approx(1.0)
    assert nodes[1]["alpha"] - 1.0 >= 5 * 0.4 - 1e-12 and nodes[3]["beta"] >= 6.0   # a bug enters as Beta(1, 6)


def test_sequential_ablation_refines_the_newest_program():
    res = RExRefinement(scripted(varied), fake_evaluate, "toy", RExConfig(select="sequential"),
                     progress=False).run(6)
    assert [n["parent"] for n in res.tree["nodes"][1:]] == [0, 1, 2, 3, 4, 5]
    with pytest.raises(CwmNbError, match="select rule"):
        RExConfig(select="greedy")


# ---------------------------------------------------------------------------------------------------------------
# prompts: fix for buggy programs, improve otherwise (real evaluator)
def test_worldcoder_fixes_buggy_programs_and_improves_the_others(real_evaluate):
    llm = scripted(lambda d: CRASH if d % 2 else WRONG)
    wc = RExRefinement(llm, real_evaluate, "CartPole description.", seed=1, progress=False)
    res = wc.run(7)
    assert res.llm_calls == 7 and len(llm.seen) == 7
    nodes = {n["id"]: n for n in res.tree["nodes"]}
    by_call = {n["call"]: n for n in nodes.values() if n["call"]}
    assert by_call[1]["action_type"] == "generate" and by_call[1]["parent"] == 0
    assert llm.seen[0][-1]["content"].endswith("```python\n")            # the root generate pre-fill
    kinds = set()
    for call in range(2, 8):
        node, msgs = by_call[call], llm.seen[call - 1]
        parent = nodes[node["parent"]]
        user = msgs[1]["content"]
        assert res.tree["programs"][parent["program_sha"]].strip() in user   # the refined program is shown
        if parent["bug"]:
            assert node["action_type"] == "fix" and "raised an error" in user and "undefined_name" in user
        else:
            assert node["action_type"] == "improve" and "A transition the program gets wrong" in user
            assert "reward = 0.5" in user and "reward = 1.0" in user          # the failing transition
        kinds.add(node["action_type"])
    assert kinds == {"fix", "improve"}
    assert res.best_value == max(res.value_per_call) > 0.5
    assert res.action_stats["n_fix"] + res.action_stats["n_improve"] == 6 and res.action_stats["n_generate"] == 1


def test_first_worldcoder_call_is_gif_mcts_first_call():
    "Same prompt, seed, draw and sampling parameters: a response cache answers WorldCoder's first call."
    class Caching:
        def __init__(self, inner): self.inner, self.store, self.misses = inner, {}, 0
        def complete(self, messages, **kw):
            key = json.dumps([messages, sorted(kw.items())], sort_keys=True)
            if key not in self.store: self.misses += 1; self.store[key] = self.inner.complete(messages, **kw)
            return self.store[key]
    for name in ("scripted", "embedded"):                                      # chat-style and code-first prompts
        llm = Caching(ScriptedLLM(lambda m, d: reply(m, marker("0.3")), name=name))
        g = GIFMCTS(llm, fake_evaluate, "toy", seed=4, progress=False).run(1)
        w = RExRefinement(llm, fake_evaluate, "toy", seed=4, progress=False).run(1)
        assert llm.misses == 1 and w.best_program == g.best_program


# ---------------------------------------------------------------------------------------------------------------
# zero-shot CoT
def test_zero_shot_cot_spends_exactly_its_budget(real_evaluate):
    llm = scripted(lambda d: WRONG)
    res = ZeroShotCoT(llm, real_evaluate, "CartPole description.", seed=2, progress=False).run(5)
    assert (res.llm_calls, res.stop_reason) == (5, "budget")
    assert llm.draws == [1, 2, 3, 4, 5] and llm.usage.calls == 5 and len(llm.seen) == 5
    assert all(m == llm.seen[0] for m in llm.seen) and llm.seen[0][-1]["content"] == COT_OPENER
    assert "step by step" in COT_OPENER and "```python" in llm.seen[0][1]["content"]
    assert [n["parent"] for n in res.tree["nodes"][1:]] == [0] * 5
    assert all(n["action_type"] == "generate" for n in res.tree["nodes"][1:])
    assert 0.5 < res.best_value < 1.0 and res.best_value_per_call == [res.best_value] * 5


def test_zero_shot_cot_takes_the_longest_code_block():
    text = "```python\nx = 1\n```\nand the program:\n```python\n" + CORRECT + "\n```\n"
    llm = ScriptedLLM([text])
    res = ZeroShotCoT(llm, fake_evaluate, "d", progress=False).run(1)
    assert res.best_program.strip() == CORRECT.strip()   # the program's module docstring is kept with it


# ---------------------------------------------------------------------------------------------------------------
# every method stops on a perfect program
@pytest.mark.parametrize("method", METHODS)
def test_every_method_stops_early_on_a_perfect_program(method, real_evaluate):
    llm = scripted(lambda d: CORRECT if d == 3 else (CRASH if d == 1 else WRONG))
    search = make_search(method, llm, real_evaluate, "CartPole description.", seed=0, progress=False)
    res = search.run(10)
    assert (res.llm_calls, res.stop_reason, res.best_value) == (3, "perfect", 1.0), method
    assert len(llm.seen) == 3 and llm.draws == [1, 2, 3]
    assert real_evaluate(res.best_program).perfect


# ---------------------------------------------------------------------------------------------------------------
# checkpoint, resume, refusal
@pytest.mark.parametrize("cls", [RExRefinement, ZeroShotCoT])
def test_kill_and_resume_repeats_no_call(cls, tmp_path):
    ck, budget = tmp_path/"run"/"checkpoint.json", 7
    first = scripted(varied)
    cls(first, fake_evaluate, "toy", seed=7, checkpoint=ck, progress=False).run(3)        # stopped after 3 calls
    assert json.loads(ck.read_text())["calls"] == 3

    def dies_on_5(d):
        if d == 5: raise KeyboardInterrupt                                                # killed during call 5
        return varied(d)
    second = scripted(dies_on_5)
    with pytest.raises(KeyboardInterrupt):
        cls(second, fake_evaluate, "toy", seed=7, checkpoint=ck, progress=False).run(budget)
    assert json.loads(ck.read_text())["calls"] == 4

    third = scripted(varied)
    res = cls(third, fake_evaluate, "toy", seed=7, checkpoint=ck, progress=False).run(budget)
    assert first.draws + [d for d in second.draws if d != 5] + third.draws == list(range(1, budget + 1))
    assert first.n_answered + second.n_answered + third.n_answered == budget               # no call repeated
    full = cls(scripted(varied), fake_evaluate, "toy", seed=7, progress=False).run(budget)
    assert res.tree == full.tree and res.best_value_per_call == full.best_value_per_call
    assert (res.llm_calls, res.prompt_tokens, res.completion_tokens) == (full.llm_calls, full.prompt_tokens,
                                                                         full.completion_tokens)
    fourth = scripted(varied)                                                               # finished: no call
    assert cls(fourth, fake_evaluate, "toy", seed=7, checkpoint=ck, progress=False).run(budget).tree == full.tree
    assert fourth.draws == []


def test_checkpoint_of_another_search_is_refused(tmp_path):
    ck = tmp_path/"ck.json"
    RExRefinement(scripted(varied), fake_evaluate, "toy", seed=1, checkpoint=ck, progress=False).run(2)
    for make in (lambda: RExRefinement(scripted(varied), fake_evaluate, "toy", seed=2, checkpoint=ck),
                 lambda: RExRefinement(scripted(varied), fake_evaluate, "toy", RExConfig(C=2.0), seed=1, checkpoint=ck),
                 lambda: RExRefinement(scripted(varied), fake_evaluate, "other env", seed=1, checkpoint=ck),
                 lambda: ZeroShotCoT(scripted(varied), fake_evaluate, "toy", seed=1, checkpoint=ck),
                 lambda: make_search("zero-shot-cot", scripted(varied), fake_evaluate, "toy", seed=1, checkpoint=ck)):
        with pytest.raises(CwmNbError, match="different search"): make()
    with pytest.raises(CwmNbError, match="not a GIF-MCTS checkpoint"):
        GIFMCTS(scripted(varied), fake_evaluate, "toy", seed=1, checkpoint=ck)
    gck = tmp_path/"gif.json"
    GIFMCTS(scripted(varied), fake_evaluate, "toy", seed=1, checkpoint=gck, progress=False).run(1)
    with pytest.raises(CwmNbError, match="not a WorldCoder checkpoint"):
        RExRefinement(scripted(varied), fake_evaluate, "toy", seed=1, checkpoint=gck)
    (tmp_path/"bad.json").write_text("{not json")
    with pytest.raises(CwmNbError, match="cannot read"):
        ZeroShotCoT(scripted(varied), fake_evaluate, "toy", checkpoint=tmp_path/"bad.json")


# ---------------------------------------------------------------------------------------------------------------
# the tree works with GIF-MCTS's tools
def test_trees_work_with_the_gif_mcts_tools():
    import matplotlib; matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for cls in (RExRefinement, ZeroShotCoT):
        a = cls(scripted(varied), fake_evaluate, "toy", seed=9, progress=False).run(8)
        b = cls(scripted(varied), fake_evaluate, "toy", seed=9, progress=False).run(8)
        assert json.dumps(a.tree, sort_keys=True) == json.dumps(b.tree, sort_keys=True)   # seeded
        json.dumps(a.to_dict())
        t = a.tree
        assert t["nodes"][0]["action_type"] == "root" and t["root"] == 0
        assert set(t["programs"]) == {n["program_sha"] for n in t["nodes"][1:]}
        assert t["best_path"][0] == 0 and t["best_path"][-1] == t["best_node"] == a.best_node
        st = action_stats(t)
        assert st == t["stats"] == a.action_stats and st["n_expansions"] == 8
        assert tree_to_networkx(t).number_of_edges() == 8
        assert a.timing.keys() == {"llm_s", "evaluate_s", "search_s", "checkpoint_s"}
        fig, (x1, x2) = plt.subplots(1, 2)
        plot_best_value(a.best_value_per_call, ax=x1); plot_tree(t, ax=x2)
        plt.close(fig)


# ---------------------------------------------------------------------------------------------------------------
# end to end through the command line with the embedded model
@pytest.mark.slow
@pytest.mark.parametrize("method", ["worldcoder", "zero-shot-cot"])
def test_cli_run_with_the_embedded_model(method, tmp_path, cache_env):
    r = subprocess.run([CLI, "run", "cwmb", "--env", "CartPole-v1", "--method", method, "--model", "embedded",
                        "--budget", "2", "--seed", "0", "--out", str(tmp_path), "--plan-preset", "none"],
                       capture_output=True, text=True, env=cache_env, timeout=1800, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    rd = tmp_path/"cwmb"/"CartPole-v1"/method/"embedded"/"seed0"
    for f in ("metrics.json", "tree.json", "program.py", "checkpoint.json", "notebook.ipynb", "search.png", "search.pdf"):
        assert (rd/f).exists(), f                       # search.png/pdf: the notebook's plot_run drew this method's tree
    m = json.loads((rd/"metrics.json").read_text())
    assert m["method"] == method and m["status"] == "complete" and m["budget"] == 2
    assert 1 <= m["llm_calls"] <= 2 and m["model_calls"] == m["llm_calls"] and m["prompt_tokens"] > 0
    assert len(m["best_value_per_call"]) == m["llm_calls"]
    tree = json.loads((rd/"tree.json").read_text())
    assert len(tree["nodes"]) == m["llm_calls"] + 1 and tree["nodes"][1]["action_type"] == "generate"
    assert tree["method"] == method and tree["stats"]["n_expansions"] == m["llm_calls"]
    if method == "worldcoder":
        assert all("alpha" in n for n in tree["nodes"][1:])
    else:
        assert all(n["parent"] == 0 for n in tree["nodes"][1:])
