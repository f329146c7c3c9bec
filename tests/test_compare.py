"""``hf-treelang compare`` pools only the seeds of one setting, says what it kept apart, counts what each cell
averages, and gives every run its learning rate and the command that trains it alone."""

import json
import os
import shutil
from pathlib import Path

import pytest

from hf_treelang import cli
from hf_treelang.analysis.compare import (RunRow, closest_paths, group_rows, markdown_table, plot_comparison,
                                          read_run)
from hf_treelang.analysis.dynamics import learning_dynamics
from hf_treelang.train.loop import train_together
from hf_treelang.train.run import runs_from_command_line
from tiny_run import TINY, run_tiny


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Tiny root runs: seeds 0 and 1 of one setting, seed 0 of two other settings (a tenfold rate and Muon, a label
    smoothing of 0.1) and seed 0 on another grammar."""
    root = tmp_path_factory.mktemp("compare")
    folders = {}
    for name, extra in {"adam-s0": ["--seed", "0"], "adam-s1": ["--seed", "1"],
                        "muon-s0": ["--seed", "0", "--optim", "muon", "--learning_rate", "0.01"],
                        "smooth-s0": ["--seed", "0", "--label_smoothing_factor", "0.1"],
                        "grammar1-s0": ["--seed", "0", "--grammar_seed", "1"]}.items():
        run_tiny("root", root / name, "--num_checkpoints", "0", *extra)
        folders[name] = root / name
    return folders


def test_runs_of_different_settings_are_not_pooled_and_the_console_says_so(runs, tmp_path, capsys):
    folders = [runs[name] for name in ("adam-s0", "muon-s0", "smooth-s0", "adam-s1")]
    assert cli.main(["compare", *map(str, folders), "--out", str(tmp_path / "cmp")]) == 0
    printed = capsys.readouterr().out
    groups = json.loads((tmp_path / "cmp" / "compare.json").read_text())["groups"]
    assert [group["seeds"] for group in groups] == [[0, 1], [0], [0]]  # only the two seeds of one setting pool
    fields = {name.split(".")[-1] for name in groups[0]["differs_in"]}
    assert fields == {"optim", "learning_rate", "label_smoothing_factor"}
    labels = [group["label"] for group in groups]
    assert len(set(labels)) == 3 and all(label.startswith("treelang (") for label in labels)
    assert "optim=muon" in labels[1] and "learning_rate=0.01" in labels[1]
    assert "label_smoothing_factor=0.1" in labels[2]
    assert "not pooled: the treelang root runs differ in" in printed and "so they are 3 groups" in printed
    table = (tmp_path / "cmp" / "compare.md").read_text()
    assert "| root | q=3 ℓ=2 σ=1.0 seed 0 | treelang (" in table and "| 2 |" in table


def test_every_run_carries_its_rate_and_the_command_that_trains_it_alone(runs, tmp_path):
    assert cli.main(["compare", str(runs["muon-s0"]), "--out", str(tmp_path / "cmp")]) == 0
    (record,) = json.loads((tmp_path / "cmp" / "compare.json").read_text())["runs"]
    assert record["learning_rate"] == 0.01
    command = record["command"]
    assert command.startswith("python training/run_root.py ") and "--optim muon" in command
    assert "--learning_rate 0.01" in command and f"--output_dir {runs['muon-s0']}" in command
    header, line = (tmp_path / "cmp" / "compare.csv").read_text().splitlines()
    assert "command" in header.split(",") and "--optim muon" in line


def test_runs_of_another_grammar_are_their_own_group_and_panel_labelled_by_the_grammar(runs, tmp_path, capsys):
    folders = [runs["adam-s0"], runs["grammar1-s0"], runs["adam-s1"]]
    assert cli.main(["compare", *map(str, folders), "--out", str(tmp_path / "cmp")]) == 0
    assert "not pooled" not in capsys.readouterr().out  # a grammar is a panel of its own, not a hidden setting
    groups = json.loads((tmp_path / "cmp" / "compare.json").read_text())["groups"]
    assert [group["seeds"] for group in groups] == [[0, 1], [0]]
    assert [group["label"] for group in groups] == ["treelang", "treelang"]
    assert [group["grammar"].split()[-1] for group in groups] == ["0", "1"]  # the grammar seed, in the table too
    assert "| root | q=3 ℓ=2 σ=1.0 seed 1 | treelang |" in (tmp_path / "cmp" / "compare.md").read_text()
    figure = plot_comparison([read_run(folder) for folder in folders])
    assert len(figure.axes) == 4  # two panels (KL and closest BP_k) per grammar
    assert [axis.get_title().splitlines()[-1] for axis in figure.axes[:2]] == [g["grammar"] for g in groups]


def test_levels_not_told_apart_from_the_last_closest_bp_are_recorded_and_shown_beside_its_path(runs, tmp_path):
    names = ("adam-s0", "adam-s1")
    assert cli.main(["compare", *(str(runs[name]) for name in names), "--out", str(tmp_path / "cmp")]) == 0
    saved = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    for record, name in zip(saved["runs"], names):
        within = learning_dynamics(runs[name]).within_noise_of_closest()[-1]  # the callback logged its errors
        assert record["within_noise_at_end"] == within and record["path_of_closest"][-1] in within
    assert saved["groups"][0]["within_noise_at_end"] == [record["within_noise_at_end"] for record in saved["runs"]]
    header, *lines = (tmp_path / "cmp" / "compare.csv").read_text().splitlines()
    assert "within_noise_at_end" in header.split(",")
    shown = closest_paths({"paths_of_closest": [[4, 3, 2, 1], [4, 3, 2, 1, 0], [4, 3]],
                           "within_noise_at_end": [[0, 1, 2], [0], None]})
    assert shown == "4 → 3 → 2 → 1 (≈ 0, 2); 4 → 3 → 2 → 1 → 0; 4 → 3"
    assert closest_paths({"paths_of_closest": [[4, 2, 0]]}) == "4 → 2 → 0"  # a compare.json written before


def _row(seed: int, climb: dict, final: float | None) -> RunRow:
    return RunRow(path=f"run{seed}", task="mlm", architecture="bert", seed=seed, group="g", setting={}, grammar="g",
                  learning_rate=1e-3, command=None, parameters=10, steps=100, steps_per_second=None,
                  stacked_members=1, k_train=0,
                  path_of_closest=[4, 3], within_noise_at_end=None, climb_times=climb, final_kl_matched=final,
                  accuracy={0: 0.5},
                  bp_accuracy={0: 0.7}, mass_on_special_tokens=None, excess_loss=None, dynamics=None)


def test_a_cell_averaging_fewer_runs_than_its_group_says_how_many():
    rows = [_row(0, {4: 0, 3: 10, 2: 2000}, 0.2), _row(1, {4: 0, 3: 20, 2: 1800}, 0.3),
            _row(2, {4: 0, 3: 30, 2: None}, None)]
    (group,) = group_rows(rows)
    assert group["climb_times"][2]["runs"] == 2 and group["climb_times"][3]["runs"] == 3
    line = markdown_table([group]).splitlines()[-1]
    assert "1900 (2 of 3)" in line and "0, 20, 1900 (2 of 3)" in line
    assert "0.250 ± 0.071 (2 of 3)" in line  # the final KL of the two runs that have one


def test_a_stacked_ensembles_steps_per_second_say_how_many_runs_they_trained_at_once(runs, tmp_path):
    """A stacked ensemble's member records the stacked model's size; a member written before that record counts
    the runs given that name its ensemble folder; a run trained alone is 1."""
    members, ensemble = runs_from_command_line("root", TINY + ["--output_dir", str(tmp_path / "ens"), "--num_checkpoints",
                                                                "0", "--learning_rate", "0.002", "--ensemble_seeds",
                                                                "0", "1"])
    train_together(members, mode="stacked", ensemble_dir=ensemble.output_dir)
    stacked = [tmp_path / "ens" / "members" / name for name in ("seed0-k0", "seed1-k0")]
    assert [json.loads((f / "run_complete.json").read_text())["stacked_members"] for f in stacked] == [2, 2]
    named = [json.loads((f / "run_complete.json").read_text())["ensemble"] for f in stacked]
    assert named == [os.path.join("..", "..")] * 2  # relative to the member's folder: the folders move together
    assert all((f / e).resolve() == Path(ensemble.output_dir).resolve() for f, e in zip(stacked, named))
    alone, _ = runs_from_command_line("root", TINY + ["--output_dir", str(tmp_path / "tmp-ens"), "--num_checkpoints",
                                                      "0", "--ensemble_seeds", "0", "1"])
    train_together(alone, mode="stacked")  # a temporary ensemble folder, removed at the end: not named
    records = [json.loads((Path(run.output_dir) / "run_complete.json").read_text()) for run in alone]
    assert [r["stacked_members"] for r in records] == [2, 2] and not any("ensemble" in r for r in records)
    older, gone = [], "/tmp/hf-treelang-ensemble-gone"
    for name in ("adam-s0", "adam-s1"):  # as written before the count: an ensemble path (absolute or not), no count
        shutil.copytree(runs[name], tmp_path / name)
        marker = tmp_path / name / "run_complete.json"
        record = json.loads(marker.read_text())
        path = gone if name == "adam-s0" else os.path.relpath(gone, tmp_path / name)
        marker.write_text(json.dumps({**record, "ensemble": path}))
        older.append(tmp_path / name)
    alone = runs["smooth-s0"]
    assert cli.main(["compare", *map(str, [*stacked, *older, alone]), "--out", str(tmp_path / "cmp")]) == 0
    records = json.loads((tmp_path / "cmp" / "compare.json").read_text())["runs"]
    assert [record["stacked_members"] for record in records] == [2, 2, 2, 2, 1]
    table = (tmp_path / "cmp" / "compare.md").read_text().splitlines()[2:]  # the ensemble's, the older, alone
    assert len(table) == 3 and "(×2 stacked)" in table[0] and "stacked" not in table[2]
    assert "(×≥2 stacked)" in table[1]  # counted among the runs given: members not given are not counted
    header = (tmp_path / "cmp" / "compare.csv").read_text().splitlines()[0].split(",")
    assert "stacked_members" in header and "stacked_at_least" in header
    assert cli.main(["compare", str(older[0]), "--out", str(tmp_path / "alone")]) == 0  # one member without its peers
    assert "(×≥2 stacked)" in (tmp_path / "alone" / "compare.md").read_text().splitlines()[2]


def test_the_same_run_given_twice_is_not_pooled_as_two_seeds(runs, tmp_path):
    shutil.copytree(runs["adam-s0"], tmp_path / "again")
    with pytest.raises(ValueError, match=r"have the same setting and the same seed \(0\): one run trained twice"):
        group_rows([read_run(runs["adam-s0"]), read_run(runs["adam-s1"]), read_run(tmp_path / "again")])
    assert cli.main(["compare", str(runs["adam-s0"]), str(tmp_path / "again"), "--out", str(tmp_path / "cmp")]) != 0
    assert not (tmp_path / "cmp").exists()


UNSET = object()  # a field the record lacks


def _rewrite(folder: Path, name: str, record: dict) -> None:
    """Replace a run folder's JSON file ``name`` with ``record``, its size in the completion marker with it."""
    (folder / name).write_text(json.dumps(record))
    marker = json.loads((folder / "run_complete.json").read_text())
    marker["files"][name] = (folder / name).stat().st_size
    (folder / "run_complete.json").write_text(json.dumps(marker))


