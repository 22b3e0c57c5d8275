"""Sphinx configuration of the cwm-nb docs site. `tools/docs.py` builds it: it stages the notebooks (with their
stored outputs) and the API pages in a temporary source folder and runs `sphinx-build -c docs` on it."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))                  # document this checkout's cwm_nb, not whatever is installed
sys.path.insert(0, str(Path(__file__).parent/"_ext"))
import cwm_nb

project = "cwm-nb"
author = "cwm-nb developers"
copyright = "2026 onwards, cwm-nb developers"
release = version = cwm_nb.__version__

extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.viewcode", "cwm_docments", "cwm_mathml"]
root_doc = "index"
exclude_patterns = ["_build", "**.ipynb_checkpoints"]

# Notebooks are rendered with the outputs they were saved with; nothing is executed while building.
nb_execution_mode = "off"
nb_merge_streams = True              # a cell's many stream outputs (tqdm lines) as one block
myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_dmath_allow_digits = False   # "$0.68 ... $0.21" is money, not a formula
html_math_renderer = "mathml"      # formulas as MathML written at build time: no MathJax from a CDN
myst_heading_anchors = 3
suppress_warnings = ["myst.header", "misc.highlighting_failure"]

# API reference: the exported names (`__all__`) of each module (tools/docs.py writes one page per module),
# with the docments as parameter lists (docs/_ext/cwm_docments.py, which also writes the bases).
autodoc_member_order = "bysource"
autodoc_typehints = "both"                 # in the signature, and beside each docment in the parameter list
autodoc_typehints_description_target = "documented"
autodoc_preserve_defaults = True
add_module_names = False

html_theme = "furo"
html_title = f"cwm-nb {release}"
html_static_path = ["_static"]
html_css_files = ["cwm.css"]     # single-line DataFrame borders; wide outputs scroll inside their cell
html_favicon = "_static/favicon.svg"   # else browsers ask for /favicon.ico and get a 404
html_copy_source = False             # the .ipynb/.txt sources would double the site's size
html_show_sourcelink = False
