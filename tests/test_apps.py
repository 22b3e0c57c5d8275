"""cwm_nb.apps.problems: APPS loaders (both layouts, malformed problems), the paper's split, strict vs apps_compat comparison,
the sandboxed harness on the shipped problems (reference, almost-right and hostile programs), per-test timeout vs
whole-problem cap, the evaluation's interface for the searches, and the prompts."""
import json, shutil, warnings
from pathlib import Path
import numpy as np
import pytest

from cwm_nb.apps.problems import AppsDataError, AppsProblem, demo_problems, load_apps, problem_from_fields, split_tests
from cwm_nb.apps.harness import AppsEvaluation, apps_compat_rule, apps_compat_value_match, apps_metrics, evaluate_solution, outputs_match, strict_match, strict_value_match
from cwm_nb.apps.prompts import apps_fix_messages, apps_generate_messages, apps_improve_messages, apps_prefill, choose_failure, looks_like_apps_solution
from cwm_nb.core import CwmNbError, data_dir

pytestmark = pytest.mark.timeout(300)

DEMO = data_dir()/"apps_demo"
ALMOST = json.loads((DEMO/"almost_right.json").read_text())
FAST = dict(per_test_s=0.5, problem_s=5.0)   # short limits for programs that never end


@pytest.fixture(scope="module")
def demo():
    return {p.problem_id: p for p in demo_problems()}


def _rows(problems):
    "The problems as rows with the field names of the Hugging Face export (JSON text in two fields)."
    return [dict(problem_id=int(p.problem_id), question=p.question, solutions=json.dumps(p.solutions),
                 starter_code=p.starter_code, difficulty=p.difficulty, url=p.url,
                 input_output=json.dumps({"inputs": p.inputs, "outputs": p.outputs,
                                          **({"fn_name": p.fn_name} if p.fn_name else {})})) for p in problems]


def _fields(p: AppsProblem):
    return (int(p.problem_id), p.question, p.inputs, p.outputs, p.fn_name, p.starter_code, p.difficulty, p.url,
            p.solutions, p.position, p.kind)


# --- loaders -------------------------------------------------------------------------------------------------------

def test_layouts_load_the_same_problems(tmp_path, demo):
    ref = [_fields(p) for p in demo.values()]
    assert [f[-1] for f in ref] == ["stdin", "stdin", "stdin", "call", "call", "stdin"]
    # the release's root with train/ and test/ folders
    root = tmp_path/"APPS"
    shutil.copytree(DEMO/"test", root/"test")
    shutil.copytree(DEMO/"test", root/"train")
    shutil.rmtree(root/"train"/"0000")
    assert [_fields(p) for p in load_apps(root, start=0, stop=None)] == ref
    assert len(load_apps(root, split="train", start=0, stop=None)) == 5
    # JSON lines (rows in shuffled order), a JSON array, parquet files, and folders holding them
    rows = _rows(demo.values())
    shuffled = [rows[i] for i in (4, 0, 5, 2, 1, 3)]
    (tmp_path/"hf").mkdir()
    (tmp_path/"hf"/"test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in shuffled))
    (tmp_path/"array.json").write_text(json.dumps(shuffled))
    import pyarrow as pa, pyarrow.parquet as pq
    (tmp_path/"pq"/"test").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(shuffled[:3]), tmp_path/"pq"/"test"/"0000.parquet")
    pq.write_table(pa.Table.from_pylist(shuffled[3:]), tmp_path/"pq"/"test"/"0001.parquet")
    for src in (tmp_path/"hf", tmp_path/"hf"/"test.jsonl", tmp_path/"array.json", tmp_path/"pq",
                tmp_path/"pq"/"test"/"0000.parquet"):
        got = [_fields(p) for p in load_apps(src, start=0, stop=None)]
        if src.name == "0000.parquet": assert [(g[0], g[-2]) for g in got] == [(0, 0), (4, 1), (5, 2)]
        else: assert got == ref, src
    # the split rule selects by position in the sorted list, in every layout
    for src in (root, tmp_path/"hf", tmp_path/"pq", tmp_path/"array.json"):
        sel = load_apps(src, start=2, stop=5)
        assert [(int(p.problem_id), p.position) for p in sel] == [(2, 2), (3, 3), (4, 4)], src


