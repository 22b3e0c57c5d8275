"""Integration tests of GIF-MCTS (22_gif_mcts) and its prompts (20_prompts).

The search logic is checked with a scripted LLM double and a fake evaluator that scores a program by the marker
comment on its last line (`# score=0.4`, `# bug`, `# perfect`). Each test targets one rule of nbs/22_gif_mcts.ipynb (the paper's Sec. 3 and the original's `src/mcts/gif_mcts/`).
"""
import json, math
from types import SimpleNamespace

import numpy as np
import pytest

from cwm_nb.search.gif_mcts import GIFMCTS, GIFMCTSConfig, SearchTree, Node, LinearValueModel, node_state, uct_new, uct_visited, action_stats, tree_to_networkx, plot_tree, plot_best_value
from cwm_nb.search.loop import evaluation_summary, _default_cot
from cwm_nb.search.prompts import (extract_code, improve_messages, fix_messages, generate_messages, prefill_opens_code,
                            parse_answer)


# ---------------------------------------------------------------------------------------------------------------
# doubles
class ScriptLLM:
    "Answers `answer(messages, draw, seed)` after the pre-fill, as a model would; records every call."
    def __init__(self, answer):
        self.answer, self.calls = answer, []

    def complete(self, messages, *, seed=0, draw=0, max_tokens=None, temperature=None, top_p=None, stop=None):
        self.calls.append(dict(seed=seed, draw=draw, stop=stop, kind=messages[-1]["content"][:12]))
        code = self.answer(messages, draw, seed)
        if prefill_opens_code(messages): out = code + "```"
        else: out = "Diagnosis.\n## Corrected program\n```python\n" + code + "```"
        return SimpleNamespace(text=messages[-1]["content"] + out, prompt_tokens=10 * draw, completion_tokens=draw,
                               cached=False)


class CachingLLM:
    "A response cache keyed like the real one (messages, sampling parameters, seed, draw)."
    def __init__(self, inner):
        self.inner, self.store, self.misses = inner, {}, 0

    def complete(self, messages, **kw):
        key = json.dumps([messages, sorted(kw.items())], sort_keys=True)
        if key not in self.store:
            self.misses += 1
            self.store[key] = self.inner.complete(messages, **kw)
        return self.store[key]


def body(marker, n=12):
    "A program of `n` lines whose last line is the marker comment."
    return "".join(f"v{i} = {i}\n" for i in range(n - 2)) + f"marker = {marker!r}\n# {marker}\n"


def fake_evaluate(src):
    marks = [l[2:] for l in src.split("\n") if l.startswith("# ") and l[2:].split("=")[0] in ("score", "bug", "perfect")]
    m = marks[-1] if marks else "bug"
    bug = m == "bug"
    acc = 1.0 if m == "perfect" else float(m.split("=")[1]) if m.startswith("score") else 0.0
    fails = [] if acc >= 1 or bug else [dict(index=0, obs=np.array([0.5], np.float32), action=np.int64(1),
                                             expected=dict(next_obs=[1.0], reward=1.0, done=False),
                                             predicted=dict(next_obs=[0.25], reward=1.0, done=False),
                                             wrong=["next_state"])]
    return SimpleNamespace(accuracy=acc, bug=bug, error="NameError: name 'q' is not defined" if bug else None,
                           failures=fails, perfect=acc >= 1 and not bug, to_dict=lambda: dict(accuracy=acc, bug=bug))


def summary(acc=0.0, bug=False, failure=True, perfect=None):
    return dict(accuracy=acc, bug=bug, error="NameError: boom" if bug else None,
                failure=({"obs": [0], "action": 0, "expected": {}, "predicted": {}} if failure and not bug else None),
                perfect=(acc >= 1 - 1e-9 and not bug) if perfect is None else perfect, evaluation={})


def search(answer, config=None, seed=0, **kw):
    llm = ScriptLLM(answer)
    return GIFMCTS(llm, kw.pop("evaluate", fake_evaluate), "A toy environment.", config, seed=seed,
                   progress=False, **kw), llm


BAD, GOOD = "x = (\n" * 12, "a = 1\n" * 12
seeded = lambda msgs, draw, seed: body(f"score={((draw * 37 + seed * 11) % 10) / 10:.1f}")


