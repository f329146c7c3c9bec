"""The package's docstrings as the API pages show them (a griffe extension, named in mkdocs.yml).

The docstrings are written for readers of the source and of ``help()``: Sphinx roles (``:class:`BPResult```),
transformers' doc-builder links (``[`TreeLangModel`]``), reST literals, ``2**depth`` in prose, and the Hugging Face
``name (`int`, defaults to 4):`` argument style of a config. Markdown would print a role as text, read ``**`` as bold
and a Google-style parser would read ``A :class:`BPResult``` as a type ``A``. This extension rewrites each docstring
of the package before mkdocstrings parses it, so that the pages render what the source means:

* a role becomes a code span of its target (``~a.b.C`` shows ``C``, as Sphinx does);
* a doc-builder link ``[`X`]`` becomes the code span ``X``;
* an expression with ``**`` outside code (``arity**depth``) becomes a code span;
* an ``Example:`` section is read as ``Examples:``, whose doctest lines render as code (the parser knows only the
  plural);
* a class that is a dataclass at run time without ``@dataclass`` in its source (a transformers 5 config) gets the
  ``__init__`` of its own fields, so that its parameters show their defaults; an argument's ``defaults to X`` then
  leaves its type column, where the default column holds it.

Nothing here changes the package: only the text the site renders.
"""

from __future__ import annotations

import dataclasses
import importlib
import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:meth|class|func|mod|attr|data|exc|obj|const|ref):`([^`]+)`")
DOC_BUILDER_LINK = re.compile(r"\[`([\w.]+)`\](?![(\[])")
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
POWER = re.compile(r"[^\s`]*[\w)]\*\*[\w(ℓ][^\s`]*")
HF_ARGUMENT = re.compile(r"^(\s+)(\w+) \(([^()]*?)\):", re.M)
EXAMPLE = re.compile(r"^(\s*)Example:[ \t]*$", re.M)


def _role(match: re.Match) -> str:
    target = match.group(1).strip()
    if "<" in target and target.endswith(">"):  # an explicit title: :class:`the result <BPResult>`
        target = target[: target.index("<")].strip()
    elif target.startswith("~"):
        target = target[1:].rsplit(".", 1)[-1]
    return f"`{target}`"


def _power(match: re.Match) -> str:
    """``(2**depth).`` -> ``(`2**depth`).``: the expression in code, the prose's brackets and punctuation outside."""
    token = match.group(0)
    lead = re.match(r"[(\[]*", token).group(0)
    trail = re.search(r"[.,;:)\]]*$", token[len(lead):]).group(0)
    core = token[len(lead): len(token) - len(trail)]
    while core.count("(") > core.count(")") and trail.startswith(")"):
        core, trail = core + ")", trail[1:]
    while core.count(")") > core.count("(") and lead.endswith("("):
        core, lead = "(" + core, lead[:-1]
    return f"{lead}`{core}`{trail}"


def _outside_code(text: str, rewrite) -> str:
    """Apply ``rewrite`` to the parts of ``text`` that are not code spans."""
    parts, position = [], 0
    for match in CODE_SPAN.finditer(text):
        parts += [rewrite(text[position: match.start()]), match.group(0)]
        position = match.end()
    return "".join(parts + [rewrite(text[position:])])


def markdown(text: str) -> str:
    """A docstring's text with its reST and doc-builder markup turned into the markdown mkdocstrings renders."""
    text = ROLE.sub(_role, text)
    text = EXAMPLE.sub(r"\1Examples:", text)
    text = DOC_BUILDER_LINK.sub(r"`\1`", text)
    return _outside_code(text, lambda part: POWER.sub(_power, part))


def _runtime(cls: griffe.Class):
    try:
        value = importlib.import_module(cls.module.path)
        for name in cls.path[len(cls.module.path) + 1:].split("."):
            value = getattr(value, name)
    except (ImportError, AttributeError):
        return None
    return value


def _add_dataclass_init(cls: griffe.Class) -> None:
    """The ``__init__`` of a run-time dataclass whose source has no ``@dataclass``: its own annotated fields, by
    keyword, and ``**kwargs`` for what its bases take."""
    if "__init__" in cls.members or "dataclass" in cls.labels or not dataclasses.is_dataclass(_runtime(cls)):
        return
    fields = [member for member in cls.members.values()
              if not member.is_alias and member.is_attribute and member.annotation is not None
              and member.value is not None]
    if not fields:
        return
    parameters = griffe.Parameters(
        griffe.Parameter("self", kind=griffe.ParameterKind.positional_or_keyword),
        *(griffe.Parameter(field.name, annotation=field.annotation, kind=griffe.ParameterKind.keyword_only,
                           default=field.value) for field in fields),
        griffe.Parameter("kwargs", kind=griffe.ParameterKind.var_keyword),
    )
    cls.set_member("__init__", griffe.Function("__init__", lineno=0, endlineno=0, parent=cls, parameters=parameters,
                                               returns="None"))


def _argument_types(text: str, parameters) -> str:
    """``name (`int`, *optional*, defaults to 4):`` -> ``name (int):`` where the signature gives the default."""
    names = {parameter.name for parameter in parameters if parameter.default is not None}

    def rewrite(match: re.Match) -> str:
        indent, name, kind = match.groups()
        if name not in names or not re.search(r"\bdefaults to\b|\*optional\*", kind):
            return match.group(0)
        kept = [part.strip().strip("`") for part in kind.split(",")
                if part.strip() and not re.match(r"\*optional\*|defaults to\b", part.strip())]
        return f"{indent}{name} ({', '.join(kept)}):" if kept else f"{indent}{name}:"

    return HF_ARGUMENT.sub(rewrite, text)


class DocstringMarkup(griffe.Extension):
    """Rewrite every docstring of the loaded package (module docstring above)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        self._visit(pkg, set())

    def _visit(self, obj, seen: set) -> None:
        if obj.is_alias or obj.path in seen:
            return
        seen.add(obj.path)
        if obj.is_class:
            _add_dataclass_init(obj)
        if obj.docstring is not None:
            text = markdown(obj.docstring.value)
            if obj.is_class or obj.is_function:
                text = _argument_types(text, obj.parameters)
            obj.docstring.value = text
        for member in list(obj.members.values()):
            self._visit(member, seen)
