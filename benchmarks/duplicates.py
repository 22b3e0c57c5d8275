"""What a model that repeats itself costs GIF-MCTS, under each setting of `fix_duplicate_programs` (issue #33, point 6).

The endpoint is the provider test double (`cwm_nb.testing.provider_double`: a real HTTP server on 127.0.0.1,
OpenAI's chat shape) with the scripted capable model, given a programs folder whose only CartPole program is the
shipped reference with its planted mistake (reward and done swapped) and no mistake to plant: whatever the prompt
(generate, improve or fix), it answers that one program. The scoring is the real one of `cwm-nb run`
(`cwm_nb.bench.cwm.evaluate_program` in the sandbox, on the search part of the shipped CartPole buffer, a fifth of
the episodes held out as for a new run). Each setting runs GIF-MCTS with seed 0 and the given budget; the script
counts the calls by prompt kind, the sandbox evaluations and their time (wall seconds around each evaluation), and
scores the best program on the held-out part too.

    .venv/bin/python benchmarks/duplicates.py [--budget 12] [--env CartPole-v1] [--seed 0]

Prints one row per setting of `fix_duplicate_programs` (every other option at its default). The double is a test double: these numbers show the mechanism, not a model's quality.
"""
import argparse, json, sys, tempfile, time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SETTINGS = {"on (default): revisit": dict(fix_duplicate_programs=True),
            "off (paper): new node": dict(fix_duplicate_programs=False)}


class PromptKinds:
    "The LLM, noting the kind of each prompt it is asked (generate, improve or fix) by the prompt's wording."
    def __init__(self, llm):
        self.llm, self.kinds = llm, []

    def __getattr__(self, name):
        return getattr(self.llm, name)

    def complete(self, messages, **kw):
        user = messages[1]["content"]
        self.kinds.append("fix" if "Running it raised an error" in user
                          else "improve" if "A transition the program gets wrong" in user else "generate")
        return self.llm.complete(messages, **kw)


class TimedEvaluations:
    "The evaluator, counting its runs and their wall time (seconds)."
    def __init__(self, evaluate):
        self.evaluate, self.runs, self.seconds = evaluate, 0, 0.0

    def __call__(self, src):
        t = time.perf_counter()
        try: return self.evaluate(src)
        finally: self.runs += 1; self.seconds += time.perf_counter() - t


def one_program_folder(folder: Path, env: str) -> str:
    "Write `folder` so that the capable model answers one program for `env`: the reference, mistake planted."
    from cwm_nb.testing.capable_model import planted_mistakes, reference_program
    program = reference_program(env).replace(planted_mistakes()[env]["old"], planted_mistakes()[env]["new"])
    (folder/f"{env}.py").write_text(program)
    # no mistake to plant: generate answers the program as it is, and improve and fix answer it too
    (folder/"planted_mistakes.json").write_text(json.dumps(
        {env: {"old": "text that is in no program", "new": "", "what": "nothing"}}))
    return program


def run(setting: dict, base_url: str, env: str, budget: int, seed: int) -> dict:
    "One GIF-MCTS run against the double; its counts."
    from cwm_nb.bench import cwm, envs, replay
    from cwm_nb.llm.models import get_llm
    from cwm_nb.sandbox.jobs import get_sandbox
    from cwm_nb.search.gif_mcts import GIFMCTS, GIFMCTSConfig
    spec = envs.resolve_env(env, "", 0, None)
    buf = replay.load_buffer(spec, None)
    split = replay.split_by_episode(buf, 0.2, 0)            # run_cwmb_search's split for a new run
    sandbox = get_sandbox()
    metric = cwm.search_metric(replay.world_is_stochastic(env, buf), False)
    evaluate = TimedEvaluations(lambda src: cwm.evaluate_program(src, split.search, sandbox=sandbox,
                                                                 value_metric=metric))
    llm = PromptKinds(get_llm("openai:gpt-4o", base_url=base_url, cache=False))
    search = GIFMCTS(llm, evaluate, envs.describe_env(spec), GIFMCTSConfig(**setting), seed=seed,
                     progress=False)
    res = search.run(budget)
    held = cwm.evaluate_program(res.best_program, split.heldout, sandbox=sandbox, value_metric=metric)
    kinds = Counter(llm.kinds)
    return dict(calls=res.llm_calls, generate=kinds["generate"], improve=kinds["improve"], fix=kinds["fix"],
                distinct=len({n.program for n in search.tree.nodes if n.program}),
                evaluations=evaluate.runs, sandbox_s=evaluate.seconds,
                duplicate_programs=res.tree["stats"]["duplicate_programs"], nodes=len(res.tree["nodes"]) - 1,
                accuracy=res.best_value, heldout_accuracy=held.accuracy)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--budget", type=int, default=12)
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    from cwm_nb.testing.provider_double import ProviderDouble
    rows = {}
    with tempfile.TemporaryDirectory() as d, \
         ProviderDouble("openai", answers="capable", programs=d, idle_timeout=600) as double:
        one_program_folder(Path(d), a.env)
        for name, setting in SETTINGS.items(): rows[name] = run(setting, double.base_url, a.env, a.budget, a.seed)
    print(f"GIF-MCTS on {a.env}, budget {a.budget}, seed {a.seed}; an endpoint that always answers one program "
          "(provider test double, chat shape)\n")
    cols = ["calls", "generate", "improve", "fix", "nodes", "evaluations", "sandbox_s", "duplicate_programs",
            "accuracy", "heldout_accuracy"]
    print(f"{'setting':<28}" + "".join(f"{c:>19}" if c in ("duplicate_programs", "heldout_accuracy")
                                        else f"{c:>12}" for c in cols))
    for name, r in rows.items():
        cells = [f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in cols]
        print(f"{name:<28}" + "".join(f"{v:>19}" if c in ("duplicate_programs", "heldout_accuracy") else f"{v:>12}"
                                       for c, v in zip(cols, cells)))
    print("\ndistinct programs the model wrote: " + ", ".join(f"{n}: {r['distinct']}" for n, r in rows.items()))
    return rows


if __name__ == "__main__":
    main()