# ---------------------------------------------------------------------------------------------------------------
# UCT and the value model
def test_uct_numbers_on_hand_made_nodes():
    t = SearchTree()
    r = t.root
    r.visits, r.children = 5, {"g1": 1, "i1": 2, "g2": None, "i2": None}
    t.nodes += [Node(1, 0, "g1", "generate", depth=1, visits=3, value_sum=1.5, children={"g1": None}),
                Node(2, 0, "i1", "improve", depth=1, visits=1, value_sum=0.2, children={"g1": None})]
    t.global_stats["generate"] = [0.5 * 2 + 0.7, 3.0]   # v_G = 1.7/3
    t.global_stats["improve"] = [0.55 * 2 + 0.2, 3.0]   # v_G = 1.3/3
    ln5 = math.log(5)
    sc = t.scores(r)
    assert sc["g1"] == pytest.approx(0.5 + 0.1 * math.sqrt(ln5 / 4))
    assert sc["i1"] == pytest.approx(0.2 + 0.1 * math.sqrt(ln5 / 2))
    # untried: (w_G v_G + w_L v_L)/(w_G + w_L) with w = 0.5, 0.5; k = 1 expanded sibling of the type
    assert sc["g2"] == pytest.approx((1.7 / 3 + 0.5) / 2 + 0.1 * math.sqrt(ln5 / 2))
    assert sc["i2"] == pytest.approx((1.3 / 3 + 0.2) / 2 + 0.1 * math.sqrt(ln5 / 2))
    assert t.select(np.random.default_rng(0)) == ([0], "g2", None)
    assert uct_new(-0.3, 1, 0) == 0.0 and uct_visited(0.4, 1, 7) == 0.4


def test_value_model_sgd_step_by_hand():
    m = LinearValueModel(n=3)
    pred, loss = m.update(0.6, 0.2, 0.9)            # V = 0.4, loss 0.25
    assert (pred, loss) == pytest.approx((0.4, 0.25))
    g = 2 * (0.4 - 0.9)                               # / (w_G + w_L)^2 = 1
    assert m.w_G == pytest.approx(0.5 - (1 / 3) * g * 0.5 * (0.6 - 0.2))
    assert m.w_L == pytest.approx(0.5 - (1 / 3) * g * 0.5 * (0.2 - 0.6))
    assert m.n == 4


def test_value_model_in_search_paper_vs_default():
    # paper_compat: at the first expansion the new child (value 0) is the local value: v_G = 0.5, v_L = 0, s = 1
    t = SearchTree(GIFMCTSConfig(paper_compat=True))
    t.expand([0], "g1", body("perfect"), summary(1.0))
    m = t.models["generate"]
    assert (m.w_G, m.w_L, m.n) == pytest.approx((0.625, 0.375, 4))
    assert t.global_value("generate") == pytest.approx((0.5 * 2 + 1.0) / 3)
    # default: features as at selection time (no expanded sibling yet -> no local value -> no step)
    t = SearchTree()
    t.expand([0], "g1", body("perfect"), summary(1.0))
    assert (t.models["generate"].w_G, t.models["generate"].n) == (0.5, 3)
    t.expand([0], "g2", body("score=0.5"), summary(0.5))   # now v_L = worth of g1 = 1.0
    row = t.model_trace[-1]
    assert (row["v_G"], row["v_L"], row["target"]) == pytest.approx(((0.5 * 2 + 1.0) / 3, 1.0, 0.5))
    assert t.models["generate"].n == 4


# ---------------------------------------------------------------------------------------------------------------
# bug chains (nbs/22_gif_mcts.ipynb, bug handling)
def test_buggy_program_gets_temp_value_and_only_f1():
    t = SearchTree()
    b = t.expand([0], "g1", BAD, summary(bug=True))
    assert b.bug and b.raised and b.fixes_left == 3
    assert list(b.children) == ["f1"] and b.value() == pytest.approx(0.99)
    assert t.root.value() == 0.0                          # temporary values are never backed up


