"""Repeated programs in GIF-MCTS (22_gif_mcts, `fix_duplicate_programs`; issue #33, point 6).

A scripted model (`ScriptedLLM`, a test double) always writes the same program; the evaluator double runs the
program and reads its `score` variable, so two programs that score differently differ in their code, and a
program that raises is a bug. Each test counts the evaluator's runs: the sandbox time a repeat costs.
"""
import json
from types import SimpleNamespace

import pytest

from cwm_nb.core import CwmNbError
from cwm_nb.llm.client import prefill_of
from cwm_nb.llm.demo import ScriptedLLM
from cwm_nb.search.gif_mcts import GIFMCTS, GIFMCTSConfig, program_key
from cwm_nb.testing.doubles import as_answer


def program(score=0.5):
    "A 12-line program whose score is in its code; `score=None`: a program that raises (NameError)."
    return "".join(f"v{i} = {i}\n" for i in range(11)) + (f"score = {score}\n" if score is not None
                                                          else "score = undefined_name\n")


class Runs:
    "Evaluator double: runs the program, scores it by its `score` variable, and keeps every program it ran."
    def __init__(self): self.ran = []

    def __call__(self, src):
        self.ran.append(src)
        ns = {}
        try: exec(src, ns)
        except Exception as e:
            return SimpleNamespace(accuracy=0.0, bug=True, error=f"{type(e).__name__}: {e}", failures=[],
                                   perfect=False)
        acc = float(ns["score"])
        fails = [] if acc >= 1 else [dict(index=0, obs=[0.0], action=0, expected=dict(next_obs=[1.0]),
                                          predicted=dict(next_obs=[0.5]))]
        return SimpleNamespace(accuracy=acc, bug=False, error=None, failures=fails, perfect=acc >= 1)


def always(src, extra=lambda draw: ""):
    "A model that always writes `src` (plus `extra(draw)`): after a pre-filled start of it, the rest."
    def answer(messages, draw):
        start = prefill_of(messages).partition("```python\n")[2]
        assert src.startswith(start)
        return as_answer(messages, src[len(start):] + extra(draw))
    return ScriptedLLM(answer)


def search(llm, config=None, runs=None, **kw):
    return GIFMCTS(llm, runs if runs is not None else Runs(), "A toy environment.", config, progress=False, **kw)


def test_program_key_ignores_comments_blank_lines_and_spacing():
    a = "x = 1  # the start\n\n\ny = x+1   \n"
    assert program_key(a) == program_key("x = 1\ny = x + 1") == program_key("# header\nx = 1\ny = x + 1\n\n")
    assert program_key(a) != program_key("x = 1\ny = x + 2")
    # a program that does not parse compares by its stripped text
    assert program_key("x = (\n") == program_key("  x = (  ") != program_key("x = [")


def test_repeats_are_visits_to_the_node_by_default():
    runs = Runs()
    res = search(always(program(0.5)), runs=runs).run(8)
    assert res.llm_calls == 8 and len(runs.ran) == 1                 # one sandbox run for eight answers
    t = res.tree
    assert len(t["nodes"]) == 2 and t["duplicate_programs"] == t["stats"]["duplicate_programs"] == 7
    assert t["duplicates"] == [dict(call=c, same_as=1) for c in range(2, 9)]
    root, node = t["nodes"]
    # every repeat is a visit along the selection path (the root counts them all) and a try where it was made
    assert root["visits"] == 9 and sum(root["repeats"].values()) + sum(node["repeats"].values()) == 7
    assert node["visits"] == 1 + sum(node["repeats"].values())       # node 1 counts the tries made at it
    assert set(node["repeats"]) == {"generate", "improve"} and root["repeats"]["generate"] >= 1
    assert node["value"] == pytest.approx(0.5) and root["value"] == pytest.approx(0.5 * 8 / 9)
    assert res.value_per_call == [0.5] * 8
    assert res.action_stats["n_expansions"] == 1 and res.stop_reason == "budget"


@pytest.mark.parametrize("config", [GIFMCTSConfig(paper_compat=True), GIFMCTSConfig(fix_duplicate_programs=False)])
def test_the_paper_behaviour_makes_and_evaluates_a_node_per_repeat(config):
    runs = Runs()
    res = search(always(program(0.5)), config, runs=runs).run(8)
    assert len(runs.ran) == 8 and len(res.tree["nodes"]) == 9
    assert res.tree["stats"]["duplicate_programs"] == 7                # counted under this setting too
    assert res.tree["stats"]["n_expansions"] == 8