def test_split_rule_sorts_by_number_and_checks_the_range(tmp_path, demo):
    d = tmp_path/"test"
    for k in range(12):   # names without zero padding: sorted as numbers (9 before 10)
        shutil.copytree(DEMO/"test"/"0000", d/str(k))
    got = load_apps(tmp_path, start=8, stop=11)
    assert [(p.problem_id, p.position) for p in got] == [("8", 8), ("9", 9), ("10", 10)]
    with pytest.raises(AppsDataError, match="has 12 problems, so positions from 3000 on do not exist"):
        load_apps(tmp_path)   # the paper's default range needs the full test set
    with pytest.warns(UserWarning, match="positions 12-19 requested do not exist"):
        assert len(load_apps(tmp_path, start=10, stop=20)) == 2
    with pytest.raises(CwmNbError, match="bad range"): load_apps(tmp_path, start=5, stop=5)
    with pytest.raises(AppsDataError, match="does not exist"): load_apps(tmp_path/"missing")
    (tmp_path/"empty").mkdir()
    with pytest.raises(AppsDataError, match="no APPS problems found"): load_apps(tmp_path/"empty")
    rows = _rows(demo.values())
    (tmp_path/"dup.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows + rows[:1]))
    with pytest.raises(AppsDataError, match="problem 0 appears twice"): load_apps(tmp_path/"dup.jsonl", start=0, stop=None)


@pytest.mark.parametrize("change, message", [
    (lambda d: (d/"question.txt").unlink(), "the statement (question) is missing or empty"),
    (lambda d: (d/"input_output.json").unlink(), "it has no tests (input_output is missing or empty)"),
    (lambda d: (d/"input_output.json").write_text('{"inputs": ["1\\n"'), "input_output is not valid JSON"),
    (lambda d: (d/"input_output.json").write_text('{"inputs": ["1\\n"], "outputs": []}'), "1 inputs but 0 outputs"),
    (lambda d: (d/"input_output.json").write_text('{"inputs": [], "outputs": []}'), "it has no tests (the lists"),
    (lambda d: (d/"input_output.json").write_text('{"inputs": [5], "outputs": ["5"]}'), "the input of test 0 is a int, not text"),
    (lambda d: (d/"input_output.json").write_text('{"fn_name": "a b", "inputs": [[1]], "outputs": [1]}'), "fn_name must be a Python identifier"),
    (lambda d: (d/"input_output.json").write_text('{"fn_name": "f", "inputs": [1], "outputs": [1]}'), "must be a list of arguments for f()"),
    (lambda d: (d/"input_output.json").write_text('[1, 2]'), "input_output must be a JSON object"),
    (lambda d: (d/"metadata.json").write_text('{'), "metadata.json is not valid JSON"),
])
def test_malformed_problem_is_refused_by_name_or_kept_in_place(tmp_path, change, message):
    shutil.copytree(DEMO/"test", tmp_path/"test")
    change(tmp_path/"test"/"0002")
    with pytest.raises(AppsDataError) as ei: load_apps(tmp_path, start=0, stop=None)
    assert "APPS problem 0002 (" in str(ei.value) and message in str(ei.value)
    assert "on_error='keep'" in str(ei.value)   # says what to do
    kept = load_apps(tmp_path, start=0, stop=None, on_error="keep")
    assert [p.problem_id for p in kept] == ["0000", "0001", "0002", "0003", "0004", "0005"]
    assert message in kept[2].error and kept[2].n_tests == 0 and kept[2].position == 2
    assert all(p.error is None for i, p in enumerate(kept) if i != 2)
    with pytest.raises(CwmNbError, match="APPS problem 0002 cannot be evaluated"):
        evaluate_solution("print(1)", kept[2])


def test_malformed_rows(tmp_path, demo):
    rows = _rows(demo.values())
    rows[1]["problem_id"] = "x1"
    (tmp_path/"a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(AppsDataError, match="problem id 'x1'.*is not a number"): load_apps(tmp_path/"a.jsonl", start=0, stop=None)
    (tmp_path/"b.jsonl").write_text(json.dumps(_rows(demo.values())[0]) + "\n{not json\n")
    with pytest.raises(AppsDataError, match="line 2 is not valid JSON"): load_apps(tmp_path/"b.jsonl", start=0, stop=None)
    rows = _rows(demo.values())
    rows[3]["input_output"] = ""
    (tmp_path/"c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(AppsDataError, match=r"APPS problem 3 \(.*c.jsonl row problem_id=3\): it has no tests"):
        load_apps(tmp_path/"c.jsonl", start=0, stop=None)


def test_a_corrupt_jsonl_line_names_its_file_line_and_problem(tmp_path, demo):
    rows = [json.dumps(r) for r in _rows(demo.values())]
    rows[2] = rows[2][: len(rows[2]) // 2]   # a line cut short (its problem_id is still readable)
    f = tmp_path/"test.jsonl"
    f.write_text("\n".join(rows) + "\n")
    with pytest.raises(AppsDataError) as ei: load_apps(f, start=0, stop=None)
    msg = str(ei.value)
    assert "APPS problem 2 (" in msg and f"line 3 of {f} is not valid JSON" in msg and "repair or delete that line" in msg
    kept = load_apps(f, start=0, stop=None, on_error="keep")
    assert [p.problem_id for p in kept] == ["0", "1", "2", "3", "4", "5"] and "line 3 of" in kept[2].error
    assert [p.error is None for p in kept] == [True, True, False, True, True, True]
    assert [p.problem_id for p in load_apps(f, start=3, stop=None)] == ["3", "4", "5"]   # the corrupt line is not selected
    (tmp_path/"array.json").write_text('[{"problem_id": 1,')
    with pytest.raises(AppsDataError, match=r"array.json is not valid JSON \(line 1"): load_apps(tmp_path/"array.json", start=0, stop=None)


def test_a_folder_with_train_and_test_parquet_reads_the_chosen_split(tmp_path, demo):
    import pyarrow as pa, pyarrow.parquet as pq
    rows = _rows(demo.values())
    train = [dict(r, problem_id=r["problem_id"] + 100, question="TRAIN " + r["question"]) for r in rows]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path/"test-00000-of-00001.parquet")
    pq.write_table(pa.Table.from_pylist(train), tmp_path/"train-00000-of-00001.parquet")
    got = load_apps(tmp_path, start=0, stop=None)
    assert [p.problem_id for p in got] == ["0", "1", "2", "3", "4", "5"] and not any(p.question.startswith("TRAIN") for p in got)
    assert [p.problem_id for p in load_apps(tmp_path, "train", start=0, stop=None)] == [str(k) for k in range(100, 106)]
    with pytest.raises(AppsDataError, match="splits \\['test', 'train'\\], none of split 'validation'"):
        load_apps(tmp_path, "validation", start=0, stop=None)
    pq.write_table(pa.Table.from_pylist(rows[:1]), tmp_path/"extra.parquet")
    with pytest.raises(AppsDataError, match="ambiguous"): load_apps(tmp_path, start=0, stop=None)


def test_a_malformed_problem_keeps_its_url(tmp_path, demo):
    shutil.copytree(DEMO/"test", tmp_path/"test")
    (tmp_path/"test"/"0002"/"input_output.json").unlink()
    kept = load_apps(tmp_path, start=0, stop=None, on_error="keep")
    assert kept[2].error and kept[2].url == demo["0002"].url and kept[2].url and kept[2].difficulty == demo["0002"].difficulty
    rows = _rows(demo.values())
    rows[2]["input_output"] = "{"
    (tmp_path/"a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    kept = load_apps(tmp_path/"a.jsonl", start=0, stop=None, on_error="keep")
    assert kept[2].error and kept[2].url == demo["0002"].url


# --- comparison ------------------------------------------------------------------------------------------------------

LENIENT = [  # (printed, expected, the apps_compat rule that accepts it); strict rejects all of them
    (" 3\n 7", "3\n7", "stripped_text"),
    ("3\n\n7\n", "3\n7\n", "nonempty_lines"),
    ("2.3333333333333335", "2.333333", "allclose"),
    ("500000500001", "500000500000", "allclose"),
    ("4\n6 3 2 1", "4\n1 2 3 6", "token_sets"),
    ("2 1", "1 2 2", "token_sets"),
    ("7\n3", "3\n7", "token_sets"),
    ("0.1234", "0.123", "rounded_token_sets"),
    ("1", "1.0", "allclose"),
]


@pytest.mark.parametrize("out, exp, rule", LENIENT)
def test_lenient_rules_accept_what_strict_rejects(out, exp, rule):
    assert not strict_match(out, exp)
    assert apps_compat_rule(out, exp) == rule
    assert outputs_match(out, exp, "stdin", "apps_compat") and not outputs_match(out, exp, "stdin", "strict")


def test_strict_definition():
    assert strict_match("1 2\r\n3\t \n\n\n", "1 2\n3\n")       # CRLF, trailing blanks per line and at the end
    assert strict_match("", "\n\n")
    for out, exp in [(" 1", "1"), ("1\n\n2", "1\n2"), ("1 2", "1  2"), ("YES", "Yes"), ("0.50", "0.5"), ("1\n2", "2\n1")]:
        assert not strict_match(out, exp), (out, exp)
    assert apps_compat_rule("3\n8", "3\n7") is None and apps_compat_rule("", "1") is None
    assert strict_value_match([1, 2], [[1, 2]]) and strict_value_match({"1": "a"}, [{"1": "a"}])
    assert not strict_value_match(1, [True]) and not strict_value_match(True, [1]) and not strict_value_match([1], [[1, 2]])
    assert apps_compat_value_match(1, [True]) and apps_compat_value_match(2.0, [2]) and not apps_compat_value_match(3, [4])
    with pytest.raises(CwmNbError, match="unknown comparison mode"): outputs_match("1", "1", "stdin", "lenient")


# --- harness on the shipped problems ---------------------------------------------------------------------------------

def test_reference_solutions_pass_in_both_modes(demo):
    for p in demo.values():
        assert p.solutions, p.problem_id
        for mode in ("strict", "apps_compat"):
            ev = evaluate_solution(p.solutions[0], p, mode=mode)
            assert ev.perfect and ev.accuracy == 1.0 and not ev.bug and ev.error is None, (p.problem_id, mode, ev.summary())
            assert ev.counts == {"pass": p.n_tests}


# (problem, program name) -> tests passed under (strict, apps_compat)
ALMOST_EXPECTED = {("0000", "leading_space"): (0, 4), ("0001", "full_precision"): (0, 4),
                   ("0002", "descending"): (1, 5), ("0002", "duplicated_divisor"): (0, 5),
                   ("0003", "int_for_bool"): (0, 6), ("0004", "false_for_zero"): (2, 5),
                   ("0005", "float_division"): (0, 4), ("0005", "off_by_one"): (0, 3)}


def test_almost_right_programs_fail_strict_and_pass_apps_compat(demo):
    seen = set()
    for pid, progs in ALMOST.items():
        for prog in progs:
            p = demo[pid]
            ev = evaluate_solution(prog["source"], p)
            s, c = ALMOST_EXPECTED[(pid, prog["name"])]
            assert (sum(t.passed_strict for t in ev.tests), sum(t.passed_apps_compat for t in ev.tests)) == (s, c), (pid, prog["name"])
            assert not ev.perfect and ev.n_passed == s and not ev.bug
            compat = evaluate_solution(prog["source"], p, mode="apps_compat")
            assert compat.n_passed == c and compat.perfect == (c == p.n_tests)
            seen.add((pid, prog["name"]))
    assert seen == set(ALMOST_EXPECTED)


def _sol(body: str) -> str:
    "A stdin program for problem 0005 (triangular numbers) that runs `body` after printing the right answers."
    return "import sys, os, time\nq = int(input())\nfor _ in range(q):\n    n = int(input())\n    print(n * (n + 1) // 2)\n" + body


HOSTILE = {   # name: (source, status of every test under strict, status under apps_compat)
    "infinite loop ignoring signals": ("import signal\nfor s in (signal.SIGALRM, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):\n"
                                       "    signal.signal(s, signal.SIG_IGN)\nwhile True:\n    try:\n        while True: pass\n"
                                       "    except BaseException: pass\n", "timeout", "timeout"),
    "stdin read forever": ("import sys\ndata = ''\nwhile True:\n    data += sys.stdin.read()\n", "timeout", "timeout"),
    "input() past the end": ("while True:\n    input()\n", "runtime_error", "runtime_error"),
    "output flood": ("while True:\n    print('x' * 1000)\n", "output_limit", "output_limit"),
    "answer only after the timeout": ("import time\ntime.sleep(0.8)\n" + _sol(""), "timeout", "timeout"),
    "sys.exit()": (_sol("sys.exit()\n"), "pass", "pass"),
    "exit()": (_sol("exit()\n"), "pass", "pass"),
    "sys.exit(3)": (_sol("sys.exit(3)\n"), "runtime_error", "pass"),
    "os._exit(0) after a flush": (_sol("sys.stdout.flush()\nos._exit(0)\n"), "pass", "pass"),
    "os._exit(2)": (_sol("sys.stdout.flush()\nos._exit(2)\n"), "runtime_error", "runtime_error"),
    "runs nothing": ("def main():\n    print(10)\n", "no_output", "no_output"),
    "empty program": ("", "no_output", "no_output"),
    "leaves a process holding stdout": (_sol("sys.stdout.flush()\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\n"), "pass", "pass"),
    "main in a thread": ("import threading\ndef main():\n" + "".join("    " + l + "\n" for l in _sol("").splitlines()[1:])
                         + "threading.Thread(target=main).start()\n", "pass", "pass"),
    "memory bomb": ("x = bytearray(10 ** 11)\n", "runtime_error", "runtime_error"),
    "stderr flood": (_sol("for _ in range(10 ** 5): sys.stderr.write('e' * 100)\n"), "pass", "pass"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_and_careless_programs(name, demo):
    src, strict, compat = HOSTILE[name]
    p = demo["0005"]
    endless = strict == "timeout"   # never ends: short limits, two tests, one mode (the verdict needs no comparison)
    for mode, want in (("strict", strict),) + ((("apps_compat", compat),) if not endless else ()):
        ev = evaluate_solution(src, p, tests=[0, 1] if endless else None, mode=mode, **(FAST if endless else {}))
        assert [t.status for t in ev.tests] == [want] * ev.n_tests, (name, mode, ev.summary(), ev.tests[0].error)
        assert ev.perfect == (want == "pass") and ev.harness_error is None
        if want != "pass": assert ev.accuracy == 0.0 and len(ev.failures) == ev.n_tests
    assert evaluate_solution(p.solutions[0], p).perfect   # the harness is unharmed


def test_error_messages_say_what_happened(demo):
    p = demo["0005"]
    ev = evaluate_solution(HOSTILE["infinite loop ignoring signals"][0], p, tests=[0], **FAST)
    assert ev.tests[0].error == "the program ran too long on this test (killed at the per-test timeout of 0.5 s)"
    ev = evaluate_solution(HOSTILE["output flood"][0], p, tests=[0])
    assert ev.tests[0].error == "the program wrote more output than the per-test cap and was killed"
    ev = evaluate_solution("print('x' * 200_000)\n", p, tests=[0])   # over its cap, ended by itself
    assert (ev.tests[0].status, ev.tests[0].error) == ("output_limit", "the program wrote more output than the per-test cap")
    ev = evaluate_solution(HOSTILE["sys.exit(3)"][0], p, tests=[0])
    assert ev.tests[0].error == "the program exited with status 3 (sys.exit)"
    ev = evaluate_solution("q = int(input())\nprint(1 // 0)\n", p, tests=[1, 2])
    assert ev.error.startswith("On test 1:\nTraceback (program lines only") and "line 2" in ev.error
    assert ev.error.rstrip().endswith("ZeroDivisionError: integer division or modulo by zero")
    assert not ev.bug and ev.raised_on_first_test
    ev = evaluate_solution("import os\nos.kill(os.getppid(), 9)\n", p, tests=[0, 1])   # kills the harness's job
    assert ev.harness_error and [t.status for t in ev.tests] == ["not_run"] * 2 and not ev.perfect
    assert ev.error == ev.harness_error and "ended without a result" in ev.error


def test_call_based_problems(demo):
    leap, trade = demo["0003"], demo["0004"]
    ev = evaluate_solution("def is_leap(year):\n    return (year % 4 == 0, )[0] and (year % 100 != 0 or year % 400 == 0)\n", leap)
    assert ev.perfect
    # a tuple is a list only for apps_compat; a method of Solution() is found; a missing function is a bug
    ev = evaluate_solution("class Solution:\n    def maxProfit(self, prices):\n        return (0,)\n", trade)
    assert ev.tests[1].status == "wrong_answer" and ev.tests[1].passed_apps_compat and ev.tests[1].output == "[0]"
    assert "only loosely" in ev.tests[1].error and ev.tests[0].status == "wrong_answer"
    ev = evaluate_solution("def max_profit(prices):\n    return 0\n", trade)
    assert ev.bug and ev.tests[0].status == "runtime_error" and "defines no function maxProfit()" in ev.error
    ev = evaluate_solution("raise ValueError('top')\ndef is_leap(y):\n    return True\n", leap)
    assert ev.bug and "ValueError: top" in ev.error
    ev = evaluate_solution("def is_leap(y):\n    return {y}\n", leap)   # a set is not plain data
    assert [t.status for t in ev.tests] == ["wrong_answer"] * 6 and "not plain" in ev.tests[0].error
    ev = evaluate_solution("def is_leap(y):\n    return 1 // (y - 1)\n", leap)
    assert ev.tests[-1].status == "runtime_error" and "ZeroDivisionError" in ev.tests[-1].error and not ev.bug
    ev = evaluate_solution("def is_leap(y):\n    pass\n", leap)
    assert {t.status for t in ev.tests} == {"no_output"}
    ev = evaluate_solution("import sys\ndef is_leap(y):\n    sys.exit(0)\n", leap, mode="apps_compat")
    assert {t.status for t in ev.tests} == {"runtime_error"}
    ev = evaluate_solution("def is_leap(y):\n    while True: pass\n", leap, tests=[0], **FAST)
    assert ev.tests[0].status == "timeout"
    # names the original defined before every program: only in apps_compat (or with preamble=True)
    uses = "class Solution:\n    def maxProfit(self, prices: List[int]) -> int:\n        return max(b - a for i, a in enumerate(prices) for b in prices[i:])\n"
    assert evaluate_solution(uses, trade, tests=[0]).bug
    assert evaluate_solution(uses, trade, tests=[0], mode="apps_compat").perfect
    assert evaluate_solution(uses, trade, tests=[0], preamble=True).perfect


def test_stdin_bugs_follow_the_paper():
    p = problem_from_fields(1, "Echo.", {"inputs": ["5\n"], "outputs": ["5\n"]})
    assert evaluate_solution("print(input()", p).bug                              # syntax error
    ev = evaluate_solution("import no_such_module_xyz\nprint(input())\n", p)       # a failing top-level import
    assert ev.bug and ev.tests[0].status == "runtime_error"
    ev = evaluate_solution("def f():\n    import no_such_module_xyz\nf()\n", p)      # inside a function: a failed test
    assert not ev.bug and ev.tests[0].status == "runtime_error"
    ev = evaluate_solution("print(undefined_name)\n", p)
    assert not ev.bug and "NameError" in ev.error
    ev = evaluate_solution("print(input()\n", p)
    assert ev.compile_error["kind"] == "syntax" and ev.tests[0].status == "not_run" and "SyntaxError" in ev.error
    assert evaluate_solution("print(input())\n", p).perfect
    assert evaluate_solution("print(sqrt(4))", problem_from_fields(2, "Q", {"inputs": [""], "outputs": ["2.0"]}), mode="apps_compat").perfect


def test_per_test_timeout_versus_whole_problem_cap():
    inputs = ["0\n", "1\n", "1\n", "1\n", "1\n"]   # test 0 ends at once, the others never end
    p = problem_from_fields(1, "Q", {"inputs": inputs, "outputs": ["0\n"] * 5})
    src = "x = int(input())\nwhile x:\n    pass\nprint(0)\n"
    ev = evaluate_solution(src, p, per_test_s=0.5, problem_s=1.2)
    st = [t.status for t in ev.tests]
    assert st[0] == "pass" and st[1] == "timeout" and "per-test timeout of 0.5 s" in ev.tests[1].error
    assert st[-1] == "not_run" and "whole-problem cap" in ev.tests[-1].error
    capped = [t for t in ev.tests if t.status == "timeout" and "whole-problem cap of 1.2 s" in t.error]
    assert len(capped) <= 1 and st == ["pass"] + ["timeout"] * st.count("timeout") + ["not_run"] * st.count("not_run")
    assert not ev.perfect and ev.accuracy == 0.2
    # a cap shorter than the per-test timeout: the running test is killed at the cap, the rest never start
    ev = evaluate_solution(src, p, tests=[1, 0, 2], per_test_s=30, problem_s=0.6)
    assert [t.status for t in ev.tests] == ["timeout", "not_run", "not_run"]
    assert "killed at the whole-problem cap of 0.6 s" in ev.tests[0].error and ev.accuracy == 0.0
    # the same program with a cap that leaves room for every test: every one gets its own timeout
    ev = evaluate_solution(src, p, per_test_s=0.3, problem_s=30)
    assert [t.status for t in ev.tests] == ["pass"] + ["timeout"] * 4


# --- the interface for the searches ----------------------------------------------------------------------------------

def test_evaluation_interface_and_metrics(demo):
    p = demo["0000"]
    prog = ALMOST["0000"][0]["source"]
    ev = evaluate_solution(prog, p, tests=[2, 0])
    assert isinstance(ev, AppsEvaluation) and [t.index for t in ev.tests] == [2, 0]
    assert (ev.accuracy, ev.perfect, ev.bug, ev.error, ev.accuracy_apps_compat) == (0.0, False, False, None, 1.0)
    f = ev.failures
    assert [x["index"] for x in f] == [2, 0] and f[1] == dict(index=0, input="2\n1 2\n10 -3\n", expected="3\n7\n",
                                                             output=" 3\n 7\n", status="wrong_answer", error=None)
    d = json.loads(json.dumps(ev.to_dict()))
    assert d["accuracy"] == 0.0 and d["accuracy_apps_compat"] == 1.0 and d["counts"] == {"wrong_answer": 2}
    assert d["tests"][0]["compat_rule"] == "stripped_text" and d["mode"] == "strict" and len(d["failures"]) == 2
    good = evaluate_solution(p.solutions[0], p)
    m = apps_metrics([good, ev, None])
    assert m == {"n_problems": 3, "n_evaluated": 2, "strict_accuracy_strict": 1 / 3, "test_case_average_strict": 1 / 3,
                 "strict_accuracy_apps_compat": 2 / 3, "test_case_average_apps_compat": 2 / 3}
    assert choose_failure(good) is None
    c = choose_failure(ev, np.random.default_rng(0))
    assert c["index"] == 2   # the first half of the evaluated tests: the first one
    crash = evaluate_solution("print(1 // 0)", p)
    assert choose_failure(crash)["output"].rstrip().endswith("ZeroDivisionError: integer division or modulo by zero")
    with pytest.raises(CwmNbError, match="no tests selected"): evaluate_solution(prog, p, tests=[])
    with pytest.raises(CwmNbError, match="out of range"): evaluate_solution(prog, p, tests=[4])
    with pytest.raises(CwmNbError, match="unknown comparison mode"): evaluate_solution(prog, p, mode="exact")
    with pytest.raises(CwmNbError, match="no problems"): apps_metrics([])


def test_split_tests(demo):
    for p in demo.values():
        s = split_tests(p, seed=3)
        assert set(s.search).isdisjoint(s.final) and sorted(s.search + s.final) == list(range(p.n_tests))
        assert s.search and s.final and not s.overlap and s == split_tests(p, seed=3)
        paper = split_tests(p, "paper")
        assert paper.search == paper.final == tuple(range(p.n_tests)) and paper.overlap and paper.mode == "paper"
    assert {split_tests(demo["0003"], seed=k).search for k in range(8)} != {split_tests(demo["0003"], seed=0).search}
    with pytest.raises(CwmNbError, match="unknown test split mode"): split_tests(demo["0000"], "half")
    ev = evaluate_solution(demo["0000"].solutions[0], demo["0000"], tests=split_tests(demo["0000"]).final)
    assert ev.perfect and ev.n_tests == 2


# --- prompts -----------------------------------------------------------------------------------------------------------

def test_prompts_have_the_papers_parts_and_no_prefill(demo):
    stdin, call, cls = demo["0000"], demo["0003"], demo["0004"]
    for msgs in (apps_generate_messages(stdin), apps_generate_messages(call, cot=True),
                 apps_improve_messages(stdin, "print(1)", {"input": "1\n", "expected": "2\n", "output": "1\n"}),
                 apps_fix_messages(cls, "x", "NameError: name 'x' is not defined")):
        assert [m["role"] for m in msgs] == ["system", "user"]
    g = apps_generate_messages(stdin)[1]["content"]
    assert g.startswith("Pair sums") and "standard input (stdin)" in g and g.rstrip().endswith("```python code block.")
    g = apps_generate_messages(call)[1]["content"]
    assert "Define the function `is_leap`" in g and "def is_leap(year):" in g and "stdin" not in g
    assert "Complete the class `Solution`" in apps_generate_messages(cls)[1]["content"]
    assert "Let's think step by step." in apps_generate_messages(stdin, cot=True)[1]["content"]
    imp = apps_improve_messages(stdin, "print(1)", {"input": "1\n", "expected": "2\n", "output": "", "error": "EOFError"})[1]["content"]
    for part in ("```python\nprint(1)\n```", "Input:\n```\n1\n```", "Expected output:\n```\n2\n```",
                 "The program's output:\n```\n(nothing)\n```", "Error:\n```\nEOFError\n```", "## Corrected program"):
        assert part in imp, part
    assert apps_prefill("generate", "import sys\n") == "```python\nimport sys\n" and apps_prefill("cot") == "Let's think step by step.\n"
    assert apps_prefill("improve") == "## Diagnosis\n" and "## Diagnosis" in imp   # the pre-fill opens the asked-for answer
    fix = apps_fix_messages(stdin, "x", "NameError: name 'x' is not defined", cot=False)[1]["content"]
    assert "### The error\n\n```\nNameError: name 'x' is not defined\n```" in fix and "## Diagnosis" not in fix


def test_looks_like_apps_solution(demo):
    stdin, call, cls = demo["0000"], demo["0003"], demo["0004"]
    for code in ("n = int(input())", "import sys\nfor line in sys.stdin: print(line)", "a = open(0).read()",
                 "from sys import stdin\nx = stdin.readline()", "import fileinput", "import os\nb = os.read(0, 100)"):
        assert looks_like_apps_solution(code, stdin), code
    for code in ("def solve(a):\n    return a\n", "print(solve(3))", "", None, "# input() is read below"):
        assert not looks_like_apps_solution(code, stdin), code
    assert looks_like_apps_solution("def is_leap(y):\n    return y % 4 == 0", call)
    assert not looks_like_apps_solution("print(is_leap(2000))", call)
    assert not looks_like_apps_solution("def is_leap_year(y): pass", call)
    assert looks_like_apps_solution("class Solution:\n    def maxProfit(self, p): return 0", cls)


def test_looks_like_apps_solution_sees_stdin_under_another_name(demo):
    for code in ("from sys import stdin as inp\nn = int(inp.readline())", "import sys as s\nprint(s.stdin.read())",
                 "from sys import stdin as I\nfor line in I: print(line)", "from sys import *\nprint(stdin.read())"):
        assert looks_like_apps_solution(code, demo["0000"]), code
    assert not looks_like_apps_solution("import sys as s\nprint(s.argv)", demo["0000"])


# --- what a program cannot do, and what it may -------------------------------------------------------------------------

def test_an_empty_program_never_passes_even_where_every_expected_output_is_empty():
    p = problem_from_fields(1, "Print nothing.", {"inputs": ["1\n", "2\n"], "outputs": ["", "\n"]})
    assert evaluate_solution("pass\n", p).perfect   # a program that runs and prints nothing is right here
    for src in ("", "   \n", "# nothing to do\n", '"""only a docstring"""\n'):
        for mode in ("strict", "apps_compat"):
            ev = evaluate_solution(src, p, mode=mode)
            assert not ev.perfect and ev.accuracy == 0.0 and [t.status for t in ev.tests] == ["no_output"] * 2, (src, mode)
            assert not any(t.passed_strict or t.passed_apps_compat for t in ev.tests) and "has no code" in ev.tests[0].error
    assert apps_metrics([evaluate_solution("", p)])["strict_accuracy_apps_compat"] == 0.0


def test_a_program_cannot_read_the_problem_files(tmp_path, demo):
    shutil.copytree(DEMO/"test", tmp_path/"test")
    copy = {p.problem_id: p for p in load_apps(tmp_path, start=0, stop=None)}
    rows = _rows(demo.values())
    (tmp_path/"hf").mkdir()
    (tmp_path/"hf"/"test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    as_rows = {str(int(p.problem_id)).zfill(4): p for p in load_apps(tmp_path/"hf", start=0, stop=None)}
    for p, f in ((demo["0005"], DEMO/"test"/"0005"/"input_output.json"),
                 (copy["0005"], tmp_path/"test"/"0005"/"input_output.json"),
                 (as_rows["0005"], tmp_path/"hf"/"test.jsonl")):
        cheat = ("import json\nd = json.load(open(%r))\nk = int(open(0).read().split()[1])\n" % str(f)
                 + "print(d['outputs'][0] if 'outputs' in d else '')\n")
        ev = evaluate_solution(cheat, p, tests=[0])
        assert ev.tests[0].status == "runtime_error" and ("PermissionError" in ev.error or "Errno" in ev.error), (f, ev.error)
        assert ev.data_hidden is True
        ls = evaluate_solution("import os\nprint(os.listdir(%r))\n" % str(f.parent), p, tests=[0])
        assert ls.tests[0].status == "runtime_error", ls.tests[0].output
        # nor undo what hides them
        undo = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nfor flag in (2, 0):\n"
                "    libc.umount2(%r, flag)\nprint(open(%r).read()[:20])\n" % (str(f.parent).encode(), str(f)))
        assert evaluate_solution(undo, p, tests=[0]).tests[0].status == "runtime_error"
    assert evaluate_solution(demo["0005"].solutions[0], demo["0005"]).perfect   # a program that reads only stdin still passes


def test_multiprocessing_pool_runs_in_a_test(demo):
    p = demo["0005"]
    src = ("import sys\nfrom multiprocessing import Pool\ndef tri(n):\n    return n * (n + 1) // 2\n"
           "if __name__ == '__main__':\n    q = int(input())\n    ns = [int(input()) for _ in range(q)]\n"
           "    with Pool(2) as pool:\n        print('\\n'.join(map(str, pool.map(tri, ns))))\n")
    ev = evaluate_solution(src, p, tests=[0, 1])
    assert ev.perfect, ev.error


def test_call_based_debug_prints_do_not_fail_a_test(demo):
    leap = demo["0003"]
    src = ("def is_leap(year):\n    for _ in range(5000):\n        print('debug', year, '.' * 100)\n"
           "    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)\n")
    ev = evaluate_solution(src, leap)
    assert ev.perfect, ev.summary()
    ev = evaluate_solution("def is_leap(y):\n    while True: print('x' * 1000)\n", leap, tests=[0], **FAST)
    assert ev.tests[0].status == "timeout"   # a flood never ends: the timeout stops it


def test_strict_call_based_comparison_keeps_types_apart(demo):
    trade = demo["0004"]
    for ret, strict, compat in (("0", True, True), ("0.0", False, True), ("(0,)", False, True), ("[0]", True, True),
                                ("False", False, True), ("'0'", False, False)):
        ev = evaluate_solution(f"class Solution:\n    def maxProfit(self, prices):\n        return {ret}\n", trade, tests=[1])
        assert (ev.tests[0].passed_strict, ev.tests[0].passed_apps_compat) == (strict, compat), (ret, trade.outputs[1])
    assert strict_value_match(3, [3]) and not strict_value_match(3.0, [3]) and not strict_value_match(3, [3.0])
    assert not strict_value_match((1, 2), [[1, 2]]) and apps_compat_value_match([1, 2], [[1, 2]])


def test_fix_prompts_show_no_harness_frames_and_bad_test_indices_fail_early(demo):
    from cwm_nb.apps.search import search_evaluator
    leap = demo["0003"]
    for src in ("def other(y):\n    return 1\n", "class Solution:\n    pass\n", "def is_leap():\n    return 1\n"):
        ev = evaluate_solution(src, leap, tests=[0])
        assert ev.error and "File \"" not in ev.error and "cwm_nb" not in ev.error and "/" not in ev.error.split("\n", 1)[1], ev.error
        msgs = apps_fix_messages(leap, src, ev.error)
        assert "cwm_nb" not in msgs[1]["content"] and "apps.py" not in msgs[1]["content"]
    with pytest.raises(CwmNbError, match="test index 9 is out of range"): search_evaluator(leap, [0, 9])