def _edited(run, folder, **sections) -> Path:
    """A copy of ``run`` in ``folder`` whose ``run_config.json`` has the given fields of each section (``data_args``,
    ``model_args``, ``training_args``) replaced, or removed where the value is :data:`UNSET`."""
    shutil.copytree(run, folder)
    record = json.loads((folder / "run_config.json").read_text())
    for section, values in sections.items():
        for name, value in values.items():
            if value is UNSET:
                record[section].pop(name, None)
            else:
                record[section][name] = value
    _rewrite(folder, "run_config.json", record)
    return folder


@pytest.mark.parametrize("field, value", [("torch_compile_mode", "max-autotune"), ("torch_compile_backend", "eager"),
                                          ("use_cpu", True)])
def test_runs_that_differ_in_a_training_field_outside_the_identity_are_not_pooled(runs, tmp_path, field, value):
    """A field the run identity leaves out but that may change what is trained (a compiler mode or backend, the
    device) keeps two runs apart like any other setting."""
    other = _edited(runs["adam-s1"], tmp_path / "other", training_args={field: value})
    groups = group_rows([read_run(runs["adam-s0"]), read_run(other)])
    assert [group["seeds"] for group in groups] == [[0], [1]]
    assert [name.split(".")[-1] for name in groups[0]["differs_in"]] == [field]


