"""The sentences of a comparison, generated from its ``compare.json``: one sentence per claim, the numbers filled in.

``hf-treelang compare`` writes them into ``summary.md`` beside the table; a page that quotes the comparison quotes
these lines whole (between ``<!-- compare-summary -->`` and ``<!-- /compare-summary -->``), and
:func:`quoted_summary` reads such a block back, so that a test can hold the prose to the data it stands on. Every
number a sentence quotes is a field of ``compare.json`` (and a column of ``compare.csv``):

* per task and grammar: where each group's runs end — the closest BP_k at the last evaluation and the levels not told
  apart from it (:func:`hf_treelang.core.noise.told_apart` on the paired errors) —, with t_0 where every run ends at
  BP_0 told apart from the others, the final KL and the accuracy next to BP's (how close to BP_0's prediction the
  run is); which runs do not tell their last closest level apart from others, and how far the nearest level that is
  told apart lies, in paired standard errors;
* the order of the climb: the runs back at a BP_k above a level they had been closest to, beyond noise
  (``returns`` of each run, :func:`hf_treelang.analysis.compare.returns_up`), and the runs never closest to BP_0;
* the first group to reach each level (the smallest mean t_k among the groups whose every seed reached it);
* the learning-rate schedule each run recorded;
* and, from a re-run check (``rerun_check.json``, :func:`rerun_lines`), each re-trained run against its published
  one: the final KLs, how long the curves agree and, where the check kept every level, where each run ends.
"""

from __future__ import annotations

import math
import textwrap

TASK_TITLES = {"mlm": "masked leaf", "clm": "next leaf", "root": "root"}
BEGIN, END = "<!-- compare-summary -->", "<!-- /compare-summary -->"
ARCHITECTURE_NAMES = {"treelang": "TreeLang", "bert": "BERT", "roberta": "RoBERTa", "distilbert": "DistilBERT",
                      "gpt2": "GPT-2", "llama": "Llama", "rwkv": "RWKV", "electra": "ELECTRA", "mamba": "Mamba"}


def display_name(group: dict) -> str:
    """A group's name in prose: its architecture's (``GPT-2``), with what sets it apart where its label says."""
    name = ARCHITECTURE_NAMES.get(group["architecture"], group["architecture"])
    label = group.get("label") or group["architecture"]
    return name + label[len(group["architecture"]):] if label.startswith(group["architecture"]) else label