def test_bug_chain_dies_after_f_failed_fixes():
    t = SearchTree()
    b = t.expand([0], "g1", BAD, summary(bug=True))
    path, values = [0, 1], []
    for k in range(3):
        c = t.expand(path, "f1", BAD, summary(bug=True))
        values.append(round(b.value(), 2)); path.append(c.id)
    assert values == [0.66, 0.33, 0.0]
    assert c.fixes_left == 0 and c.children == {}
    chain = [t.nodes[i] for i in path[1:-1]]
    assert all(n.terminal and n.value_sum == 0 for n in chain)
    assert not t.selectable(1)
    assert t.select(np.random.default_rng(0))[1] == "g2"


def test_healthy_fix_replaces_temp_values():
    t = SearchTree()
    b = t.expand([0], "g1", BAD, summary(bug=True))
    f = t.expand([0, 1], "f1", BAD, summary(bug=True))
    ok = t.expand([0, 1, 2], "f1", GOOD, summary(0.7))
    assert [n.value() for n in (b, f, ok)] == pytest.approx([0.7, 0.7, 0.7])
    assert not b.bug and not f.bug and list(ok.children) == ["g1", "i1"] and ok.fixes_left == 3


def test_search_runs_a_fix_chain_end_to_end():
    # generate -> bug; the temporary value 0.99 makes the search fix it at once; the fix works
    ans = lambda msgs, draw, seed: body("bug") if draw == 1 else body("score=0.6")
    s, llm = search(ans)
    res = s.run(2)
    nodes = {n["id"]: n for n in res.tree["nodes"]}
    assert llm.calls[0]["stop"] == ["```"] and llm.calls[1]["kind"] == "## Diagnosis" and llm.calls[1]["stop"] is None
    assert nodes[2]["action_type"] == "fix" and nodes[2]["parent"] == 1
    assert res.best_value == 0.6 and res.action_stats["n_fix"] == 1 and res.action_stats["n_bugs"] == 1


# ---------------------------------------------------------------------------------------------------------------
# stopping, improve, terminal nodes (nbs/22_gif_mcts.ipynb; the README's differences from the original code)
def test_early_stop_on_perfect_program():
    s, llm = search(lambda m, d, sd: body("perfect" if d == 3 else "score=0.2"))
    res = s.run(20)
    assert (res.llm_calls, res.stop_reason, res.best_value) == (3, "perfect", 1.0)
    assert len(llm.calls) == 3 and res.best_program.rstrip().endswith("# perfect")


def almost_one(src):
    e = fake_evaluate(src)
    if e.perfect: e.accuracy = 0.9999999999999998
    return e


def test_float_safe_stop_and_paper_compat_exact_stop():
    ans = lambda m, d, sd: body("perfect" if d == 2 else "score=0.2")
    res = search(ans, evaluate=almost_one)[0].run(5)
    assert (res.llm_calls, res.stop_reason) == (2, "perfect")
    res = search(ans, GIFMCTSConfig(paper_compat=True), evaluate=almost_one)[0].run(5)
    assert (res.llm_calls, res.stop_reason) == (5, "budget")
    res = search(ans, GIFMCTSConfig(paper_compat=True))[0].run(5)      # an exact 1.0 stops it
    assert res.llm_calls == 2


def test_improve_not_offered_for_perfect_program():
    n = SearchTree().expand([0], "g1", GOOD, summary(0.9999999999999998, failure=False, perfect=True))
    assert list(n.children) == ["g1"]
    n = SearchTree(GIFMCTSConfig(paper_compat=True)).expand([0], "g1", GOOD, summary(0.9999999999999998, failure=False))
    assert list(n.children) == ["g1", "i1"]
    n = SearchTree().expand([0], "g1", GOOD, summary(0.5))
    assert list(n.children) == ["g1", "i1"]
    # paper_compat asks improve without an example instead of crashing as the original did
    msgs = improve_messages("d", "x = 1", None)
    assert "passed every logged transition" in msgs[1]["content"]


def test_no_reexpansion_of_terminal_nodes_by_default():
    short = lambda m, d, sd: f"# score=0.{d}\n"         # one line: terminal in both line-count modes
    res = search(short, GIFMCTSConfig(allow_generate=False))[0].run(4)
    assert (res.llm_calls, res.stop_reason) == (1, "exhausted")   # the only child is complete: nothing left
    res = search(short, GIFMCTSConfig(fix_duplicate_programs=False))[0].run(5)   # comment-only programs repeat
    assert len(res.tree["nodes"]) == 6 and not any(n["replaced"] for n in res.tree["nodes"])
    assert all(n["terminal"] for n in res.tree["nodes"][1:])