@pytest.mark.parametrize("section, field, value", [
    ("training_args", "qk_learning_rate_multiplier", UNSET),  # recorded before the field existed: its default 1.0
    ("training_args", "qk_learning_rate_multiplier", None),
    ("training_args", "learning_rate", 1),  # the same number as the other run's 1.0
    ("data_args", "use_dataset_builder", True),  # the builder and sample_trees draw the same bytes
    ("data_args", "k_test", [0, 1, 2]),  # what k_test None means at depth 2
    ("model_args", "num_hidden_layers", None),  # one layer per level: the other run's 2 at depth 2
    ("training_args", "cpu_threads", 2),  # threads, logging: cannot change what is trained
    ("training_args", "logging_steps", 7),
])
def test_runs_whose_records_differ_only_in_how_an_equal_setting_is_written_pool_as_seeds(runs, tmp_path, section,
                                                                                         field, value):
    first = _edited(runs["adam-s0"], tmp_path / "first", training_args={"learning_rate": 1.0})
    edits = {"training_args": {"learning_rate": 1.0}}
    edits.setdefault(section, {})[field] = value
    other = _edited(runs["adam-s1"], tmp_path / "other", **edits)
    (group,) = group_rows([read_run(first), read_run(other)])
    assert group["seeds"] == [0, 1] and group["differs_in"] == []


