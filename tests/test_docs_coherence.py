"""The documentation site holds together: every reference to a section names a heading that exists, a page states a
thing once, and a user page says what is.

The convention the pages follow, checked here on their markdown (the hand-written pages, the pages docs/hooks.py
generates at build time, and the README):

* a section is referred to by a link to its anchor, ``[text](page.md#anchor)``, or by its heading in straight double
  quotes: ``see "Heading"`` (a heading of any page), ``"Heading" below`` / ``"Heading" above`` (or ``below,
  "Heading"``) for a heading further down or further up the same page; the quoted text is the heading's text without
  its markup. A capitalised name with no quotes in those places (``see Sweeps below``) is not a reference a reader can
  follow, and fails;
* a page has each heading once, each code block once and each sentence once;
* the user pages (the README, the home page, Getting started and the guides) hold no issue numbers, no dates and no
  campaign history; what was measured, with its command, machine and date, lives in the results pages.
"""

import html
import json
import re
from pathlib import Path

import pytest
from markdown.extensions.toc import slugify

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
USER_PAGES = ("README.md", "index.md", "getting-started.md")  # and every page under guides/


def _hand_written() -> dict:
    pages = {}
    for path in sorted(DOCS.rglob("*.md")):
        relative = path.relative_to(DOCS)
        if relative.parts[0] in ("results_data", "compare", "sample_complexity"):  # the data the generated pages are made of
            continue
        pages[relative.as_posix()] = path.read_text(encoding="utf-8")
    return pages


@pytest.fixture(scope="module")
def pages() -> dict:
    """Every page of the site as markdown, by its path under docs/ ("README.md": the repository's README)."""
    pytest.importorskip("mkdocs")  # docs/hooks.py generates the reference and results pages with mkdocs' File
    import runpy

    hooks = runpy.run_path(str(DOCS / "hooks.py"), run_name="docs_hooks")
    found = _hand_written()
    found.update({uri: make() for uri, make in hooks["GENERATED"].items()})
    found["README.md"] = (ROOT / "README.md").read_text(encoding="utf-8")
    return found


# ------------------------------------------------------------------------------------------------ reading a page


def _prose_lines(text: str) -> list:
    """(line number, line) of every line outside fenced code blocks."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def paragraphs(text: str, tables: bool = True) -> list:
    """(first line number, text joined into one line) of every paragraph of prose (each table row one, unless
    ``tables`` is False; no headings, images or code)."""
    found, current, start = [], [], 0
    for number, line in _prose_lines(text) + [(0, "")]:
        stripped = line.strip()
        row = stripped.startswith("|")
        if not stripped or row or stripped.startswith(("#", "!", "<")):
            if current:
                found.append((start, " ".join(current)))
            current = []
            if row and tables and not re.fullmatch(r"[|:\- ]+", stripped):
                found.append((number, stripped))
            continue
        if not current:
            start = number
        current.append(stripped)
    return found


def _plain(markup: str) -> str:
    """A heading's or a reference's text as a reader sees it: no code, emphasis or link markup."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", markup)
    text = text.replace("`", "").replace("**", "")
    return " ".join(html.unescape(text).split())


def headings(text: str) -> list:
    """(line number, level, plain text) of every heading of a page."""
    found = []
    for number, line in _prose_lines(text):
        match = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if match:
            found.append((number, len(match.group(1)), _plain(match.group(2))))
    return found


def anchors(text: str) -> set:
    """The ids mkdocs gives the headings of a page (Python-Markdown's toc: a repeated slug gets _1, _2, ...)."""
    seen = set()
    for _, _, title in headings(text):
        slug = base = slugify(title, "-")
        count = 0
        while slug in seen:
            count += 1
            slug = f"{base}_{count}"
        seen.add(slug)
    return seen


def _without_code_spans(line: str) -> str:
    return re.sub(r"`[^`]*`", lambda match: " " * len(match.group(0)), line)