def test_paper_compat_reexpands_terminal_nodes():
    short = lambda m, d, sd: f"# score=0.{d}\n"
    s, llm = search(short, GIFMCTSConfig(allow_generate=False, paper_compat=True))
    res = s.run(4)
    assert res.llm_calls == 4 and len(res.tree["nodes"]) == 2
    g1 = res.tree["nodes"][1]
    assert len(g1["replaced"]) == 3 and g1["score"] == pytest.approx(0.4)
    assert res.best_value == pytest.approx(0.4)


def test_terminal_value_fix_switch():
    for compat, q in ((False, 0.7), (True, 0.0)):
        t = SearchTree(GIFMCTSConfig(paper_compat=compat))
        n = t.expand([0], "g1", "# score=0.7", summary(0.7))
        assert n.terminal and n.reward == 0.7 and n.value() == 0.0
        assert t.q(n) == q
        assert t.root.value() == pytest.approx(0.7 / 2)  # the score reaches the root through reward + γ·0


# ---------------------------------------------------------------------------------------------------------------
# the method in one place (nbs/22_gif_mcts.ipynb, "The method"): the search runs `simulation`, UCT's bonus is `exploration`
def test_every_step_runs_the_simulation_function(monkeypatch):
    from cwm_nb.search import gif_mcts
    seen, real = [], gif_mcts.simulation
    monkeypatch.setattr(gif_mcts, "simulation", lambda s: seen.append(s.calls) or real(s))
    res = search(seeded)[0].run(4)
    assert res.llm_calls == 4 and seen == [0, 1, 2, 3]


def test_the_exploration_term_is_edited_in_one_place(monkeypatch):
    from cwm_nb.search import gif_mcts
    score = lambda draw: body(f"score={min(0.1 * draw, 0.9):.1f}")
    before = search(lambda m, d, s: score(d))[0].run(6).tree
    monkeypatch.setattr(gif_mcts, "exploration", lambda n_parent, n, C=0.1, eps=1.0: 10 * C * math.sqrt(math.log(n_parent) / (n + eps)))
    assert gif_mcts.uct_visited(0.6, 3, 2) == 0.6 + math.sqrt(math.log(3) / 3)
    after = search(lambda m, d, s: score(d))[0].run(6).tree
    assert before["stats"]["tree_depth"] == 3 and after["stats"]["tree_depth"] == 2   # a wider, shallower tree


# ---------------------------------------------------------------------------------------------------------------
# determinism, checkpoint and resume
def test_same_seed_same_tree_and_draws():
    a, la = search(seeded, seed=4)
    b, lb = search(seeded, seed=4)
    ra, rb = a.run(8), b.run(8)
    assert json.dumps(ra.tree, sort_keys=True) == json.dumps(rb.tree, sort_keys=True)
    assert [c["draw"] for c in la.calls] == list(range(1, 9)) and all(c["seed"] == 4 for c in la.calls)
    rc = search(seeded, seed=5)[0].run(8)
    assert json.dumps(rc.tree, sort_keys=True) != json.dumps(ra.tree, sort_keys=True)


def test_response_cache_replays_the_tree_without_calls():
    cache = CachingLLM(ScriptLLM(seeded))
    r1 = GIFMCTS(cache, fake_evaluate, "toy", seed=2, progress=False).run(7)
    assert cache.misses == 7
    r2 = GIFMCTS(cache, fake_evaluate, "toy", seed=2, progress=False).run(7)
    assert cache.misses == 7 and r2.tree == r1.tree


