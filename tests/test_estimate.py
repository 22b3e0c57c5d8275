"""The dry run's estimates (nbs/50c_estimate.ipynb): calls, tokens and cost of a grid's runs."""
import json
import re

import pytest

from cwm_nb.core import CwmNbError
from cwm_nb.experiments.definition import define_run
from cwm_nb.experiments.estimate import (calls_done, estimate_run, estimate_table,
                                         format_estimate)
from cwm_nb.llm.accounting import PRICES_PER_MTOK


def cwmb(**settings):
    return define_run("cwmb", settings)


def test_calls_and_tokens_scale_with_the_budget():
    ten, twenty = estimate_run(cwmb(budget=10)), estimate_run(cwmb(budget=20))
    assert (ten["calls"], twenty["calls"]) == (10, 20)
    # ten more calls, each a later call
    assert twenty["prompt_tokens"] - ten["prompt_tokens"] == 10 * ten["later_prompt_tokens"]
    assert twenty["completion_tokens"] == 2 * ten["completion_tokens"] == 20 * 400
    # a later call shows a program (the cap) and a failing transition: longer than the first
    assert ten["later_prompt_tokens"] > ten["first_prompt_tokens"] + 400


def test_apps_calls_and_tokens_scale_with_the_problems():
    def apps(problems):
        return estimate_run(define_run("apps", dict(data="demo", problems=problems)))
    two, other_two, four = apps("0:2"), apps("2:4"), apps("0:4")
    assert (two["calls"], four["calls"]) == (2 * 20, 4 * 20)
    assert four["searches"] == 4
    # each problem's prompts are its own: the estimate of four problems is the sum of two pairs
    assert four["prompt_tokens"] == two["prompt_tokens"] + other_two["prompt_tokens"]
    assert four["completion_tokens"] == 2 * two["completion_tokens"]


def test_a_priced_model_gets_a_cost_and_an_unpriced_one_none():
    gpt = estimate_run(cwmb(model="gpt-4o"))
    p, c = PRICES_PER_MTOK["gpt-4o"]
    want = (gpt["prompt_tokens"] * p + gpt["completion_tokens"] * c) / 1e6
    assert gpt["cost_usd"] == pytest.approx(want)
    assert gpt["cost_usd"] > 0
    assert estimate_run(cwmb())["cost_usd"] is None   # the embedded model
    assert estimate_run(cwmb(model="ollama:llama3"))["cost_usd"] is None


def test_the_basis_says_how_tokens_were_counted():
    assert "the embedded model's tokenizer" in estimate_run(cwmb())["basis"]
    assert "~4 characters per token" in estimate_run(cwmb(model="gpt-4o"))["basis"]


def test_a_resumed_run_spends_what_its_checkpoint_does_not_hold(tmp_path):
    (tmp_path/"checkpoint.json").write_text(json.dumps(dict(calls=4)))
    done = calls_done(tmp_path, 10)
    assert done == 4
    fresh, resumed = estimate_run(cwmb()), estimate_run(cwmb(), done)
    assert resumed["calls"] == 6
    assert resumed["prompt_tokens"] == 6 * fresh["later_prompt_tokens"]
    assert estimate_run(cwmb(), 10)["calls"] == 0


def test_method_options_reach_the_estimate():
    # the completion cap the method's config gets
    capped = define_run("cwmb", None, ["method.max_tokens=800"])
    assert estimate_run(capped)["completion_tokens"] == 10 * 800
    # zero-shot CoT sends its first prompt on every call
    cot = estimate_run(cwmb(method="zero-shot-cot"))
    assert cot["later_prompt_tokens"] == cot["first_prompt_tokens"]
    assert cot["prompt_tokens"] == 10 * cot["first_prompt_tokens"]


def test_prompts_count_at_most_the_window_less_the_cap():
    # Humanoid's description alone is longer than the embedded server's window allows
    e = estimate_run(cwmb(env="Humanoid-v4"))
    assert e["first_prompt_tokens"] == e["later_prompt_tokens"] == 4096 - 400
    assert "shortened to the 4,096-token window" in e["basis"]


def test_a_complete_run_is_not_estimated_and_the_total_sums():
    rows = [("a", "new", cwmb(model="gpt-4o"), 0),
            ("b", "resume", cwmb(model="gpt-4o", env="Pendulum-v1"), 3),
            ("c", "complete", None, 0), ("d", "skip", cwmb(), 0), ("e", "new", cwmb(), 0)]
    df = estimate_table(rows)
    assert list(df.run) == ["a", "b", "c", "d", "e", "total"]
    assert list(df.state[:-1]) == ["new", "resume", "complete", "complete", "new"]
    for run in ("c", "d"):
        row = df[df.run == run].iloc[0]
        assert row[["calls", "prompt_tokens", "completion_tokens", "cost_usd"]].isna().all()
    body, total = df.iloc[:-1], df.iloc[-1]
    for col in ("calls", "prompt_tokens", "completion_tokens"):
        assert int(total[col]) == int(body[col].sum())
    assert total.calls == 10 + 7 + 10
    made = [estimate_run(d, k if state == "resume" else 0) for _, state, d, k in rows
            if state in ("new", "resume")]
    assert int(total.prompt_tokens) == sum(e["prompt_tokens"] for e in made)
    # the cost sums the priced runs; the embedded one has none
    assert float(total.cost_usd) == pytest.approx(float(body.cost_usd.sum()))
    assert df[df.run == "e"].cost_usd.isna().all()
    text = format_estimate(df)
    tokens = int(total.prompt_tokens + total.completion_tokens)
    assert (f"5 runs: 2 new, 1 to resume, 2 complete; ~27 calls, ~{tokens:,} tokens, "
            f"~${float(total.cost_usd):,.2f} (price known for 2 of 3 runs to make; "
            "none for embedded)") in text


def test_format_estimate_with_nothing_to_make():
    text = format_estimate(estimate_table([("a", "complete", None, 0)]))
    assert text == "1 run: 0 new, 0 to resume, 1 complete; nothing to call"


def test_bad_input_is_refused():
    with pytest.raises(CwmNbError, match="unknown state"):
        estimate_table([("a", "running", cwmb(), 0)])
    with pytest.raises(CwmNbError):
        estimate_run(cwmb(env="NoSuchEnv-v9"))
