"""The docs site (`tools/docs.py`), built once and read in headless Chromium as a person would read it.

The site is built (in a temporary folder) with one real executed copy of `nbs/experiments/cwmb.ipynb`: a
`cwm-nb run` through the provider test double (its scripted model, not a result). Then every page is loaded over
HTTP from 127.0.0.1 and must show no console error, request nothing beyond the site and show every image; the
search page must find a function by name; and screenshots of the landing page, a notebook page and the executed
experiment page are saved to `artifacts/docs/`, with the build and browser times in `artifacts/docs/timings.json`.

Chromium is Debian's (`bash tools/setup.sh --dev` installs it as root); without it the browser tests are skipped.
"""
import functools, http.server, json, os, re, shutil, subprocess, sys, threading, time
from pathlib import Path
from urllib.parse import unquote, urlparse
import pytest

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT/"artifacts"/"docs"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# On this project's machines only the package registries are reachable: without the background-networking flags
# Chromium's own connections are refused and logged.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed: as root, `bash tools/setup.sh "
                                    "--dev` installs Debian's chromium; else `sudo apt-get install chromium`")
sys.path.insert(0, str(ROOT/"tools"))
sys.path.insert(0, str(ROOT/"docs"/"_ext"))
import docs, cwm_docments   # tools/docs.py, docs/_ext/cwm_docments.py

TIMINGS: dict = {}

def _save_timings():
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS/"timings.json").write_text(json.dumps(TIMINGS, indent=1))

@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    "A results folder with one real papermill run of the CWMB notebook, its model the provider test double."
    from cwm_nb.testing.provider_double import ProviderDouble
    out = tmp_path_factory.mktemp("runs")
    env = {**os.environ, "CWM_NB_LLM_CACHE": str(out/"llm_cache.sqlite")}
    t0 = time.perf_counter()
    with ProviderDouble("openai", answers="capable") as double:
        r = subprocess.run([str(Path(sys.executable).parent/"cwm-nb"), "run", "cwmb", "--env", "CartPole-v1",
                            "--method", "gif-mcts", "--model", "openai:gpt-4o", "--base-url", double.base_url,
                            "--budget", "2", "--seed", "0", "--out", str(out/"results"), "--plan-preset", "none"],
                           capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    TIMINGS["run_for_executed_copy_s"] = round(time.perf_counter() - t0, 1)
    return out/"results"

@pytest.fixture(scope="module")
def site(run_folder, tmp_path_factory):
    res = docs.build(tmp_path_factory.mktemp("docs")/"site", run_dirs=[run_folder])
    TIMINGS.update(docs_build_s=round(res["seconds"], 1), pages=len(res["pages"]), sphinx_warnings=len(res["warnings"]))
    _save_timings()
    print(f"\ndocs build: {res['seconds']:.1f} s, {len(res['pages'])} pages, {len(res['warnings'])} warnings")
    for w in res["warnings"]: print("  ", w)
    return res

@pytest.fixture(scope="module")
def server(site):
    "The built site over HTTP on 127.0.0.1 (search and relative links as on any web server)."
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a): pass
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=site["out"]))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_port}/"
    httpd.shutdown(); httpd.server_close()

@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)   # a fresh profile folder each launch
        yield b
        b.close()