def _resolve(page: str, target: str) -> str:
    """The docs-relative path of a link target of ``page`` (the README links into docs/)."""
    if page == "README.md":
        return target[len("docs/"):] if target.startswith("docs/") else target
    base = Path(page).parent
    parts = []
    for part in (base / target).as_posix().split("/"):
        if part == "..":
            parts.pop()
        elif part not in ("", "."):
            parts.append(part)
    return "/".join(parts)


# ------------------------------------------------------------------------------------------------ references


def test_every_link_to_a_section_names_a_heading_that_exists(pages):
    wrong = []
    for page, text in pages.items():
        for number, paragraph in paragraphs(text):
            for target in re.findall(r"\]\(([^)\s]*#[^)\s]+)\)", _without_code_spans(paragraph)):
                path, anchor = target.split("#", 1)
                if path.startswith(("http://", "https://")):
                    continue
                other = _resolve(page, path) if path else page
                if other not in pages:
                    wrong.append(f"{page}:{number}: {target}: no page {other}")
                elif anchor not in anchors(pages[other]):
                    wrong.append(f"{page}:{number}: {target}: no heading of {other} has the anchor #{anchor}")
    assert not wrong, "\n".join(wrong)


QUOTED = re.compile(r'"([^"]{2,120})"')
LOCAL = re.compile(r"^[\s)]*,?\s*(below|above)\b")  # "Heading" below / above
LOCAL_BEFORE = re.compile(r"\b(below|above),\s*$")  # below, "Heading"
SEE = re.compile(r"\b[Ss]ee\s*$")  # see "Heading"
UNQUOTED = (
    re.compile(r"\b[Ss]ee ([A-Z][\w-]*(?: [A-Z][\w-]*)*)\b(?![\]\"(`])"),  # see Sweeps
    re.compile(r"\bunder ([A-Z][a-z][\w-]*)\b"),  # the table under Results
    re.compile(r"[(,;] ?([A-Z][a-z][\w-]*)(?: \w+)? (below|above)\b"),  # (Results below), (see Sweeps below)
)


def _reference_text(paragraph: str) -> str:
    """A paragraph with its links blanked (a link is checked by its anchor) and the quotes inside its code spans made
    single, so that a quoted heading may hold code and a string in code is not a quote."""
    plain = re.sub(r"`[^`]*`", lambda match: match.group(0).replace('"', "'"), paragraph)
    return re.sub(r"\[[^\]]*\]\([^)]*\)", lambda match: " " * len(match.group(0)), plain)


def quoted_references(text: str) -> list:
    """(line number, heading text, where) of every quoted reference of a page: where is "below", "above" or "site"."""
    found = []
    for number, paragraph in paragraphs(text):
        plain = _reference_text(paragraph)
        for match in QUOTED.finditer(plain):
            before, after = plain[: match.start()], plain[match.end():]
            local = LOCAL.match(after) or LOCAL_BEFORE.search(before)
            if local:
                found.append((number, _plain(match.group(1)), local.group(1)))
            elif SEE.search(before):
                found.append((number, _plain(match.group(1)), "site"))
    return found


def test_every_quoted_reference_names_a_heading_where_it_says(pages):
    every = {title for text in pages.values() for _, _, title in headings(text)}
    wrong = []
    for page, text in pages.items():
        own = headings(text)
        for number, title, where in quoted_references(text):
            if where == "site":
                if title not in every:
                    wrong.append(f'{page}:{number}: see "{title}": no page has this heading')
                continue
            lines = [line for line, _, heading in own if heading == title]
            if not any(line > number if where == "below" else line < number for line in lines):
                wrong.append(f'{page}:{number}: "{title}" {where}: no such heading {where} it on this page')
    assert not wrong, "\n".join(wrong)


def test_a_section_is_referred_to_by_its_quoted_heading_or_a_link(pages):
    wrong = []
    for page, text in pages.items():
        for number, paragraph in paragraphs(text):
            for pattern in UNQUOTED:
                for match in pattern.finditer(_without_code_spans(_reference_text(paragraph))):
                    wrong.append(f"{page}:{number}: {match.group(0).strip()!r}: quote the heading or link it")
    assert not wrong, "\n".join(wrong)


