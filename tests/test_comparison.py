"""The architecture comparison protocol (``hf_treelang.sweep.comparison``): its cells at TreeLang's size, the laptop
budgets, a quarter of them for the rate search, and the rate chosen from the runs' own evaluation histories."""

import json
import math
import runpy
from pathlib import Path

import pytest

from hf_treelang.sweep import comparison
from hf_treelang.train.callbacks import write_history
from hf_treelang.train.device_data import optimizer_steps


def _cell(name: str) -> comparison.Cell:
    (cell,) = [cell for cell in comparison.cells() if cell.name == name]
    return cell


def test_the_grid_has_every_task_and_architecture_the_protocol_names():
    names = {cell.name for cell in comparison.cells()}
    for architecture in ("treelang", "bert", "roberta", "gpt2", "llama", "rwkv"):
        assert f"paper-root-{architecture}" in names and f"rhm-root-{architecture}" in names
    assert {f"paper-clm-{name}" for name in ("treelang", "gpt2", "llama", "rwkv")} <= names
    assert {f"paper-mlm-{name}" for name in ("treelang", "bert", "roberta", "distilbert")} <= names
    assert _cell("paper-root-gpt2").seeds == (0, 1, 2) and _cell("paper-mlm-treelang").seeds == (0, 1, 2)


def test_every_cell_has_the_treelang_parameter_count_of_its_task_within_the_tolerance():
    counts = comparison.parameter_counts()
    sizes = comparison.check_sizes(counts=counts)
    assert set(sizes) == {cell.name for cell in comparison.cells()}
    for name, (parameters, reference) in sizes.items():
        assert abs(parameters / reference - 1) <= comparison.SIZE_TOLERANCE, name
        assert reference == counts[name.rsplit("-", 1)[0] + "-treelang"]
    with pytest.raises(ValueError, match=r"outside ±0% of TreeLang.s: paper-root-bert [0-9,]+ against [0-9,]+"):
        comparison.check_sizes(tolerance=0.0, counts=counts)  # the other architectures are close, not equal


@pytest.mark.parametrize("name, steps", [("paper-root-bert", 49_152), ("paper-clm-llama", 8_192),
                                         ("paper-mlm-distilbert", 49_152), ("rhm-root-rwkv", 12_288)])