def test_a_relative_config_name_identifies_the_model_its_run_trained_not_the_file_it_names_today(runs, tmp_path,
                                                                                                monkeypatch):
    """Two runs started with ``--config_name cfg.json`` from different folders trained different models: read from a
    third folder, the same relative name must not pool them as seeds."""
    first = _edited(runs["adam-s0"], tmp_path / "first", model_args={"config_name": "cfg.json"})
    other = _edited(runs["adam-s1"], tmp_path / "other", model_args={"config_name": "cfg.json"})
    config = json.loads((other / "config.json").read_text())
    _rewrite(other, "config.json", {**config, "hidden_act": "gelu"})
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cfg.json").write_text((first / "config.json").read_text())
    groups = group_rows([read_run(first), read_run(other)])
    assert [group["seeds"] for group in groups] == [[0], [1]]
    assert [name.split(".")[-1] for name in groups[0]["differs_in"]] == ["config_name"]
    same = _edited(runs["adam-s1"], tmp_path / "same", model_args={"config_name": "elsewhere/cfg.json"})
    (group,) = group_rows([read_run(first), read_run(same)])  # the same model, named from another folder
    assert group["seeds"] == [0, 1]


def test_runs_on_a_grammar_file_pool_by_the_grammars_content_not_the_files_name(runs, tmp_path):
    """Two runs trained on different grammars saved under one name are two settings; one grammar saved under two
    names is one setting, its seeds pooled."""
    from hf_treelang import Grammar

    def on_file(run, folder, name, grammar_seed):
        edited = _edited(run, folder, data_args={"grammar_file": name})
        grammar = Grammar.random(3, 1.0, grammar_seed)
        (edited / "grammar.json").unlink()
        grammar.save(edited / "grammar.json")
        marker = json.loads((edited / "run_complete.json").read_text())
        marker["files"]["grammar.json"] = (edited / "grammar.json").stat().st_size
        (edited / "run_complete.json").write_text(json.dumps(marker))
        return read_run(edited)

    first = on_file(runs["adam-s0"], tmp_path / "a", "g.json", 1)
    other = on_file(runs["adam-s1"], tmp_path / "b", "g.json", 2)
    groups = group_rows([first, other])
    assert [group["seeds"] for group in groups] == [[0], [1]]
    renamed = on_file(runs["adam-s1"], tmp_path / "c", "elsewhere/mine.json", 1)
    (group,) = group_rows([first, renamed])
    assert group["seeds"] == [0, 1]