@pytest.fixture
def page(browser, server):
    """A page that records console errors, uncaught exceptions, failed or refused requests and any request for
    something not on the site's server (which is refused)."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = ctx.new_page()
    pg.problems = []
    local = urlparse(server).netloc
    def route(r):
        if urlparse(r.request.url).netloc == local or r.request.url.startswith("data:"): return r.continue_()
        pg.problems.append(f"request outside the site: {r.request.url}")
        return r.abort()
    ctx.route("**/*", route)
    pg.on("console", lambda m: m.type == "error" and pg.problems.append(f"console error: {m.text} ({m.location.get('url')})"))
    pg.on("pageerror", lambda e: pg.problems.append(f"uncaught exception: {e}"))
    pg.on("requestfailed", lambda r: r.failure != "net::ERR_ABORTED"   # cancelled by the next navigation (favicon)
          and pg.problems.append(f"request failed: {r.url} {r.failure}"))
    pg.on("response", lambda r: r.status >= 400 and pg.problems.append(f"HTTP {r.status}: {r.url}"))
    yield pg
    ctx.close()

IMAGES_JS = "() => Array.from(document.images).map(i => ({src: i.currentSrc || i.src, complete: i.complete, w: i.naturalWidth}))"
LINKS_JS = "() => Array.from(document.querySelectorAll('a[href]')).map(a => a.href)"

# ---------------------------------------------------------------- the pieces, without a build
def test_markdown_docstrings_become_restructuredtext():
    cwm_docments.EXPORTED.update(cwm_docments.exported_names())
    md = cwm_docments.md_to_rst
    assert md("Raises `CwmNbError` if unknown.") == "Raises :py:obj:`CwmNbError <cwm_nb.core.CwmNbError>` if unknown."
    assert md("the shared `get_sandbox()`") == "the shared :py:obj:`get_sandbox() <cwm_nb.sandbox.jobs.get_sandbox>`"
    assert md("numpy values and `PickledObject`s") .endswith("<cwm_nb.bench.paper_pickles.PickledObject>`\\ s")
    assert md("`error` is a `str`, `x == 1.0`") == "``error`` is a ``str``, ``x == 1.0``"   # not exported: literals
    assert md("pass stop=[\"```\"] when open") == "pass stop=[\"\\`\\`\\`\"] when open"   # a lone fence, escaped
    assert md("*emphasis* stays, 2*3 and a|b and name_ do not") == "*emphasis* stays, 2\\*3 and a\\|b and name\\_ do not"

def test_staged_notebooks_leave_out_nbdev_directives_hidden_cells_and_widgets():
    nb = {"metadata": {"widgets": {}}, "cells": [
        {"cell_type": "code", "source": "#| hide\nfrom nbdev import *", "outputs": []},
        {"cell_type": "code", "source": "#| export\ndef f(): pass", "outputs": []},
        {"cell_type": "code", "source": "bar(1)", "outputs": [{"output_type": "display_data", "metadata": {},
            "data": {docs.WIDGET_MIME: {}, "text/plain": "50%"}}]},
        {"cell_type": "markdown", "source": "see [below](#Collection-times)"}]}
    cells = docs._stage_cells(nb)["cells"]
    assert [c["source"] for c in cells] == ["def f(): pass", "bar(1)", "see [below](#collection-times)"]
    assert cells[1]["outputs"][0]["data"] == {"text/plain": "50%"} and "widgets" not in nb["metadata"]

def test_the_newest_complete_executed_copy_is_chosen(tmp_path):
    def executed(path, end, exception=None, src="/x/nbs/experiments/cwmb.ipynb"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"cells": [], "metadata": {"papermill": {"input_path": src, "end_time": end, "exception": exception}}}))
    executed(tmp_path/"a"/"notebook.ipynb", "2026-01-01T00:00:00")
    executed(tmp_path/"b"/"notebook.ipynb", "2026-02-01T00:00:00")
    executed(tmp_path/"c"/"notebook.ipynb", "2026-03-01T00:00:00", exception=True)   # failed run
    executed(tmp_path/"d"/".notebook.partial.ipynb", "2026-04-01T00:00:00")          # killed run
    executed(tmp_path/"e"/"paper_figures.ipynb", "2025-01-01T00:00:00", src="nbs/experiments/paper_figures.ipynb")
    assert docs.find_executed([tmp_path, tmp_path/"missing"]) == {"cwmb": tmp_path/"b"/"notebook.ipynb",
                                                                  "paper_figures": tmp_path/"e"/"paper_figures.ipynb"}

def test_the_build_refuses_to_replace_a_folder_that_is_not_a_site(tmp_path):
    (tmp_path/"mine").mkdir(); (tmp_path/"mine"/"notes.txt").write_text("keep")
    with pytest.raises(ValueError, match="not a docs build"): docs.build(tmp_path/"mine", run_dirs=[])
    assert (tmp_path/"mine"/"notes.txt").read_text() == "keep"

def test_links_to_notebooks_become_links_between_pages():
    "A README link to a notebook (nbs/NN_name.ipynb, a guide section, an experiment) points at the site's page."
    md = "[a](nbs/22_gif_mcts.ipynb), [b](nbs/guide.ipynb#models), [c](nbs/experiments/cwmb.ipynb), [d](https://x/nbs/y.ipynb)"
    assert docs._site_links(md) == "[a](22_gif_mcts.ipynb), [b](guide.ipynb#models), [c](experiments/cwmb.ipynb), [d](https://x/nbs/y.ipynb)"

def test_every_library_notebook_belongs_to_a_named_group():
    "The notebooks' tens digit names their group (foundations, the benchmark, ...); none falls outside GROUPS."
    groups = docs.notebook_groups(docs.library_notebooks())
    assert [cap for cap, _ in groups] == list(docs.GROUPS.values()), groups
    assert "22_gif_mcts" in dict(groups)["Search methods"] and "34_agent" in dict(groups)["WorldCoder"]

# ---------------------------------------------------------------- the site, built once

def test_the_site_has_every_notebook_module_and_experiment(site):
    pages = set(site["pages"])
    assert "index.html" in pages and "search.html" in pages
    for p in docs.library_notebooks(): assert f"{p.stem}.html" in pages, p.name
    for m in docs.library_modules(): assert f"api/{m}.html" in pages, m
    for p in docs.experiment_notebooks(): assert f"experiments/{p.stem}.html" in pages, p.name
    assert set(site["executed"]) == {"cwmb"}   # the run folder's executed copy is the page, not the stored notebook
    cwmb = (Path(site["out"])/"experiments"/"cwmb.html").read_text()
    assert "Executed copy" in cwmb and "openai_gpt-4o" in cwmb and "<img" in cwmb
    assert "As stored" in (Path(site["out"])/"experiments"/"paper_figures.html").read_text()
    sidebar = (Path(site["out"])/"index.html").read_text()
    for cap in docs.GROUPS.values(): assert cap in sidebar, cap   # one sidebar section per group
    assert 'href="#nbs/' not in sidebar   # the landing page's links to notebooks lead to their pages

def test_docments_become_parameter_lists(site):
    "evaluate_program's docments (the comment after each parameter) are its parameter list in the API reference."
    from fastcore.docments import docments
    from cwm_nb.bench.cwm import evaluate_program
    html = (Path(site["out"])/"api"/"cwm_nb.bench.cwm.html").read_text()
    start = html.index('id="cwm_nb.bench.cwm.evaluate_program"')
    entry = _text(html[start:html.index("</dd>", start)])
    documented = {k: d["docment"] for k, d in docments(evaluate_program, full=True).items() if d["docment"] and k != "return"}
    assert len(documented) >= 5
    for name, doc in documented.items():   # "name (type) – comment", as Sphinx writes a parameter list
        assert re.search(rf"\b{name}( \([^)]*\))? – {re.escape(_text(doc.replace('`', '')))}", entry), (name, entry)

def _text(html: str) -> str:
    "Visible text, with typographic quotes as plain ones and whitespace collapsed."
    import html as h
    t = h.unescape(re.sub(r"<[^>]+>", "", html))
    for a, b in (("\u2019", "'"), ("\u2018", "'"), ("\u201c", '"'), ("\u201d", '"')): t = t.replace(a, b)
    return " ".join(t.split())

@needs_chromium
def test_every_page_loads_without_console_errors_and_shows_its_images(site, server, page):
    t0, problems, images = time.perf_counter(), {}, {}
    for rel in site["pages"]:
        page.problems.clear()
        page.goto(server + rel, wait_until="load")
        imgs = page.evaluate(IMAGES_JS)
        broken = [i["src"] for i in imgs if not i["complete"] or i["w"] == 0]
        dead = sorted({h for h in page.evaluate(LINKS_JS) if h.startswith(server) and not _exists(site, h[len(server):])})
        if page.problems or broken or dead:
            problems[rel] = page.problems + [f"image not shown: {s}" for s in broken] + [f"link to nothing: {h}" for h in dead]
        images[rel] = len(imgs)
    TIMINGS.update(browser_pages_s=round(time.perf_counter() - t0, 1), pages_checked=len(site["pages"]),
                   images_checked=sum(images.values()))
    _save_timings()
    assert not problems, json.dumps(problems, indent=1)[:5000]
    assert images["experiments/cwmb.html"] >= 1   # the executed copy's figure
    math = page.goto(server + "14_cwm.html") and page.locator("math").count()
    assert math > 0   # formulas are MathML written at build time (no MathJax from a CDN)

def _exists(site, rel: str) -> bool:
    "A link within the site leads to a file of the site, and its #anchor to an element of that file."
    path, _, anchor = unquote(rel).partition("#")
    f = Path(site["out"])/(path.split("?")[0] or "index.html")
    if not f.is_file(): return False
    return not anchor or f'id="{anchor}"' in f.read_text()

@needs_chromium
def test_search_finds_a_function_by_name(server, page):
    page.goto(server + "index.html")
    page.fill("input[name=q]", "evaluate_program")
    page.keyboard.press("Enter")
    page.wait_for_url("**/search.html?q=evaluate_program*")
    hit = page.locator("#search-results li a", has_text="evaluate_program").first
    hit.wait_for(timeout=30_000)
    assert hit.get_attribute("href").endswith("api/cwm_nb.bench.cwm.html#cwm_nb.bench.cwm.evaluate_program")
    hit.click()
    page.wait_for_url("**/api/cwm_nb.bench.cwm.html#cwm_nb.bench.cwm.evaluate_program")
    assert page.locator("dt[id='cwm_nb.bench.cwm.evaluate_program']").is_visible()
    assert not page.problems, page.problems

@needs_chromium
def test_the_method_notebooks_code_fits_the_page(server, page):
    """The method notebooks keep code lines within 100 characters so that the page shows them without scrolling
    sideways: no code cell of theirs overflows its box at 1280 px (the page fixture's width) or 1920 px."""
    for width in (1280, 1920):
        page.set_viewport_size({"width": width, "height": 900})
        for stem in ("14_cwm", "15_planning", "22_gif_mcts", "23_baselines", "34_agent"):
            page.goto(server + f"{stem}.html")
            over = page.evaluate("""() => [...document.querySelectorAll('div.cell_input pre')]
                .filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.textContent.split('\\n')[0])""")
            assert not over, (width, stem, over[:3])

@needs_chromium
def test_screenshots_of_the_landing_page_a_notebook_and_an_experiment(server, page):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shots = {"landing.png": ("index.html", None), "notebook-14_cwm.png": ("14_cwm.html", None),
             "experiment-cwmb.png": ("experiments/cwmb.html", "img")}
    for name, (rel, scroll_to) in shots.items():
        page.goto(server + rel, wait_until="load")
        if scroll_to: page.locator(scroll_to).first.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS/name))
        png = (ARTIFACTS/name).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(png[16:20], "big") == 1280, name
        print(f"screenshot: {(ARTIFACTS/name).relative_to(ROOT)}")
    assert not page.problems, page.problems