def test_checkpoint_resume_after_kill(tmp_path):
    ck = tmp_path / "run" / "checkpoint.json"

    def dies_on_3(msgs, draw, seed):
        if draw == 3: raise KeyboardInterrupt
        return seeded(msgs, draw, seed)

    s1, l1 = search(dies_on_3, seed=7, checkpoint=ck)
    with pytest.raises(KeyboardInterrupt): s1.run(5)
    state = json.loads(ck.read_text())
    assert state["calls"] == 2 and len(state["best_value_per_call"]) == 2
    for key in ("tree", "rng", "best_program", "best_value", "prompt_tokens", "completion_tokens", "config", "seed"):
        assert key in state
    assert set(state["tree"]["models"]) == {"generate", "improve", "fix"}
    assert all("program" in n and "visits" in n and "value_sum" in n for n in state["tree"]["nodes"])

    s2, l2 = search(seeded, seed=7, checkpoint=ck)
    res = s2.run(5)
    assert [c["draw"] for c in l2.calls] == [3, 4, 5]             # calls 1-2 are not repeated
    assert len([c for c in l1.calls if c["draw"] < 3]) + len(l2.calls) == 5
    assert res.llm_calls == 5 and res.prompt_tokens == sum(10 * d for d in range(1, 6))
    full = search(seeded, seed=7)[0].run(5)
    assert res.tree == full.tree and res.best_value_per_call == full.best_value_per_call

    s3, l3 = search(seeded, seed=7, checkpoint=ck)                 # finished: resuming makes no call
    assert s3.run(5).tree == full.tree and l3.calls == []
    s4, l4 = search(seeded, seed=7, checkpoint=ck)                 # a larger budget continues
    assert s4.run(7).tree == search(seeded, seed=7)[0].run(7).tree and [c["draw"] for c in l4.calls] == [6, 7]


def test_checkpoint_of_other_search_is_refused(tmp_path):
    from cwm_nb.core import CwmNbError
    ck = tmp_path / "ck.json"
    search(seeded, seed=1, checkpoint=ck)[0].run(2)
    with pytest.raises(CwmNbError, match="different search"):
        search(seeded, GIFMCTSConfig(C=0.5), seed=1, checkpoint=ck)


# ---------------------------------------------------------------------------------------------------------------
# ablations (the paper's App. C, Table 6)
def test_ablation_no_generate():
    s, _ = search(lambda m, d, sd: body(f"score=0.{d % 9 + 1}"), GIFMCTSConfig(allow_generate=False))
    res = s.run(6)
    nodes = res.tree["nodes"]
    assert list(nodes[0]["open_actions"]) == [] and nodes[0]["children"] == [1]   # only the root's g1
    assert [n["action_type"] for n in nodes].count("generate") == 1
    assert res.action_stats["n_improve"] == 5


def test_ablation_no_fix():
    s, _ = search(lambda m, d, sd: body("bug" if d % 2 else "score=0.3"), GIFMCTSConfig(allow_fix=False))
    res = s.run(6)
    buggy = [n for n in res.tree["nodes"] if n["bug"]]
    assert buggy and all(n["children"] == [] and n["open_actions"] == [] for n in buggy)
    assert res.action_stats["n_fix"] == 0


def test_ablation_no_improve():
    res = search(lambda m, d, sd: body(f"score=0.{d}"), GIFMCTSConfig(allow_improve=False))[0].run(5)
    assert res.action_stats["n_improve"] == 0 and res.action_stats["n_generate"] == 5


# ---------------------------------------------------------------------------------------------------------------
# results, stats, plots
def test_result_tree_and_stats():
    res = search(seeded, seed=3)[0].run(6)
    json.dumps(res.to_dict())
    t = res.tree
    for k in ("id", "parent", "action", "action_type", "visits", "value", "reward", "terminal", "bug", "score",
              "program_sha"):
        assert k in t["nodes"][1]
    assert set(t["programs"]) >= {n["program_sha"] for n in t["nodes"][1:]}
    st = action_stats(t)
    assert st["n_expansions"] == 6 == st["n_generate"] + st["n_improve"] + st["n_fix"]
    assert st["best_path_length"] == len(t["best_path"]) - 1
    assert t["nodes"][0]["visits"] == 7                    # 1 initial + 1 per simulation
    g = tree_to_networkx(t)
    assert g.number_of_edges() == 6
    import matplotlib; matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a1, a2) = plt.subplots(1, 2)
    plot_best_value(res.best_value_per_call, ax=a1); plot_tree(t, ax=a2)
    plt.close(fig)