def test_the_switch_overrides_paper_compat():
    runs = Runs()
    search(always(program(0.5)), GIFMCTSConfig(paper_compat=True, fix_duplicate_programs=True), runs=runs).run(6)
    assert len(runs.ran) == 1


def test_a_repeat_that_differs_in_comments_and_blank_lines_is_not_run():
    runs = Runs()
    res = search(always(program(0.5), extra=lambda d: f"\n\n# written by call {d}   \n"), runs=runs).run(5)
    assert len(runs.ran) == 1 and res.tree["duplicate_programs"] == 4
    # a program that differs in code is run
    runs = Runs()
    search(ScriptedLLM(lambda m, d: as_answer(m, program(d / 10))), runs=runs).run(3)
    assert len(runs.ran) == 3


@pytest.mark.parametrize("revisit,sandbox_runs", [(True, 1), (False, 4)])
def test_a_model_that_repeats_a_broken_program_still_ends_its_fix_chain(revisit, sandbox_runs):
    """Without generate beyond the root's first, the broken program gets its f = 3 fixes and nothing else.
    Each repeated answer to a fix spends one attempt, as a failed fix node does in the paper's behaviour:
    after three the chain is dead and the search has nothing left to try."""
    runs = Runs()
    s = search(always(program(None)), GIFMCTSConfig(allow_generate=False, fix_duplicate_programs=revisit), runs=runs)
    res = s.run(10)
    assert (res.llm_calls, res.stop_reason, len(runs.ran)) == (4, "exhausted", sandbox_runs)
    assert ["raised" in m[1]["content"] for m in s.llm.seen] == [False, True, True, True]   # 3 fixes
    bug = s.tree.nodes[1]
    assert (bug.terminal, bug.value()) == (True, 0.0) and res.tree["duplicate_programs"] == 3


def test_a_repeated_fix_lowers_the_chain_value_like_a_failed_fix():
    s = search(always(program(None)))
    s.run(3)                                                        # a generate that raised, two fixes
    bug = s.tree.nodes[1]
    assert (bug.fixes_left, round(bug.value(), 2), bug.bug) == (1, 0.33, True)


def test_resume_gives_the_tree_of_an_uninterrupted_run(tmp_path):
    src = program(0.5)
    def killed_at(k):
        plain = always(src)
        def answer(messages, draw):
            if draw == k: raise KeyboardInterrupt
            return plain.answers(messages, draw)
        return ScriptedLLM(answer)
    ck = tmp_path/"ck.json"
    with pytest.raises(KeyboardInterrupt): search(killed_at(4), seed=2, checkpoint=ck).run(7)
    assert json.loads(ck.read_text())["tree"]["duplicates"] == [dict(call=2, same_as=1), dict(call=3, same_as=1)]
    resumed = search(always(src), seed=2, checkpoint=ck).run(7)
    full = search(always(src), seed=2).run(7)
    assert resumed.tree == full.tree and resumed.tree["duplicate_programs"] == 6


def test_a_checkpoint_written_before_the_option_existed_resumes(tmp_path):
    ck = tmp_path/"ck.json"
    search(always(program(0.5)), seed=1, checkpoint=ck).run(3)
    d = json.loads(ck.read_text())
    del d["config"]["fix_duplicate_programs"]; del d["tree"]["duplicates"]    # as the code before wrote it
    ck.write_text(json.dumps(d))
    runs = Runs()
    res = search(always(program(0.5)), seed=1, checkpoint=ck, runs=runs).run(5)
    assert res.llm_calls == 5 and len(runs.ran) == 0                  # calls 4 and 5 repeat node 1
    assert res.tree["duplicates"] == [dict(call=4, same_as=1), dict(call=5, same_as=1)]
    # a checkpoint that has the field still refuses another value of it
    with pytest.raises(CwmNbError, match="config.fix_duplicate_programs differ"):
        search(always(program(0.5)), GIFMCTSConfig(fix_duplicate_programs=False), seed=1, checkpoint=ck)
