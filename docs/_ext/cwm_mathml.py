"""A Sphinx math renderer that writes MathML into the page at build time (with latex2mathml).

Sphinx's default renderer loads MathJax from a CDN, which an offline site cannot reach; browsers render MathML
natively, so the site needs no script for its formulas. A formula latex2mathml cannot convert is shown as its
TeX source in a `<code>` element, with a build warning naming it.
"""
import html
from docutils import nodes
from sphinx.util import logging

logger = logging.getLogger(__name__)

def to_mathml(latex: str, display: bool, node=None) -> str:
    from latex2mathml.converter import convert
    try: return convert(latex.strip(), display="block" if display else "inline")
    except Exception as e:
        logger.warning(f"latex2mathml could not convert {latex!r}: {e}", location=node)
        return f'<code class="math-source">{html.escape(latex)}</code>'

def visit_math(self, node):
    self.body.append(f'<span class="math">{to_mathml(node.astext(), False, node)}</span>')
    raise nodes.SkipNode

def visit_displaymath(self, node):
    self.body.append(f'<div class="math">{to_mathml(node.astext(), True, node)}</div>')
    raise nodes.SkipNode

def setup(app):
    app.add_html_math_renderer("mathml", (visit_math, None), (visit_displaymath, None))
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