def _number(value: float, digits: int = 2) -> str:
    """``value`` to ``digits`` significant figures, thousands separated (``0.0059``, ``4,493``, ``1.2e-08``)."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    if abs(value) >= 10 ** digits:
        return f"{value:,.0f}"
    if abs(value) < 1e-4:
        return f"{value:.{digits - 1}e}"
    return f"{value:.{max(digits - 1 - math.floor(math.log10(abs(value))), 0)}f}"


def _spread(spread: dict, digits: int = 2) -> str:
    if spread.get("mean") is None:
        return "–"
    text = _number(spread["mean"], digits)
    return text if spread.get("std") is None else f"{text} ± {_number(spread['std'], 1)}"


def _steps(value) -> str:
    return f"{value:,.0f}"


def _and(items: list) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _levels(within: list | None, closest: int) -> list:
    return [k for k in within or [] if k != closest]


def end_state(run: dict) -> str:
    """Where a run ends: ``BP_1`` (told apart from every other level), ``BP_0 ≈ BP_1`` (not told apart from BP_1),
    ``BP_2 (errors unknown)`` (no paired errors at its last evaluation), ``no BP_k (no KL logged)``."""
    if not run["path_of_closest"]:
        return "no BP_k (no KL logged)"
    closest = run["path_of_closest"][-1]
    if run.get("within_noise_at_end") is None:
        return f"BP_{closest} (errors unknown)"
    others = _levels(run["within_noise_at_end"], closest)
    return f"BP_{closest}" + (" ≈ " + ", ".join(f"BP_{k}" for k in others) if others else "")


def at_bp0_told_apart(run: dict) -> bool:
    """Closest to BP_0 at the last evaluation and told apart from every other BP_k there."""
    return run["path_of_closest"][-1:] == [0] and run.get("within_noise_at_end") == [0]


def nearest_told_apart(run: dict) -> tuple | None:
    """``(k, gap / error)`` of the level nearest the last closest one, in paired standard errors, among the levels
    told apart from it; None without paired errors or such a level."""
    within = run.get("within_noise_at_end")
    if within is None or not run["path_of_closest"]:
        return None
    closest = run["path_of_closest"][-1]
    errors, kls = run.get("kl_gap_se_at_end") or {}, run.get("kl_at_end") or {}
    ratios = []
    for key, error in errors.items():
        k = int(key)
        if k in within or error in (None, 0) or kls.get(key) is None or kls.get(str(closest)) is None:
            continue
        ratios.append(((kls[key] - kls[str(closest)]) / error, k))
    return (min(ratios)[1], min(ratios)[0]) if ratios else None


def _panels(payload: dict) -> list:
    """``[(task, grammar, groups, runs)]`` in the order of first appearance."""
    runs = {run["path"]: run for run in payload["runs"]}
    panels: dict = {}
    for group in payload["groups"]:
        panels.setdefault((group["task"], group["grammar"]), []).append(group)
    return [(task, grammar, groups, [runs[path] for group in groups for path in group["runs"]])
            for (task, grammar), groups in panels.items()]


def _panel_title(task: str, grammar: str, grammars: int) -> str:
    title = TASK_TITLES.get(task, task)
    return f"{title}, {grammar}" if grammars > 1 else title


def _accuracy(group: dict) -> str:
    """``accuracy 0.99 ± 0.01 where BP_0 has 1.00`` on the lowest k_test (BP_0's own test set)."""
    levels = sorted(group.get("accuracy") or {}, key=int)
    if not levels or (group["accuracy"][levels[0]] or {}).get("mean") is None:
        return ""
    bp = (group.get("bp_accuracy") or {}).get(levels[0]) or {}
    reference = f" where BP_{group['k_train']} has {bp['mean']:.3f}" if bp.get("mean") is not None else ""
    spread = group["accuracy"][levels[0]]
    shown = f"{spread['mean']:.3f}" + (f" ± {spread['std']:.3f}" if spread.get("std") is not None else "")
    return f"; accuracy {shown}{reference}"


def _group_phrase(group: dict, members: list) -> str:
    """Where a group's runs end (:func:`end_state`), with t_0 where each ends told apart at BP_0, the final KL to
    BP_{k_train} and the accuracy next to BP's: how close to BP_0's prediction the closest BP_k is."""
    name, n = display_name(group), len(members)
    numbers = f"final KL to BP_{group['k_train']} {_spread(group['final_kl_matched'])}{_accuracy(group)}"
    if all(at_bp0_told_apart(run) for run in members):
        t0 = (group["climb_times"].get("0") or {}).get("mean")
        numbers = (f"t_0 = {_steps(t0)} steps; " if t0 is not None else "") + numbers
    states = [end_state(run) for run in members]
    if len(set(states)) == 1:
        return f"{name} at {states[0]}" + (f" in {n} of {n} seeds" if n > 1 else "") + f" ({numbers})"
    seeds = " / ".join(str(run["seed"]) for run in members)
    return f"{name} at {' / '.join(states)} (seeds {seeds}; {numbers})"


def _ties(members: list, groups: dict) -> str | None:
    tied = [run for run in members if run.get("within_noise_at_end") is not None and run["path_of_closest"]
            and _levels(run["within_noise_at_end"], run["path_of_closest"][-1])]
    if not tied:
        return None
    shown = []
    for run in tied:
        nearest = nearest_told_apart(run)
        beyond = f"; BP_{nearest[0]} at {nearest[1]:.1f} errors" if nearest else ""
        shown.append(f"{display_name(groups[run['path']])} seed {run['seed']} ({end_state(run)}{beyond})")
    verb = "does not tell its" if len(tied) == 1 else "do not tell their"
    return (f"{len(tied)} of {len(members)} runs {verb} last closest level from another within two paired standard "
            f"errors: {'; '.join(shown)}.")


def panel_lines(payload: dict) -> list:
    """One bullet per task and grammar: who reaches BP_0, where the others end, and the ties at the end."""
    groups = {path: group for group in payload["groups"] for path in group["runs"]}
    panels = _panels(payload)
    per_task = {task: sum(1 for t, *_ in panels if t == task) for task, *_ in panels}
    lines = []
    for task, grammar, members_groups, members in panels:
        steps = sorted({group["steps"] for group in members_groups})
        title = _panel_title(task, grammar, per_task[task])
        shown = "" if per_task[task] > 1 else f"{grammar}; "
        head = (f"**{title[0].upper()}{title[1:]}** ({shown}{'/'.join(_steps(s) for s in steps)} steps; "
                f"{len(members)} runs): ")
        phrases = [_group_phrase(group, [run for run in members if run["path"] in group["runs"]])
                   for group in members_groups]
        ties = _ties(members, groups)
        lines.append(f"- {head}{'; '.join(phrases)}." + (f" {ties}" if ties else ""))
    return lines


def order_line(payload: dict) -> str:
    """How the runs climb: those back at a higher BP_k beyond noise, and those never closest to BP_0."""
    groups = {path: group for group in payload["groups"] for path in group["runs"]}
    panels = _panels(payload)
    per_task = {task: sum(1 for t, *_ in panels if t == task) for task, *_ in panels}
    runs = payload["runs"]
    back, shown = [run for run in runs if run.get("returns")], []
    for run in back:
        title = _panel_title(run["task"], run["grammar"], per_task[run["task"]])
        moves: dict = {}
        for entry in run["returns"]:
            moves.setdefault((entry["level"], entry["below"]), []).append(entry)
        parts = []
        for (level, below), entries in moves.items():
            steps = _and([_steps(entry["step"]) for entry in entries])
            errors = _and([f"{entry['gap'] / entry['error']:.1f}" for entry in entries])
            parts.append(f"at BP_{level} above BP_{below} at step{'s' if len(entries) > 1 else ''} {steps} "
                         f"(by {errors} standard errors)")
        shown.append(f"{display_name(groups[run['path']])} {title} seed {run['seed']} {', '.join(parts)}")
    never = [run for run in runs if 0 not in run["path_of_closest"]]
    steady = len(runs) - len(back)
    text = (f"- **The order of the climb**: {steady} of {len(runs)} runs are never back at a BP_k above a level they "
            f"had been closest to, beyond the noise of the KLs")
    text += f"; {len(back)} {'is' if len(back) == 1 else 'are'}: {'; '.join(shown)}." if back else "."
    return text + f" {len(never)} of {len(runs)} runs are never closest to BP_0."


def leaders_line(payload: dict) -> str:
    """Per task and grammar and per level below the top: the group(s) of the smallest mean t_k among those whose
    every seed reached the level."""
    panels = _panels(payload)
    per_task = {task: sum(1 for t, *_ in panels if t == task) for task, *_ in panels}
    parts = []
    for task, grammar, members_groups, _ in panels:
        levels = sorted({int(k) for group in members_groups for k in group["climb_times"]}, reverse=True)[1:]
        shown = []
        for k in levels:
            reached = [(group["climb_times"][str(k)]["mean"], display_name(group)) for group in members_groups
                       if (group["climb_times"].get(str(k)) or {}).get("runs") == len(group["seeds"])]
            if not reached:
                shown.append(f"BP_{k} none")
                continue
            best = min(time for time, _ in reached)
            names = sorted(name for time, name in reached if time == best)
            shown.append(f"BP_{k} {_and(names)} ({_steps(best)})")
        parts.append(f"{_panel_title(task, grammar, per_task[task])}: {', '.join(shown)}")
    return ("- **First to each level** (the smallest mean t_k, in steps, among the groups whose every seed reached "
            f"the level; the top level is every run's at step 0): {'; '.join(parts)}.")


def schedule_line(payload: dict) -> str:
    """The learning-rate schedule each run recorded (``lr_scheduler_type``), counted per task."""
    counts: dict = {}
    for run in payload["runs"]:
        schedule = ((run.get("setting") or {}).get("training_args") or {}).get("lr_scheduler_type")
        counts.setdefault(str(schedule), {}).setdefault(run["task"], 0)
        counts[str(schedule)][run["task"]] += 1
    parts = [f"{schedule} for " + _and([f"the {n} {TASK_TITLES.get(task, task)} runs" for task, n in tasks.items()])
             for schedule, tasks in counts.items()]
    return f"- **Schedules** (each run's recorded `lr_scheduler_type`): {'; '.join(parts)}."


def summary_lines(payload: dict) -> list:
    """Every sentence of a comparison (``compare.json`` as loaded), one bullet each."""
    return [*panel_lines(payload), order_line(payload), leaders_line(payload), schedule_line(payload)]


def _agree_until(steps: list, first: list, second: list, tolerance: float = 1e-4) -> str:
    """The last evaluation step up to which two KL curves agree within ``tolerance`` nats, in words."""
    apart = next((i for i, (a, b) in enumerate(zip(first, second)) if abs(a - b) > tolerance), None)
    if apart is None:
        return f"the two KL curves agree within {tolerance:g} nats at every evaluation"
    if apart == 0:
        return f"the two KL curves differ by more than {tolerance:g} nats from the first evaluation"
    return f"the two KL curves agree within {tolerance:g} nats up to step {_steps(steps[apart - 1])}"


def rerun_lines(record: dict) -> list:
    """One bullet per row of a re-run check (``rerun_check.json``): the re-trained run's final KL to BP_{k_train}
    against the published one's, how long their curves agree, and — for a row that recorded every level
    (:func:`hf_treelang.analysis.compare.rerun_check_row`) — where each ends (:func:`end_state`, from the paired
    errors of its last evaluation). A row that recorded the KL to BP_0 only says that where the re-trained run ends is
    not known from it."""
    lines = []
    for row in record["rows"]:
        if "published" in row:
            published, rerun, k = row["published"], row["rerun"], str(row["k_train"])
            first, second = published["kl_at_end"][k], rerun["kl_at_end"][k]
            agree = _agree_until(row["steps"], published["kl_bp"][k], rerun["kl_bp"][k])
            ends = f"at the last evaluation {end_state(rerun)} re-trained, {end_state(published)} published"
            name = row["name"]
        else:  # a check that kept the KL to BP_0 only
            k, first, second = "0", row["published_final_kl_bp_k0"], row["rerun_final_kl_bp_k0"]
            agree = _agree_until(row["steps"], row["published_kl_bp_k0"], row["rerun_kl_bp_k0"])
            ends = "its other levels were not recorded, so where the re-trained run ends is not known from it"
            name = row["run"]
        lines.append(f"- **{name}**: final KL to BP_{k} {_number(second)} re-trained against {_number(first)} "
                     f"published (difference {_number(abs(second - first))}); {agree}; {ends}.")
    return lines


def quote(text: str, lines: list, name: str = "compare-summary", width: int = 120) -> str:
    """``text`` (a page) with its ``<!-- name -->`` block replaced by ``lines``, each bullet wrapped at ``width``
    (continuations indented two spaces, broken at spaces only, so that :func:`quoted_summary` reads the lines back
    whole). Raises a ValueError when the page has no such block."""
    begin, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    if begin not in text or end not in text:
        raise ValueError(f"the page quotes no {name} (no {begin} ... {end} block)")
    wrapped = [textwrap.fill(line, width, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False)
               for line in lines]
    head, rest = text.split(begin, 1)
    return head + begin + "\n" + "\n".join(wrapped) + "\n" + end + rest.split(end, 1)[1]


def quoted_summary(text: str, name: str = "compare-summary") -> list:
    """The bullets a page quotes between ``<!-- name -->`` and ``<!-- /name -->`` (:data:`BEGIN`, :data:`END` for
    the summary; ``rerun-check`` for :func:`rerun_lines`), a bullet's wrapped lines joined, for comparing with the
    generated lines. Raises a ValueError when the page has no such block."""
    begin, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    if begin not in text or end not in text:
        raise ValueError(f"the page quotes no {name} (no {begin} ... {end} block)")
    block = text.split(begin, 1)[1].split(end, 1)[0]
    bullets: list = []
    for line in block.strip().splitlines():
        if line.startswith("- "):
            bullets.append(line)
        elif line.strip() and bullets:
            bullets[-1] += " " + line.strip()
    return bullets


__all__ = ["ARCHITECTURE_NAMES", "BEGIN", "END", "TASK_TITLES", "at_bp0_told_apart", "display_name", "end_state",
           "leaders_line", "nearest_told_apart", "order_line", "panel_lines", "quote", "quoted_summary", "rerun_lines",
           "schedule_line", "summary_lines"]
