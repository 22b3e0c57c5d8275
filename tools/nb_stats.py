"""How literate the notebooks read: the measures of the issue "A workbook people read", recomputed on this tree.

    .venv/bin/python tools/nb_stats.py [--per-notebook]

Lines per exported code cell (mean, how many over 60, the longest), code cells with committed outputs, median
words per markdown cell (and how many over 200), references to documents outside the repository, module
summaries that stop mid-sentence (nbdev keeps the first line of the `>` summary only).
"""
import re, statistics, sys
from pathlib import Path
import nbformat

ROOT = Path(__file__).resolve().parents[1]
OUTSIDE = re.compile(r"spec §|\(spec \d|spec \d+\.\d|\.\./shared|shared/spec")   # references to the developers' documents


def outside_refs_in_repo() -> list[str]:
    "Tracked text files outside nbs/ that refer to documents outside the repository (path:line)."
    import subprocess
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files"], capture_output=True, text=True).stdout.split()
    hits = []
    for f in files:
        if f.startswith("nbs/") or f == "tools/nb_stats.py": continue
        try: text = (ROOT/f).read_text()
        except (UnicodeDecodeError, OSError): continue
        hits += [f"{f}:{n}" for n, line in enumerate(text.split("\n"), 1) if OUTSIDE.search(line)]
    return hits


def notebooks() -> list[Path]:
    return (sorted(ROOT.glob("nbs/[0-9][0-9]*_*.ipynb")) + [ROOT/"nbs"/n for n in ("index.ipynb", "guide.ipynb", "results.ipynb")]
            + sorted(ROOT.glob("nbs/experiments/*.ipynb")))


def summary_line(nb) -> str | None:
    "The first line of the `> summary` of a notebook's title cell, or None."
    for c in nb.cells:
        if c.cell_type == "markdown":
            for line in c.source.split("\n"):
                if line.startswith(">"): return line.lstrip("> ").strip()
            return None
    return None


def stats(paths: list[Path]) -> dict:
    export_lines, longest, with_out, code, md_words, refs, mid = [], ("", 0), 0, 0, [], 0, []
    unchecked, run, longest_run = 0, 0, ("", 0)
    stretches = []   # words of each run of consecutive markdown cells (prose between two code cells)
    for p in paths:
        nb = nbformat.read(p, as_version=4)
        s = summary_line(nb)
        if p.name[:2].isdigit() and s is not None and not re.search(r"[.!?)`]$", s): mid.append(p.stem)
        code_cells = [c for c in nb.cells if c.cell_type == "code"]
        for i, c in enumerate(code_cells):
            if not (is_export(c) and defines(c)): continue
            nxt = code_cells[i+1] if i+1 < len(code_cells) else None
            if nxt is None or is_export(nxt):   # the notebook's last definition needs its check too
                unchecked += 1; run += 1
                if run > longest_run[1]: longest_run = (f"{p.stem} code cell {i+2-run}", run)
            else: run = 0
        run = 0
        words = None
        for c in nb.cells:
            if c.cell_type == "markdown": words = (words or 0) + len(c.source.split())
            elif words is not None: stretches.append(words); words = None
        if words is not None: stretches.append(words)
        for c in nb.cells:
            refs += len(OUTSIDE.findall(c.source))
            if c.cell_type == "markdown":
                md_words.append(len(c.source.split()))
            elif c.cell_type == "code":
                code += 1
                with_out += bool(c.get("outputs"))
                if any(l.strip() in ("#| export", "#|export") for l in c.source.split("\n")):
                    n = len([l for l in c.source.split("\n") if l.strip()])
                    export_lines.append(n)
                    if n > longest[1]: longest = (f"{p.stem}: {c.source.split(chr(10))[1][:60]}", n)
    return dict(export_cells=len(export_lines), mean_export_lines=statistics.mean(export_lines) if export_lines else 0,
                export_over_60=sum(n > 60 for n in export_lines), longest=longest, code_cells=code,
                code_with_outputs=with_out, md_median_words=statistics.median(md_words) if md_words else 0,
                md_over_200=sum(w > 200 for w in md_words), outside_refs=refs, summaries_mid_sentence=mid,
                unchecked_defs=unchecked, longest_unchecked_run=longest_run,
                stretch_median=statistics.median(stretches) if stretches else 0, stretches_over_200=sum(w > 200 for w in stretches))


