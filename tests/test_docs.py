"""The documentation site cannot rot: every python block of its pages runs and prints what its comments promise,
every command it shows exists with the flags it gives, and the site builds with warnings as errors."""

import html
import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path

import datasets
import pytest

from test_readme import run_block

ROOT = Path(__file__).resolve().parent.parent
# the site's pages: not the data its results pages are generated from, nor the run folders (and their cards) under
# docs/compare (mkdocs.yml's exclude_docs)
PAGES = sorted(path for path in (ROOT / "docs").rglob("*.md")
               if path.relative_to(ROOT / "docs").parts[0] not in ("results_data", "compare", "sample_complexity"))
BLOCKS = [(page, index, block) for page in PAGES
          for index, block in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S))]


def _name(case) -> str:
    page, index, _ = case
    return f"{page.relative_to(ROOT / 'docs')}#{index}"


@pytest.mark.parametrize("case", BLOCKS, ids=[_name(case) for case in BLOCKS])
def test_every_python_block_of_the_docs_runs_and_prints_what_it_promises(case, tmp_path, monkeypatch):
    page, index, block = case
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    run_block(block, f"{page.name} python block {index}")


def _commands() -> list:
    found = []
    for page in PAGES:
        for block in re.findall(r"```bash\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
            text = block.replace("\\\n", " ")
            for line in text.splitlines():
                line = line.split("  #")[0].strip()
                if line.startswith(("hf-treelang ", "python training/", "accelerate launch training/")):
                    found.append((page.relative_to(ROOT / "docs"), line))
    return found


def _script_flags(script: str) -> set:
    from hf_treelang.train.arguments import EnsembleArguments
    from hf_treelang.train.run import known_arguments

    if script == "compare_architectures.py":
        return {"out", "stage", "workers", "only", "help"}
    if script == "sample_complexity_campaign.py":
        return {"out", "only", "workers", "plan", "publish", "help"}
    ensemble = {field for field in EnsembleArguments.__dataclass_fields__}
    return {*known_arguments(), *ensemble, "help"}


def test_every_command_of_the_docs_exists_with_the_flags_it_gives():
    from hf_treelang import cli

    commands = _commands()
    assert len(commands) >= 20
    wrong = []
    for page, line in commands:
        argv = shlex.split(line)
        if argv[0] == "hf-treelang":
            if argv[1] not in cli.COMMANDS:
                wrong.append(f"{page}: {line}: no sub-command {argv[1]!r}")
                continue
            options = {option for action in cli.command_parser(argv[1])._actions for option in action.option_strings}
            flags = [token.split("=")[0] for token in argv[2:] if token.startswith("--")]
            wrong += [f"{page}: {line}: {flag}" for flag in flags if flag not in options]
        else:
            script = next(token for token in argv if token.startswith("training/")).split("/", 1)[1]
            if not (ROOT / "training" / script).is_file():
                wrong.append(f"{page}: {line}: no script {script}")
                continue
            known = _script_flags(script)
            flags = [token[2:].split("=")[0] for token in argv if token.startswith("--") and not token.startswith(
                "--num_processes") and token not in ("--cpu",)]
            wrong += [f"{page}: {line}: --{flag}" for flag in flags if flag not in known]
    assert not wrong, "\n".join(wrong)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built once with warnings as errors (the docs extra's mkdocs)."""
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("the docs extra is not installed")
    folder = tmp_path_factory.mktemp("docs") / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(folder)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return folder


def test_the_site_builds_with_warnings_as_errors(site):
    api = (site / "reference" / "api").rglob("index.html")
    pages = "".join(path.read_text(encoding="utf-8") for path in api)
    for name in ("BeliefPropagation", "Grammar", "TreeLangConfig", "TreeLangForMaskedLM", "BPKLCallback",
                 "sample_trees", "build_bp_transformer"):
        assert name in pages, name
    assert "--num_train" in (site / "reference" / "flags" / "index.html").read_text(encoding="utf-8")
    assert "hf-treelang compare" in (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")


def _api_pages(site: Path) -> dict:
    """Every API page's article, as HTML."""
    pages = {}
    for path in sorted((site / "reference" / "api").rglob("index.html")):
        text = path.read_text(encoding="utf-8")
        pages[path.parent.name] = text.split("<article", 1)[1].split("</article>", 1)[0]
    return pages


def _text(markup: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", markup)).split())


ROLE = re.compile(r"(?<![\w/]):?\b(?:py:)?(?:meth|class|func|mod|attr|data|exc|obj|const|ref):(?=\s?[`~\w])")


def test_the_api_pages_render_every_docstring_markup(site):
    """No docstring markup reaches the API pages as text: no Sphinx role (``:meth:`X```) or what is left of one
    (``class:X``), no link of transformers' doc-builder (``[`X`]``), no ``a**b`` turned into bold, no parameter marked
    required whose docstring states its default, and no pointer to a docstring no page shows."""
    wrong = []
    for name, page in _api_pages(site).items():
        text = _text(page)
        wrong += [f"{name}: a Sphinx role: {text[max(0, m.start() - 30):m.end() + 30]!r}" for m in ROLE.finditer(text)]
        wrong += [f"{name}: a doc-builder link: {m.group(0)!r}"
                  for m in re.finditer(r"\[<code>[\w.]+</code>\]|\[`[\w.]+`\]", page)]
        for match in re.finditer(r"[\w)\]]<(strong|em)>|</(strong|em)>[\w(\[]", page):  # a**b read as bold
            wrong.append(f"{name}: {_text(page[max(0, match.start() - 80):match.end() + 40])!r}: markup read as "
                         f"emphasis inside a word")
        for row in re.findall(r'<tr class="doc-section-item">(.*?)</tr>', page, re.S):
            cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
            if cells and _text(cells[-1]) == "required" and re.search(r"\bdefaults? (?:to|is)\b|Default:",
                                                                       _text(row)):
                wrong.append(f"{name}: {_text(cells[0])}: marked required beside its stated default")
        sections = page.split('<div class="doc doc-object doc-module">')
        for section in sections:  # "the module docstring" is the text heading the section of the object's module
            shown = section.split('<div class="doc doc-object', 1)[0]
            if "module docstring" in _text(section) and (section is sections[0] or len(_text(shown)) < 80):
                wrong.append(f"{name}: points to a module docstring the page does not render")
    assert not wrong, "\n".join(wrong)