# ------------------------------------------------------------------------------------------------ once per page


def test_no_page_repeats_a_heading(pages):
    """A heading differs from its siblings and from the headings it sits under (a page of several reports, such as
    the GPU checks, repeats its sub-headings only under different parents)."""
    wrong = []
    for page, text in pages.items():
        path = []  # (level, title, line) of the headings the current one sits under
        siblings = {}  # (parent path, title) -> line
        for number, level, title in headings(text):
            path = [entry for entry in path if entry[0] < level]
            for _, above, line in path:
                if above == title:
                    wrong.append(f"{page}:{number}: the heading {title!r} again, under itself (line {line})")
            key = (tuple(entry[1] for entry in path), title)
            if key in siblings:
                wrong.append(f"{page}:{number}: the heading {title!r} again (line {siblings[key]})")
            siblings.setdefault(key, number)
            path.append((level, title, number))
    assert not wrong, "\n".join(wrong)


def test_no_page_repeats_a_code_block(pages):
    wrong = []
    for page, text in pages.items():
        seen = {}
        for match in re.finditer(r"```(\w*)\n(.*?)```", text, re.S):
            block = match.group(2).strip()
            number = text.count("\n", 0, match.start()) + 1
            if block in seen:
                wrong.append(f"{page}:{number}: the code block of line {seen[block]} again")
            seen.setdefault(block, number)
    assert not wrong, "\n".join(wrong)


RUN = 7  # words: a run this long in two places of one user page is a thing said twice


def test_no_user_page_says_a_thing_twice(pages):
    wrong = []
    for page, text in _user_pages(pages).items():
        seen = {}
        for number, paragraph in paragraphs(text, tables=False):
            words = re.findall(r"[\w.'’<>\[\]-]+", _plain(paragraph).lower())
            runs = [tuple(words[index : index + RUN]) for index in range(len(words) - RUN + 1)]
            again = next((run for run in runs if run in seen), None)
            if again is not None:
                wrong.append(f"{page}:{number}: {' '.join(again)!r} again (the paragraph of line {seen[again]})")
            for run in runs:
                seen.setdefault(run, number)
    assert not wrong, "\n".join(wrong)


# ------------------------------------------------------------------------------------------------ what is


HISTORY = (
    (re.compile(r"\bissues? \d+|\bissue #?\d+|#\d{2,}\b"), "an issue number"),
    (re.compile(r"\b20\d\d-\d\d-\d\d\b"), "a date"),
    (re.compile(r"\b(former|formerly|earlier rules|no longer|used to)\b", re.I), "history"),
    (re.compile(r"\b[\d,]+ tests\b"), "a count of the test suite"),
    (re.compile(r"\b\d[\d.,]*\s?(?:ms|min|minutes|h|hours|days|steps/s)\b|\b\d[\d.,]*\s?s\b(?! ?=)"),
     "a measured time or rate (the results pages hold them)"),
)


def _user_pages(pages: dict) -> dict:
    return {page: text for page, text in pages.items() if page in USER_PAGES or page.startswith("guides/")}


def test_user_pages_hold_no_issue_numbers_dates_or_history(pages):
    wrong = []
    for page, text in _user_pages(pages).items():
        for number, line in _prose_lines(text):
            for pattern, what in HISTORY:
                for match in pattern.finditer(_without_code_spans(line)):
                    wrong.append(f"{page}:{number}: {what}: {match.group(0)!r}")
    assert not wrong, "\n".join(wrong)


RATE = re.compile(r"(?:learning rate|\blr|Adam(?: at| from)?)\s*(1e-\d|10\^-\d|10⁻[¹²³⁴⁵⁶⁷⁸⁹])")
SUPERSCRIPT = str.maketrans("¹²³⁴⁵⁶⁷⁸⁹", "123456789")


def _rate(text: str) -> float:
    return 10.0 ** -int(re.search(r"(\d)$", text.translate(SUPERSCRIPT)).group(1))


