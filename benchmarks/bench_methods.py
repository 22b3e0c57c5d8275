"""Accuracy of the three methods at equal budget, side by side: GIF-MCTS ÷ WorldCoder ÷ zero-shot CoT.

Reads a sweep's results index (`cwm-nb sweep ... --out RESULTS`; the README's sweep by default) and prints, for
each (model, budget), each method's mean accuracy and mean normalized return over its complete runs (discrete
CWMB environments and RTFM apart), the ratios GIF-MCTS ÷ WorldCoder and GIF-MCTS ÷ zero-shot CoT, and how many
runs stand behind each number. A ratio whose denominator is 0 is printed as n/a, not as infinity. R follows
the paper's rules (`cwm_nb.experiments.figures.effective_return`: no runnable program counts 0, undefined R is left out).

Run: .venv/bin/python benchmarks/bench_methods.py [RESULTS]     (default: results)
"""
import sys
from pathlib import Path

METHODS = ("gif-mcts", "worldcoder", "zero-shot-cot")


def ratio(a: float, b: float) -> str:
    return "n/a" if b == 0 or a != a or b != b else f"{a / b:.2f}"


def main(results: str = "results") -> int:
    from cwm_nb.experiments import figures
    from cwm_nb.experiments.index import load_index
    ix = load_index(results)
    ix = figures.dedupe_runs(ix[(ix["status"] == "complete") & ix["method"].isin(METHODS) & ~ix["paper_compat"]]).copy()
    if not len(ix):
        print(f"no complete runs of {', '.join(METHODS)} under {results}; run the README's sweep first")
        return 1
    ix["R_eff"] = figures.effective_return(ix)
    ix["group"] = ix["suite"].where(ix["suite"] == "rtfm", ix["action_kind"])
    for (model, budget, group), d in ix.groupby(["model", "budget", "group"]):
        print(f"\n{group}  model {model}  budget {budget}")
        print(f"  {'method':<14} {'runs':>4} {'seeds':>5} {'envs':>4} {'accuracy':>9} {'R':>7}")
        acc, r = {}, {}
        for m in METHODS:
            dm = d[d["method"] == m]
            acc[m], r[m] = dm["accuracy"].mean(), dm["R_eff"].mean()
            print(f"  {m:<14} {len(dm):>4} {dm['seed'].nunique():>5} {dm['env'].nunique():>4} "
                  f"{acc[m]:>9.3f} {r[m]:>7.3f}")
        print(f"  accuracy ratio GIF-MCTS ÷ WorldCoder {ratio(acc['gif-mcts'], acc['worldcoder'])}, "
              f"GIF-MCTS ÷ zero-shot CoT {ratio(acc['gif-mcts'], acc['zero-shot-cot'])}")
        print(f"  R ratio        GIF-MCTS ÷ WorldCoder {ratio(r['gif-mcts'], r['worldcoder'])}, "
              f"GIF-MCTS ÷ zero-shot CoT {ratio(r['gif-mcts'], r['zero-shot-cot'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))