@pytest.mark.parametrize("inside", ["", "figures"])
def test_an_out_folder_that_is_or_lies_inside_a_run_is_refused_before_anything_is_written(runs, tmp_path, capsys,
                                                                                       inside):
    first = shutil.copytree(runs["adam-s0"], tmp_path / "a")
    before = {path.name: path.read_bytes() for path in first.iterdir() if path.is_file()}
    out = first / inside if inside else first
    assert cli.main(["compare", str(first), str(runs["adam-s1"]), "--out", str(out)]) == 2
    said = capsys.readouterr().err
    assert f"is {'inside ' if inside else ''}the compared run {str(first)!r}" in said and said.count("\n") == 1
    assert {path.name: path.read_bytes() for path in first.iterdir() if path.is_file()} == before
    assert not (first / "figures").exists()
    other = runs["muon-s0"]  # a run folder that is not compared is a run's folder all the same
    assert cli.main(["compare", str(first), "--out", str(other / "cmp")]) == 2
    assert "the run or model folder" in capsys.readouterr().err and not (other / "cmp").exists()


def test_load_dataset_of_a_compare_folder_returns_its_current_rows_whatever_it_held_before(runs, tmp_path):
    """datasets' cache is keyed by the card, not by the files' content: the card's config is named by the table's
    content, so a rewritten folder, or another folder of the same name, never serves a table cached before."""
    import datasets

    cache = str(tmp_path / "cache")
    names = ("adam-s0", "adam-s1", "smooth-s0")
    assert cli.main(["compare", *(str(runs[name]) for name in names), "--out", str(tmp_path / "one" / "compare")]) == 0
    assert datasets.load_dataset(str(tmp_path / "one" / "compare"), cache_dir=cache)["train"].num_rows == 3
    assert cli.main(["compare", str(runs["muon-s0"]), "--out", str(tmp_path / "one" / "compare")]) == 0
    table = datasets.load_dataset(str(tmp_path / "one" / "compare"), cache_dir=cache)["train"]
    assert list(table["run"]) == [str(runs["muon-s0"])]
    assert cli.main(["compare", *(str(runs[name]) for name in names[:2]), "--out",
                     str(tmp_path / "two" / "compare")]) == 0
    table = datasets.load_dataset(str(tmp_path / "two" / "compare"), cache_dir=cache)["train"]
    assert list(table["run"]) == [str(runs[name]) for name in names[:2]]


def _dynamics(kl: dict, kl_se: dict, kl_gap_se: dict | None = None) -> "DynamicsResult":
    from hf_treelang.analysis.dynamics import DynamicsResult
    import numpy as np

    steps = np.array([0, 10, 20, 40, 80][:len(next(iter(kl.values())))])
    return DynamicsResult(steps=steps, epochs=np.full(len(steps), np.nan), accuracy={}, bp_accuracy={},
                          kl={k: np.array(v, dtype=float) for k, v in kl.items()},
                          kl_se={k: np.array(v, dtype=float) for k, v in kl_se.items()},
                          kl_gap_se={k: np.array(v, dtype=float) for k, v in (kl_gap_se or {}).items()})


def test_a_return_to_a_higher_level_is_claimed_only_beyond_the_noise_of_the_kls():
    """Closest to BP_2, then BP_1, then BP_2 again at steps 20 and 40: a return where KL_2 lies below KL_1 by more
    than the family-wise z of the four evaluations after the first (about 2.53) times the error of the gap — the
    bound SE_1 + SE_2, or the paired error where it was logged."""
    from hf_treelang.analysis.compare import returns_up
    from hf_treelang.core.noise import family_z

    assert 2.25 < family_z(4) < 5
    kl = {2: [0.5, 0.40, 0.32, 0.20, 0.30], 1: [0.6, 0.30, 0.365, 0.30, 0.10]}  # gaps 0.045 and 0.1 at steps 20, 40
    (found,) = returns_up(_dynamics(kl, {2: [0.01] * 5, 1: [0.01] * 5}))  # 2.25 and 5 errors of 0.02
    assert found == {"step": 40, "level": 2, "below": 1, "gap": pytest.approx(0.1), "error": pytest.approx(0.02),
                     "paired": False}
    assert returns_up(_dynamics(kl, {2: [0.03] * 5, 1: [0.03] * 5})) == []  # 1.67 errors at most: within noise
    paired = returns_up(_dynamics(kl, {2: [0.03] * 5, 1: [0.03] * 5}, {1: [0.0, 0.0, 0.001, 0.001, 0.0],
                                                                        2: [0.0, 0.001, 0.0, 0.0, 0.001]}))
    assert [(entry["step"], entry["paired"], entry["error"]) for entry in paired] == [(20, True, 0.001),
                                                                                      (40, True, 0.001)]