def test_cot_choice_follows_the_model():
    assert _default_cot(SimpleNamespace(inner=SimpleNamespace(mode="completion", name="embedded:gemma"))) is False
    assert _default_cot(SimpleNamespace(mode="chat", name="openai:gpt-4o")) is True
    s = GIFMCTS(SimpleNamespace(name="embedded"), fake_evaluate, "d", progress=False)
    assert s.cot is False
    assert s.messages(s.tree.root, "generate")[-1]["content"].endswith("```python\nimport numpy as np\n\n\nclass Environment:\n")
    chat = GIFMCTS(SimpleNamespace(mode="chat"), fake_evaluate, "d", progress=False)
    assert chat.cot is True and chat.messages(chat.tree.root, "generate")[-1]["content"].endswith("```python\n")
    s.tree.expand([0], "g1", body("bug"), evaluation_summary(fake_evaluate(body("bug"))))
    msgs = s.messages(s.tree.nodes[1], "fix")
    assert prefill_opens_code(msgs) and "NameError" in msgs[1]["content"]


def test_with_the_project_scripted_llm():
    llm_mod = pytest.importorskip("cwm_nb.llm.demo")
    def ans(msgs, draw):
        code = body("perfect" if draw == 2 else "score=0.5")
        return code if prefill_opens_code(msgs) else "## Corrected program\n```python\n" + code + "```"
    llm = llm_mod.ScriptedLLM(ans)
    res = GIFMCTS(llm, fake_evaluate, "toy", progress=False).run(5)
    assert (res.llm_calls, res.stop_reason) == (2, "perfect")
    assert res.prompt_tokens > 0 and llm.usage.calls == 2


# ---------------------------------------------------------------------------------------------------------------
# prompts (20_prompts)
def test_extract_code_cases():
    assert extract_code("```PYTHON\nimport os\n```") == "import os"
    assert extract_code("Text\n```python\nThe code:\ndef f():\n    return 1\n```\n") == "def f():\n    return 1"
    assert extract_code("```python\na = 1\n```\n```python\nb = 1\nc = 2\n```") == "b = 1\nc = 2"
    assert extract_code("Here is the complete program:\n```python\nclass Environment:\n    def step(s") == \
        "class Environment:\n    def step(s"
    assert extract_code("no code here") is None
    assert parse_answer("## Diagnosis\n```python\nwrong = 1\n```\n## Corrected program\n```python\nright = 2\n```")[1] == "right = 2"


def test_prompts_are_plain_and_show_expected_and_predicted():
    fail = dict(obs=np.array([0.1, 0.2], np.float32), action=np.int64(0),
                expected=dict(next_obs=np.array([0.3, 0.4], np.float64), reward=np.float32(1.0), done=np.bool_(False)),
                predicted=dict(next_obs=np.array([0.3, 0.5]), reward=np.float64(0.0), done=False))
    for cot in (True, False):
        text = "\n".join(m["content"] for m in improve_messages("desc", "x = 1", fail, cot=cot))
        assert "np.float" not in text and "np.int" not in text and "np.bool" not in text and "array(" not in text
        assert "next_state = [0.3, 0.4]" in text and "next_state = [0.3, 0.5]" in text
        assert "reward = 1.0" in text and "reward = 0.0" in text
    text = "\n".join(m["content"] for m in fix_messages("desc", "x = 1/0", "ZeroDivisionError", cot=False))
    assert "ZeroDivisionError" in text
    assert generate_messages("desc", "import math")[-1]["content"].endswith("```python\nimport math\n")


def test_node_state_line_counts():
    prog = "\n".join(map(str, range(20)))
    s, new, done = node_state(prog, "", 2, exact=False)
    assert (len(s.split("\n")), done) == (4, False)
    s, new, done = node_state(prog, s, 2, exact=False)
    assert len(s.split("\n")) == 7
    s, new, done = node_state(prog, "0\n1", 2, exact=True)
    assert (s, new, done) == ("0\n1\n2\n3", 2, False)


def test_an_interruption_while_selecting_puts_the_random_generator_back(monkeypatch):
    "Interrupted during UCT selection (before the LLM call), the search's generator is where the step began."
    s, _ = search(seeded, seed=3)
    s.run(2)
    before = s.rng.bit_generator.state
    def select_then_interrupt(rng):
        rng.random(5)              # selection draws for its ties, then the user presses Ctrl-C
        raise KeyboardInterrupt
    monkeypatch.setattr(s.tree, "select", select_then_interrupt)
    with pytest.raises(KeyboardInterrupt): s.step()
    assert s.rng.bit_generator.state == before