def test_a_learning_rate_a_user_page_gives_a_preset_is_the_presets():
    """A clause naming a preset (`paper`, `laptop`, ...) or the default and stating a learning rate states that
    preset's rate (the scripts' default preset is ``laptop``)."""
    from hf_treelang.train.arguments import PRESETS, TreeLangTrainingArguments

    default = TreeLangTrainingArguments(output_dir="unused").preset
    rates = {}
    for presets in PRESETS.values():
        for name, values in presets.items():
            if "learning_rate" in values:
                rates.setdefault(name, set()).add(values["learning_rate"])
    wrong, checked = [], 0
    for page, text in _user_pages(_hand_written() | {"README.md": (ROOT / "README.md").read_text("utf-8")}).items():
        for number, paragraph in paragraphs(text, tables=False):
            for clause in re.split(r";|\. ", paragraph):
                stated = RATE.search(clause)
                if not stated:
                    continue
                named = [name for name in rates if f"`{name}`" in clause or f"--preset {name}" in clause]
                if not named and re.search(r"\bdefaults?\b", clause):
                    named = [default]
                for name in named:
                    checked += 1
                    if _rate(stated.group(1)) not in rates[name]:
                        wrong.append(f"{page}:{number}: {stated.group(0)!r} for the {name} preset, whose rate is "
                                     f"{sorted(rates[name])}")
    assert checked >= 2 and not wrong, "\n".join(wrong)


def test_a_count_of_the_models_heads_is_the_number_of_heads():
    import hf_treelang.models.modeling_treelang as modeling

    heads = [name for name in dir(modeling) if name.startswith("TreeLangFor")]
    numbers = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5}
    wrong = []
    for page, text in _user_pages(_hand_written()).items():
        for number, line in enumerate(text.splitlines(), 1):  # the code's comments too
            for match in re.finditer(r"\b(one|two|three|four|five) heads\b", line):
                if numbers[match.group(1)] != len(heads):
                    wrong.append(f"{page}:{number}: {match.group(0)!r}; the heads: {heads}")
    assert len(heads) >= 3 and not wrong, "\n".join(wrong)


# ------------------------------------------------------------------------------------------------ the callback's page


def _logged_keys() -> set:
    """Every key ``BPKLCallback`` logs, with its level or position written ``{k}``: root, masked leaf and next leaf on
    the paper's grammar, and a masked leaf on a Random Hierarchy Model whose filtered inputs BP_k can rule out."""
    import torch

    from hf_treelang import (BPKLCallback, Grammar, TreeLangConfig, TreeLangForCausalLM, TreeLangForMaskedLM,
                             TreeLangForSequenceClassification, sample_trees)

    torch.manual_seed(0)
    paper = Grammar.random(num_symbols=4, sigma=1.0, grammar_seed=0)
    rhm = Grammar.random_hierarchy(num_symbols=8, num_classes=8, num_rules=4, arity=2, depth=3, grammar_seed=0)
    cases = [(paper, 0, "root", TreeLangForSequenceClassification), (paper, 0, "mlm", TreeLangForMaskedLM),
             (paper, 0, "clm", TreeLangForCausalLM), (rhm, 1, "mlm", TreeLangForMaskedLM)]
    keys = set()
    for grammar, k_train, task, head in cases:
        trees = sample_trees(grammar, 16, 3, k_train, sampling_seed=1)
        other = sample_trees(grammar, 16, 3, 1 - k_train, sampling_seed=2)
        config = TreeLangConfig.from_data(num_symbols=grammar.num_symbols, depth=3, hidden_size=8,
                                          num_hidden_layers=1, intermediate_size=8)
        callback = BPKLCallback(grammar, 3, k_train, task, trees.leaves,
                                {k_train: (trees.leaves, trees.roots), 1 - k_train: (other.leaves, other.roots)})
        keys |= {re.sub(r"\d+$", "{k}", key) for key in callback.compute(head(config))}
    return keys