def _summary_payload() -> dict:
    """A masked-leaf comparison as compare.json holds it: TreeLang seeds 0 and 1, BERT seed 0 (depth 2)."""
    def run(path, architecture, seed, path_of_closest, within, kl, errors, returns=()):
        return {"path": path, "task": "mlm", "grammar": "g", "architecture": architecture, "seed": seed,
                "path_of_closest": path_of_closest, "within_noise_at_end": within,
                "kl_at_end": dict(zip("012", kl)), "kl_gap_se_at_end": dict(zip("012", errors)),
                "returns": list(returns), "setting": {"training_args": {"lr_scheduler_type": "cosine"}}}

    back = {"step": 67, "level": 2, "below": 1, "gap": 0.02, "error": 0.001, "paired": False}
    runs = [run("t0", "treelang", 0, [2, 1, 2, 0], [0, 1], [0.050, 0.052, 0.086], [0.0, 0.003, 0.01], [back]),
            run("t1", "treelang", 1, [2, 1], [1], [0.070, 0.060, 0.090], [0.002, 0.0, 0.01]),
            run("b0", "bert", 0, [2], [0, 1, 2], [0.081, 0.080, 0.079], [0.005, 0.004, 0.0])]

    def times(*values):
        present = [v for v in values if v is not None]
        return {"mean": sum(present) / len(present) if present else None, "std": None, "runs": len(present)}

    spread = {"mean": 0.06, "std": 0.014, "runs": 2}
    groups = [{"task": "mlm", "grammar": "g", "architecture": "treelang", "label": "treelang", "seeds": [0, 1],
               "runs": ["t0", "t1"], "steps": 4096, "k_train": 0, "final_kl_matched": spread,
               "accuracy": {"0": {"mean": 0.65, "std": 0.01, "runs": 2}, "1": {"mean": 0.6, "std": 0.01, "runs": 2}},
               "bp_accuracy": {"0": {"mean": 0.7, "std": 0.0, "runs": 2}},
               "climb_times": {"2": times(0, 0), "1": times(40, 30), "0": times(80, None)}},
              {"task": "mlm", "grammar": "g", "architecture": "bert", "label": "bert", "seeds": [0], "runs": ["b0"],
               "steps": 4096, "k_train": 0, "final_kl_matched": {"mean": 0.081, "std": None, "runs": 1},
               "climb_times": {"2": times(0), "1": times(None), "0": times(None)}}]
    return {"groups": groups, "runs": runs}


def test_the_sentences_say_what_the_comparisons_numbers_say():
    from hf_treelang.analysis.compare_summary import summary_lines

    panel, order, leaders, schedules = summary_lines(_summary_payload())
    assert panel.startswith("- **Masked leaf** (g; 4,096 steps; 3 runs): TreeLang at BP_0 ≈ BP_1 / BP_1 (seeds 0 / 1; "
                            "final KL to BP_0 0.060 ± 0.01; accuracy 0.650 ± 0.010 where BP_0 has 0.700); BERT at "
                            "BP_2 ≈ BP_0, BP_1 (final KL to BP_0 0.081).")
    # two runs tie; of TreeLang seed 0's levels, BP_2 is told apart, (0.086 - 0.050) / 0.01 = 3.6 errors away
    assert panel.endswith("2 of 3 runs do not tell their last closest level from another within two paired standard "
                          "errors: TreeLang seed 0 (BP_0 ≈ BP_1; BP_2 at 3.6 errors); BERT seed 0 (BP_2 ≈ BP_0, "
                          "BP_1).")
    assert order == ("- **The order of the climb**: 2 of 3 runs are never back at a BP_k above a level they had been "
                     "closest to, beyond the noise of the KLs; 1 is: TreeLang masked leaf seed 0 at BP_2 above BP_1 at "
                     "step 67 (by 20.0 standard errors). 2 of 3 runs are never closest to BP_0.")
    assert leaders.endswith("masked leaf: BP_1 TreeLang (35), BP_0 none.")  # BERT never reached BP_1; TreeLang 1 of 2
    assert schedules == "- **Schedules** (each run's recorded `lr_scheduler_type`): cosine for the 3 masked leaf runs."
    payload = _summary_payload()
    payload["runs"][2].update(path_of_closest=[], within_noise_at_end=None, kl_at_end={}, kl_gap_se_at_end={})
    assert "BERT at no BP_k (no KL logged)" in summary_lines(payload)[0]  # a run that logged no KL is said so


