"""Inference speed (paper App. H, Table 8): seconds per transition of an LLM prompted to act as the
environment, against a Code World Model's set_state + step timed inside the sandbox, on the same transitions.

Default: the embedded model (Gemma 3 270M on this CPU, response cache off), 3 CartPole-v1, 3 HalfCheetah-v4 and
1 Humanoid-v4 queries, the shipped reference CWMs of data/programs (HalfCheetah's and Humanoid's are
approximations: same cost per call, wrong physics). Prints LLM s, CWM s and the ratio per env beside the paper's
GPT-4 Turbo numbers. The Humanoid query alone takes minutes (a ~16k-token prompt, a 376-number answer).

Run: nice -n 10 .venv/bin/python benchmarks/bench_inference_speed.py [--model embedded] [--base-url URL]
         [--envs CartPole-v1,HalfCheetah-v4,Humanoid-v4] [--caps CartPole-v1:3,HalfCheetah-v4:3,Humanoid-v4:1]
         [--out DIR]
"""
import argparse, sys, time


def main():
    ap = argparse.ArgumentParser(description="LLM-as-simulator vs CWM seconds per transition (paper App. H, Table 8)",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--model", default="embedded", help="model name or alias, as `cwm-nb run --model`")
    ap.add_argument("--base-url", default="", help="OpenAI-compatible endpoint for a provider:name model")
    ap.add_argument("--envs", default="CartPole-v1,HalfCheetah-v4,Humanoid-v4", help="comma list of environments")
    ap.add_argument("--caps", default="CartPole-v1:3,HalfCheetah-v4:3,Humanoid-v4:1",
                    help="LLM queries per environment, ENV:N,... (an environment without a cap gets 10)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the transitions and of LLM sampling")
    ap.add_argument("--repeats", type=int, default=50, help="CWM timing repeats per transition (the median is kept)")
    ap.add_argument("--n-ctx", type=int, default=32768, help="context window of the embedded server, tokens")
    ap.add_argument("--out", default="", help="also write results.json/csv and speed.png/pdf here")
    a = ap.parse_args()
    from cwm_nb.core import CwmNbError
    try: return _main(a)
    except CwmNbError as e:
        print(f"bench_inference_speed: error: {e}", file=sys.stderr); return 2


def _main(a) -> int:
    from cwm_nb.bench import envs as E
    from cwm_nb.search import llm_simulator as S
    from cwm_nb.core import CwmNbError
    envs = [e.strip() for e in a.envs.split(",") if e.strip()]
    if not envs: raise CwmNbError("no environments given (--envs is empty)", "name them, e.g. --envs CartPole-v1")
    for e in envs: E.get_env_spec(e)   # an unknown name is an error before the model starts
    caps = S.parse_caps(a.caps)
    stray = sorted(set(caps) - set(envs))
    if stray:   # a typo here would leave the intended environment uncapped (10 queries)
        raise CwmNbError(f"--caps names environments not in --envs: {', '.join(stray)}",
                         f"cap only these: {', '.join(envs)}")
    t0 = time.perf_counter()
    llm = S.simulator_llm(a.model, a.base_url or None, n_ctx=a.n_ctx)
    hdr = (f"{'env':<16}{'n':>3}{'LLM s':>10}{'CWM s':>11}{'LLM/CWM':>11}{'LLM ok':>8}{'parsed':>8}{'CWM ok':>8}"
           f"{'tok in':>8}{'tok out':>9} | {'GPT-4 s':>8}{'CWM s':>9}{'ratio':>9}  (published, T8)")
    print(f"model: {llm.name}", flush=True)
    rows, merged = [], None
    for env in envs:   # one environment at a time, so each line is printed (and saved) as soon as it is measured
        res = S.run_inference_speed([env], llm, n_transitions=caps.get(env, 10), caps=caps, seed=a.seed,
                                    repeats=a.repeats)
        rows += res["rows"]
        if merged is None: merged = res
        else: merged["rows"], merged["records"] = rows, {**merged["records"], **res["records"]}
        if a.out: S.write_results(merged, a.out, vars(a))
        r = res["rows"][0]
        f = lambda v, spec: "n/a" if v is None else format(v, spec)
        line = (f"{r['env']:<16}{r['n_transitions']:>3}{f(r['llm_s'], '.3g'):>10}{f(r['cwm_s'], '.3g'):>11}"
                f"{f(r['ratio'], '.3g'):>11}{f(r['llm_correct'], '.2f'):>8}{f(r['llm_parsed'], '.2f'):>8}"
                f"{f(r['cwm_correct'], '.2f'):>8}{f(r['llm_prompt_tokens'], '.0f'):>8}{f(r['llm_completion_tokens'], '.0f'):>9} | "
                f"{f(r['published_llm_s'], '.3g'):>8}{f(r['published_cwm_s'], '.2g'):>9}{f(r['published_ratio'], '.2g'):>9}")
        print(hdr + "\n" + line if len(rows) == 1 else line, flush=True)
    if a.out:
        from pathlib import Path
        from cwm_nb.experiments.runs import save_figure
        save_figure(S.plot_speed(rows, llm.name), Path(a.out)/"speed")
    print(f"\nwall {time.perf_counter() - t0:.0f} s; {merged['timing']}")
    for r in rows:
        print(f"  {r['env']}: CWM = {r['cwm_program']}")
    return 0

if __name__ == "__main__":
    sys.exit(main())
