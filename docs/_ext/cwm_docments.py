"""A Sphinx extension for the API reference of nbdev notebooks: docments as parameter lists, Markdown docstrings.

* The notebooks document each parameter with a comment after it (fastcore's *docments*, as nbdev's `show_doc`
  reads them). autodoc does not read comments, so for every function, method and class it documents this
  extension asks `fastcore.docments.docments` for them and appends `:param name: comment` (and `:returns:`)
  fields to the docstring, which Sphinx renders as the "Parameters" list with the types from the annotations.
  A dataclass's fields are its parameters, listed with their comments (tools/docs.py leaves them out of its
  members, so that they are not listed twice).
* The docstrings are written in Markdown (`code`, *emphasis*), which autodoc would parse as reStructuredText.
  Their inline markup is translated: a code span that names something becomes a cross-reference (rendered as
  code, a link when the name is documented), other code spans become literals, and characters that mean
  something else in reStructuredText (`*`, `|`, a trailing `_`, a lone backtick) are escaped.
"""
import re

CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)")
NAME = re.compile(r"[A-Za-z_][\w.]*(\(\))?")
EMPHASIS = re.compile(r"(?<![\w*\\])(\*\*?)(?=\S)(.+?)(?<=\S)\1(?![\w*])")

def _escape(text: str) -> str:
    "Plain Markdown text as reStructuredText: `*`, `|`, backticks and trailing underscores escaped; *emphasis* kept."
    parts, pos = [], 0
    for m in EMPHASIS.finditer(text):
        parts.append(_escape_chars(text[pos:m.start()]))
        parts.append(m.group(1) + _escape_chars(m.group(2)) + m.group(1))
        pos = m.end()
    return "".join(parts) + _escape_chars(text[pos:])

def _escape_chars(s: str) -> str:
    s = s.replace("\\", "\\\\").replace("*", "\\*").replace("|", "\\|").replace("`", "\\`")
    return re.sub(r"(?<=\w)_(?!\w)", r"\\_", s)

def exported_names(package: str = "cwm_nb") -> dict[str, str]:
    "{name: module} of the names the package's modules export (`__all__`), for names only one module exports."
    import importlib, pkgutil
    pkg, where = importlib.import_module(package), {}
    for m in pkgutil.walk_packages(pkg.__path__, prefix=f"{package}."):   # the subpackages' modules too
        if m.ispkg or m.name.rpartition(".")[2].startswith("_"): continue
        for n in getattr(importlib.import_module(m.name), "__all__", ()): where.setdefault(n, []).append(m.name)
    return {n: ms[0] for n, ms in where.items() if len(ms) == 1}

EXPORTED: dict[str, str] = {}

def _code(content: str) -> str:
    """A Markdown code span as an inline cross-reference (a name the package exports, or a dotted name that
    starts with one or with the package) or a literal (anything else: parameters, attributes, expressions)."""
    c = content.strip()
    if NAME.fullmatch(c) and (c.startswith("cwm_nb.") or c.split(".")[0].removesuffix("()") in EXPORTED):
        target = c.removesuffix("()")
        if not target.startswith("cwm_nb."): target = f"{EXPORTED[target.split('.')[0]]}.{target}"
        return f":py:obj:`{c} <{target}>`"
    if "``" in c or c.startswith("`") or c.endswith("`"):   # cannot be a reST literal: show it as escaped text
        return _escape_chars(c)
    return f"``{c}``"

def md_to_rst(line: str) -> str:
    """One line of a Markdown docstring as reStructuredText inline markup. Inline markup that touches a word
    character is set apart with an escaped space (`\\ `), which reStructuredText drops."""
    out, pos = [], 0
    for m in CODE_SPAN.finditer(line):
        before = _escape(line[pos:m.start()])
        code = _code(m.group(2))
        if before and (before[-1].isalnum() or before[-1] in "_)]}"): code = "\\ " + code
        after = line[m.end():m.end() + 1]
        if after and (after.isalnum() or after in "_([{"): code += "\\ "
        out += [before, code]
        pos = m.end()
    return "".join(out) + _escape(line[pos:])

def _docments(obj) -> dict:
    from fastcore.docments import docments
    try: return docments(obj, full=True)
    except Exception: return {}   # no source to read (builtins, C extensions, some wrappers): nothing to add

def _type_doc(obj) -> list[str]:
    import inspect
    return inspect.cleandoc(type(obj).__doc__ or "").splitlines()

def process_docstring(app, what, name, obj, options, lines):
    if what == "data" and lines and [l.strip() for l in lines if l.strip()] == [l.strip() for l in _type_doc(obj) if l.strip()]:
        lines.clear()   # a constant has no docstring of its own: autodoc shows its type's (dict's, str's, ...)
    lines[:] = [md_to_rst(l) for l in lines]
    if what == "class": lines[:0] = _bases_line(obj)
    if what not in ("function", "method", "class"): return
    docs = _docments(obj)
    have = {m.group(1) for l in lines if (m := re.match(r"\s*:param\s+(?:\S+\s+)?(\w+):", l))}
    fields = [f":param {k}: {md_to_rst(v['docment'])}" for k, v in docs.items()
              if k not in ("self", "cls", "return") and k not in have and v.get("docment")]
    ret = docs.get("return", {}).get("docment")
    if ret and not any(l.lstrip().startswith((":return:", ":returns:")) for l in lines): fields.append(f":returns: {md_to_rst(ret)}")
    if fields:
        if lines and lines[-1].strip(): lines.append("")
        lines.extend(fields)

def _bases_line(cls) -> list[str]:
    "'Bases: ...' for a class with a base other than `object` (autodoc's show-inheritance writes 'Bases: object' everywhere)."
    bases = [b for b in getattr(cls, "__bases__", ()) if b is not object]
    if not bases: return []
    name = lambda b: b.__qualname__ if b.__module__ == "builtins" else f"~{b.__module__}.{b.__qualname__}"
    return ["Bases: " + ", ".join(f":py:class:`{name(b)}`" for b in bases), ""]

def setup(app):
    EXPORTED.update(exported_names())
    app.connect("autodoc-process-docstring", process_docstring)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