def test_compare_writes_the_sentences_its_compare_json_gives_and_a_rerun_check_row_per_run_trained_twice(runs,
                                                                                                        tmp_path):
    from hf_treelang.analysis.compare import rerun_check_row
    from hf_treelang.analysis.compare_summary import quoted_summary, rerun_lines, summary_lines

    assert cli.main(["compare", str(runs["adam-s0"]), str(runs["adam-s1"]), "--out", str(tmp_path / "cmp")]) == 0
    payload = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert (tmp_path / "cmp" / "summary.md").read_text().splitlines() == summary_lines(payload)
    page = "\n".join(["# a page", "<!-- compare-summary -->", *summary_lines(payload), "<!-- /compare-summary -->"])
    assert quoted_summary(page) == summary_lines(payload)
    again = _edited(runs["adam-s0"], tmp_path / "again", training_args={"cpu_threads": 2})  # the same run, re-trained
    row = rerun_check_row(runs["adam-s0"], again)
    assert row["name"] == "TreeLang root seed 0" and row["difference"] == 0.0
    assert row["published"]["kl_at_end"] == row["rerun"]["kl_at_end"] and len(row["rerun"]["kl_at_end"]) == 3
    assert set(row["rerun"]["kl_gap_se_at_end"]) == {0, 1, 2}  # every level's paired error at the last evaluation
    (line,) = rerun_lines(json.loads(json.dumps({"rows": [row]})))
    state = row["rerun"]["path_of_closest"][-1]
    assert line.startswith("- **TreeLang root seed 0**: final KL to BP_0 ") and f"BP_{state}" in line
    with pytest.raises(ValueError, match="are not one run trained twice"):
        rerun_check_row(runs["adam-s0"], runs["adam-s1"])


ROOT = Path(__file__).resolve().parents[1]


def test_the_published_sentences_are_the_ones_the_published_comparison_gives():
    """INTRO.md quotes every sentence, the README some, as ``summary_lines`` makes them from the committed
    compare.json; the re-run sentences are ``rerun_lines`` of rerun_check.json: a number in them that the data do not
    hold, or a claim they contradict, fails here."""
    from hf_treelang.analysis.compare_summary import quoted_summary, rerun_lines, summary_lines

    folder = ROOT / "docs" / "compare"
    payload = json.loads((folder / "compare.json").read_text())
    lines = summary_lines(payload)
    assert (folder / "summary.md").read_text().splitlines() == lines
    intro = (folder / "INTRO.md").read_text()
    assert quoted_summary(intro) == lines
    readme = quoted_summary((ROOT / "README.md").read_text())
    assert readme and all(line in lines for line in readme)
    rerun = json.loads((folder / "protocol" / "rerun_check.json").read_text())
    assert quoted_summary(intro, "rerun-check") == rerun_lines(rerun)
    for run in payload["runs"]:  # the numbers the sentences quote are the comparison's own fields
        assert run["within_noise_at_end"] and set(run["kl_gap_se_at_end"]) == set(run["kl_at_end"]), run["path"]
    header = (folder / "compare.csv").read_text().splitlines()[0].split(",")
    assert {"returns", "kl_gap_se_bp_k0", "kl_gap_se_bp_k4"} <= set(header)