def is_export(c) -> bool:
    "Is this code cell exported (`#| export`/`#| exporti`)?"
    return any(re.match(r"#\|\s*export", l.strip()) for l in c.source.split("\n")[:3])


def defines(c) -> bool:
    "Does this code cell define a function, class or patched method (at top level)?"
    return bool(re.search(r"^(@patch|def |class |async def )", c.source, re.M))


# The function that is each method notebook's whole method (see the notebook's opening).
METHODS = {"14_cwm": "score_predictions", "15_planning": "mcts_search", "22_gif_mcts": "simulation",
           "23_baselines": "rex_plan", "34_agent": "play_episode"}


def default_exp(nb) -> str | None:
    for c in nb.cells:
        if c.cell_type == "code" and (m := re.search(r"#\|\s*default_exp\s+(\S+)", c.source)): return m.group(1)
    return None


def self_imports(nb) -> int:
    "Non-export code cells that import the notebook's own module."
    mod = default_exp(nb)
    if mod is None: return 0
    pkg, _, leaf = ("cwm_nb." + mod).rpartition(".")
    own = re.compile(r"(from cwm_nb\.%s import|import cwm_nb\.%s\b|from %s import [^\n]*\b%s\b)"
                     % (re.escape(mod), re.escape(mod), re.escape(pkg), leaf))
    return sum(1 for c in nb.cells if c.cell_type == "code" and not is_export(c) and own.search(c.source))


CHECK = re.compile(r"^\s*(test_\w+\(|assert\b)")

def echoes(c) -> bool:
    """Does this example cell end by echoing a value its own checks already asserted (`got = f(x); test_eq(got, 3); got`)?
    The last line is a bare name (or attribute) that a `test_*` or `assert` line above it in the cell mentions."""
    lines = [l for l in c.source.splitlines() if l.strip() and not l.lstrip().startswith("#")]
    if len(lines) < 2 or not re.fullmatch(r"[A-Za-z_][\w.]*", lines[-1].strip()): return False
    name = re.escape(lines[-1].strip())
    return any(CHECK.match(l) and re.search(r"(?<![\w.])%s(?![\w])" % name, l) for l in lines[:-1])

def example_cells(nb) -> list:
    "The code cells a reader runs as examples or checks: neither exported nor the notebook's set-up."
    return [c for c in nb.cells if c.cell_type == "code" and not is_export(c) and "default_exp" not in c.source
            and not re.match(r"\s*#\|\s*hide", c.source)]

def echo_share(paths: list[Path]) -> tuple[int, int]:
    "(example cells that echo a value they just asserted, example cells) over the notebooks."
    cells = [c for p in paths for c in example_cells(nbformat.read(p, as_version=4))]
    return sum(map(echoes, cells)), len(cells)

def long_lines(nb, width: int = 100) -> list[str]:
    "The code lines wider than `width` characters, as the docs page would have to scroll them."
    return [l for c in nb.cells if c.cell_type == "code" for l in c.source.splitlines() if len(l) > width]

def markdown_runs(nb) -> tuple[int, int]:
    "(markdown cells that follow another markdown cell, markdown cells)."
    kinds = [c.cell_type for c in nb.cells]
    return sum(a == b == "markdown" for a, b in zip(kinds, kinds[1:])), kinds.count("markdown")