def test_the_bp_kl_page_lists_every_key_the_callback_logs():
    page = re.sub(r"\{\w+\}", "{k}", (DOCS / "guides" / "bp-kl.md").read_text(encoding="utf-8"))
    listed = set(re.findall(r"`(eval_[\w{}]+)`", page))
    missing = sorted(_logged_keys() - listed)
    assert not missing, f"docs/guides/bp-kl.md does not list {missing}"


# ------------------------------------------------------------------------------------------------ the first run


def test_the_first_runs_console_lines_are_what_a_smoke_run_prints():
    """Getting started's first run shows the evaluation lines the console prints (``evaluation_line`` of the numbers
    they show, so "closest BP_k" is the smallest KL), at the steps its preset evaluates, ending at its last step."""
    from hf_treelang.train.arguments import PRESETS
    from hf_treelang.train.callbacks import evaluation_line, log_spaced_steps

    page = (DOCS / "getting-started.md").read_text(encoding="utf-8")
    command = re.search(r"```bash\n(python training/run_(\w+)\.py --preset (\w+))\n```", page)
    assert command, "Getting started opens with a run of a training script at a preset"
    task, preset = command.group(2), command.group(3)
    values = PRESETS[task][preset]
    steps = int(values["num_train"] // values["per_device_train_batch_size"] * values["num_train_epochs"])
    evaluated = {0, *log_spaced_steps(steps, values["num_evaluations"])}
    block = page[command.end():].split("```text\n", 1)[1].split("```", 1)[0]
    lines = [line for line in block.splitlines() if re.match(r"step \d+ · loss ", line)]
    assert len(lines) >= 2
    for line in lines:
        step = int(line.split()[1])
        kl = [float(value) for value in re.search(r"KL BP_0\.\.\d+ ([\d. ]+) ·", line).group(1).split()]
        pairs = re.search(r"\(model/BP_0\) (.*)$", line).group(1).split()
        metrics = {"eval_loss": float(re.search(r"loss ([\d.]+)", line).group(1)),
                   **{f"eval_kl_bp_k{k}": value for k, value in enumerate(kl)},
                   **{f"eval_acc_ktest{k}": float(pair.split("/")[0]) for k, pair in enumerate(pairs)},
                   **{f"eval_bp_acc_ktest{k}": float(pair.split("/")[1]) for k, pair in enumerate(pairs)}}
        assert line == evaluation_line(metrics, step, k_train=0)
        assert step in evaluated, f"step {step}: the {preset} preset evaluates at {sorted(evaluated)}"
    assert int(lines[-1].split()[1]) == steps
    prose = " ".join(page.replace("1,024", "1024").split())
    shown = re.search(r"evaluated at steps ([\d, and]+)\.", prose)
    assert shown and sorted(int(step) for step in re.findall(r"\d+", shown.group(1))) == sorted(evaluated)


def test_a_reproductions_wall_time_names_the_calls_made_with_the_present_values_apart(tmp_path):
    pytest.importorskip("mkdocs")
    import runpy

    section = runpy.run_path(str(DOCS / "hooks.py"), run_name="docs_hooks")["_findings_section"]
    folder = tmp_path / "reproduce_tiny"
    folder.mkdir()
    record = {"wall_time_s": 3 * 3600.0, "calls": 3, "wall_time_s_these_values": 3600.0, "calls_these_values": 1,
              "root_run_s": 600.0, "machine": {"cpu": "a CPU", "cores": 2}, "verdicts": {}, "findings": []}
    (folder / "findings.json").write_text(json.dumps(record))
    section.__globals__["DATA"] = tmp_path
    (line,) = [line for line in section("tiny") if line.startswith("Wall time")]
    assert line.startswith("Wall time 3 h 00 min over 3 call(s) (1 h 00 min in the 1 made with the preset's present")
    record.update(calls_these_values=3, wall_time_s_these_values=3 * 3600.0)
    (folder / "findings.json").write_text(json.dumps(record))
    (line,) = [line for line in section("tiny") if line.startswith("Wall time")]
    assert line.startswith("Wall time 3 h 00 min over 3 call(s) on a CPU (2 cores)")