def test_the_budgets_are_the_laptop_presets_and_the_search_a_quarter_of_them(name, steps, tmp_path):
    cell = _cell(name)
    assert comparison.budget(cell) == steps
    search = comparison.tuning_runs(cell, tmp_path)
    assert [run.training_args.learning_rate for run in search] == list(comparison.LEARNING_RATES)
    assert {run.training_args.max_steps for run in search} == {steps // 4}
    assert {run.training_args.seed for run in search} == {0}
    main = comparison.main_runs(cell, 1e-3, tmp_path)
    assert [run.training_args.seed for run in main] == list(cell.seeds)
    assert {run.training_args.learning_rate for run in main} == {1e-3}
    assert {optimizer_steps(run.training_args, run.data_args.num_train) for run in main} == {steps}


def _history(run, kl_values: list, k: int = 0) -> None:
    """An evaluation history as the training writes it, the KL to BP_k at steps 0, 10, 20, ..."""
    entries = [{"step": 10 * i, f"eval_kl_bp_k{k}": value, "eval_loss": 1.0} for i, value in enumerate(kl_values)]
    write_history(run.output_dir / "eval_history.json", entries)


def test_the_rate_is_the_lowest_final_validation_kl_and_a_diverged_run_is_never_chosen(tmp_path):
    cell = _cell("paper-root-treelang")
    low, middle, high = comparison.tuning_runs(cell, tmp_path)
    _history(low, [1.0, 0.05, 0.40])  # the best KL along the way does not count: the last evaluation does
    _history(middle, [1.0, 0.30, 0.20])
    _history(high, [1.0, 0.01, math.nan])  # diverged at the end
    record = comparison.choose_rate(cell, [low, middle, high])
    assert record["chosen"] == comparison.LEARNING_RATES[1] and record["metric"] == "eval_kl_bp_k0"
    candidates = record["candidates"]
    assert candidates["lr0.0003"]["eval_kl_bp_k0"] == 0.40 and candidates["lr0.003"]["eval_kl_bp_k0"] is None
    assert {entry["steps"] for entry in candidates.values()} == {49_152 // 4}


def test_a_cell_whose_runs_have_no_evaluation_is_refused_by_name(tmp_path):
    cell = _cell("paper-clm-gpt2")
    search = comparison.tuning_runs(cell, tmp_path)
    with pytest.raises(RuntimeError, match="cell paper-clm-gpt2: no tuning run has a final eval_kl_bp_k0"):
        comparison.choose_rate(cell, search)


def test_bad_arguments_are_refused_before_any_work(tmp_path):
    with pytest.raises(ValueError, match="stage must be one of"):
        comparison.run_protocol(tmp_path, stage="everything")
    with pytest.raises(ValueError, match=r"--only \['paper-roots'\]: no cell is named so"):
        comparison.run_protocol(tmp_path, stage="tune", only=["paper-roots"])
    assert not any(tmp_path.iterdir())


def test_a_recorded_search_of_todays_runs_is_reused_and_one_of_other_runs_searched_again(tmp_path, monkeypatch):
    import json

    cell = _cell("rhm-root-gpt2")
    search = comparison.tuning_runs(cell, tmp_path)
    for run, final in zip(search, (0.3, 0.1, 0.2)):
        _history(run, [1.0, final])
    record = comparison.choose_rate(cell, search)
    assert comparison.is_current(record, search)
    trained = []
    monkeypatch.setattr(comparison, "execute_runs", lambda runs, out, **options: trained.append(
        [run.name for run in runs]))
    rates_file = tmp_path / "rates.json"
    rates_file.write_text(json.dumps({cell.name: record}))
    comparison.run_protocol(tmp_path, only=[cell.name], log=lambda line: None)
    assert trained == [[], [f"main/{cell.name}-s0"]]  # no search: its record is of today's runs
    assert json.loads(rates_file.read_text())[cell.name]["chosen"] == 1e-3

    stale = json.loads(json.dumps(record))
    stale["candidates"]["lr0.001"]["identity"] = "another"
    rates_file.write_text(json.dumps({cell.name: stale}))
    trained.clear()
    lines = []
    comparison.run_protocol(tmp_path, stage="tune", only=[cell.name], log=lines.append)
    assert trained == [[run.name for run in search]]
    assert any("searching again" in line for line in lines)
    assert cell.name not in json.loads(rates_file.read_text())  # its runs have not finished: no rate yet


def _searched(tmp_path, name: str = "rhm-root-gpt2") -> tuple:
    """A cell, its rate search with final KLs 0.3, 0.1, 0.2 (the middle rate best) and the record choose_rate writes."""
    cell = _cell(name)
    search = comparison.tuning_runs(cell, tmp_path)
    for run, final in zip(search, (0.3, 0.1, 0.2)):
        _history(run, [1.0, final])
    return cell, search, comparison.choose_rate(cell, search)


@pytest.mark.parametrize("text, said", [("", "not readable JSON"), ('{"rhm-root-gpt2": {"cell": "rhm', "not readable"),
                                        ("[]", "it holds an array"), ("null", "it holds null"),
                                        ("3", "it holds a number")])
def test_a_damaged_rates_file_is_refused_by_name_and_never_rewritten(tmp_path, monkeypatch, text, said):
    trained = []
    monkeypatch.setattr(comparison, "execute_runs", lambda runs, out, **options: trained.append(runs))
    rates_file = tmp_path / "rates.json"
    rates_file.write_text(text)
    for stage in ("tune", "main", "all"):
        with pytest.raises(ValueError, match=rf"^{rates_file} is damaged .*{said}") as error:
            comparison.run_protocol(tmp_path, stage=stage, only=["rhm-root-gpt2"], log=lambda line: None)
        assert "\n" not in str(error.value)
    assert rates_file.read_text() == text and trained == []


def test_rate_records_that_are_not_what_the_search_writes_are_refused_by_cell(tmp_path, monkeypatch):
    cell, search, record = _searched(tmp_path)
    monkeypatch.setattr(comparison, "execute_runs", lambda runs, out, **options: None)
    rates_file = tmp_path / "rates.json"
    for damaged, said in ((7, "holds int 7, not a rate record"), ([record], "holds list"),
                          ({key: value for key, value in record.items() if key != "chosen"}, "`chosen` must be"),
                          ({**record, "candidates": []}, "a rate record has a `metric` name and `candidates`"),
                          ({**record, "candidates": {"lr0.001": 0.001}}, "a rate record has a `metric`")):
        text = json.dumps({cell.name: damaged})
        rates_file.write_text(text)
        with pytest.raises(ValueError, match=rf"^{rates_file}: cell 'rhm-root-gpt2'.*{said}"):
            comparison.run_protocol(tmp_path, stage="main", only=[cell.name], log=lambda line: None)
        assert rates_file.read_text() == text


@pytest.mark.parametrize("chosen, said", [(0.01, "the chosen rate 0.01 was never searched"),
                                          (3e-3, r"the chosen rate 0.003 is not its search's best \(the best is 0.001 "
                                                 r"\(eval_kl_bp_k0 0.1\)\)")])
def test_a_hand_edited_chosen_rate_is_refused_before_any_main_run_trains(tmp_path, monkeypatch, chosen, said):
    """The main runs train the rate the search chose; a record that says another trains nothing."""
    cell, search, record = _searched(tmp_path)
    trained = []
    monkeypatch.setattr(comparison, "execute_runs", lambda runs, out, **options: trained.append(runs))
    rates_file = tmp_path / "rates.json"
    text = json.dumps({cell.name: {**record, "chosen": chosen}})
    rates_file.write_text(text)
    with pytest.raises(ValueError, match=said):
        comparison.run_protocol(tmp_path, stage="main", only=[cell.name], log=lambda line: None)
    assert trained == [] and rates_file.read_text() == text


def test_the_main_stage_into_a_new_folder_says_in_one_line_which_stage_runs_first(tmp_path, capsys):
    script = runpy.run_path(str(Path(__file__).parents[1] / "training" / "compare_architectures.py"))
    out = tmp_path / "new"
    assert script["main"]([str(out), "--stage", "main"]) == 2
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and "--stage main: no cell of paper-root-treelang" in said
    assert "run --stage tune (or all) into" in said and not out.exists()


@pytest.mark.parametrize("only", [[""], ["paper-root", " "], []])
def test_an_empty_cell_selection_is_refused_not_read_as_every_cell(tmp_path, only):
    with pytest.raises(ValueError, match=r"--only .*: name one cell or more"):
        comparison.run_protocol(tmp_path, stage="tune", only=only)
    assert not any(tmp_path.iterdir())