def reading_measures(p: Path) -> dict:
    "The measures of 'The method reads first' for one notebook."
    nb = nbformat.read(p, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    run = best = 0
    for c in code:
        if is_export(c): run += 1; best = max(best, run)
        elif re.search(r"\btest_\w+\(|\bassert\b", c.source): run = 0
    text = "\n".join(c.source for c in code if not is_export(c))
    method_cell = None
    if (fn := METHODS.get(p.stem)):
        method_cell = next((i + 1 for i, c in enumerate(nb.cells) if c.cell_type == "code" and is_export(c)
                            and re.search(r"^def %s\(" % re.escape(fn), c.source, re.M)), None)
    return dict(cells=len(nb.cells), code=len(code), with_outputs=sum(bool(c.get("outputs")) for c in code),
                longest_export_run=best, self_imports=self_imports(nb), method=fn if p.stem in METHODS else None,
                method_cell=method_cell, test_eq=len(re.findall(r"\btest_eq\(", text)),
                tuple_test_eq=len(re.findall(r"\btest_eq\(\s*[(\[]", text)))


def print_methods():
    libs = sorted(ROOT.glob("nbs/[0-9][0-9]*_*.ipynb"))
    rows = {p.stem: reading_measures(p) for p in libs}
    print("| notebook | method (cell of cells) | code cells with outputs | longest export run without a check | self-imports | tuple test_eq |")
    print("|---|---|---|---|---|---|")
    for stem, r in rows.items():
        if stem not in METHODS: continue
        print(f"| `{stem}` | `{r['method']}` ({r['method_cell']} of {r['cells']}) | {r['with_outputs']}/{r['code']} "
              f"({100*r['with_outputs']/max(1, r['code']):.0f} %) | {r['longest_export_run']} | {r['self_imports']} | "
              f"{r['tuple_test_eq']}/{r['test_eq']} |")
    code, out = sum(r["code"] for r in rows.values()), sum(r["with_outputs"] for r in rows.values())
    print(f"all {len(rows)} library notebooks: {out}/{code} code cells with outputs ({100*out/max(1, code):.1f} %), "
          f"{sum(r['self_imports'] for r in rows.values())} self-imports, "
          f"{sum(r['tuple_test_eq'] for r in rows.values())}/{sum(r['test_eq'] for r in rows.values())} tuple test_eq; "
          f"below 40 % outputs: {[s for s, r in rows.items() if r['with_outputs'] < 0.4*r['code']]}")


def main():
    if "--methods" in sys.argv: return print_methods()
    paths = notebooks()
    s = stats(paths)
    print(f"notebooks: {len(paths)}")
    print(f"lines per exported code cell: mean {s['mean_export_lines']:.1f} over {s['export_cells']} cells, "
          f"{s['export_over_60']} over 60 (longest: {s['longest'][1]} lines, {s['longest'][0]})")
    print(f"code cells with committed outputs: {s['code_with_outputs']} of {s['code_cells']}")
    print(f"words per markdown cell: median {s['md_median_words']:g}, {s['md_over_200']} cells over 200 words")
    print(f"words per stretch of prose (consecutive markdown cells merged): median {s['stretch_median']:g}, "
          f"{s['stretches_over_200']} over 200 words")
    print(f"export cells defining a function/class followed directly by another export cell (no check between): "
          f"{s['unchecked_defs']}; longest such run {s['longest_unchecked_run'][1]} ({s['longest_unchecked_run'][0]})")
    rest = outside_refs_in_repo()
    print(f"references to documents outside the repository: {s['outside_refs']} in notebooks, {len(rest)} in other tracked files {rest[:5]}")
    print(f"module summaries that stop mid-sentence: {len(s['summaries_mid_sentence'])} {s['summaries_mid_sentence']}")
    if "--per-notebook" in sys.argv:
        for p in paths:
            t = stats([p])
            print(f"  {p.relative_to(ROOT)}: export mean {t['mean_export_lines']:.1f}, over 60 {t['export_over_60']}, "
                  f"outputs {t['code_with_outputs']}/{t['code_cells']}, unchecked defs {t['unchecked_defs']} (run {t['longest_unchecked_run'][1]}), md median {t['md_median_words']:g}, refs {t['outside_refs']}")


if __name__ == "__main__":
    main()
