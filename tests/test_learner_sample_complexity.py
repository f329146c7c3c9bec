"""The sample complexity of any learner against BP_0: P* defined once (hand-computed cases), the rows and files a curve
publishes, the campaign's grid, a tiny campaign end to end (TreeLang and BERT, two P, two seeds, on a tiny paper's
grammar and a tiny Random Hierarchy Model: ℓ = 2, d = 16, one layer, a dozen steps), and what is refused before any
folder is written."""

import json
import math
import runpy
import shlex
import statistics
from pathlib import Path

import pytest

from hf_treelang import cli
from hf_treelang.analysis import pstar as definition
from hf_treelang.analysis import sample_complexity_results as results
from hf_treelang.cli import run_command
from hf_treelang.sweep import comparison, estimate
from hf_treelang.sweep import sample_complexity as learners
from hf_treelang.train.run import resolve, runs_from_command_line

ROOT = Path(__file__).resolve().parents[1]


def _rows(accuracies: dict, bp: float = 1.0, kl: dict | None = None) -> list:
    """Rows of one curve: ``{seed: [accuracy per P]}`` at P = 100, 1000, 10000."""
    sizes = (100, 1000, 10_000)
    return [{"num_train": size, "seed": seed, "accuracy": value, "bp_accuracy": bp,
             "kl_bp0": None if kl is None else kl[seed][i]}
            for seed, values in accuracies.items() for i, (size, value) in enumerate(zip(sizes, values))]


# ---------------------------------------------------------------- P*, by hand


def test_pstar_between_two_grid_points_is_interpolated_linearly_in_log_p():
    # gaps to BP_0 of the mean curve: 0.5, 0.1, 0.01; ε = 0.02 is crossed between P = 1000 and 10000, 8/9 of the way
    rows = _rows({0: [0.45, 0.85, 0.98], 1: [0.55, 0.95, 1.0]})
    found = definition.pstar(rows)
    assert found.curve.value == pytest.approx(1000 * 10 ** (8 / 9), rel=1e-9)
    assert found.curve.reason is None and found.to_dict()["mean"] == found.curve.value


def test_pstar_on_a_grid_point_is_that_point():
    rows = _rows({0: [0.5, 0.98, 0.99]})  # 1.0 − 0.98 is 0.020000000000000018 in floats: still on ε
    assert definition.pstar(rows).curve.value == 1000.0


def test_a_curve_that_never_comes_within_epsilon_has_no_pstar_and_says_so():
    found = definition.pstar(_rows({0: [0.3, 0.6, 0.97]}))
    assert found.curve.value is None and found.curve.reason == definition.NEVER
    assert found.to_dict()["mean"] is None and found.std is None


def test_a_curve_within_epsilon_from_its_smallest_p_has_pstar_at_most_that_p():
    found = definition.pstar(_rows({0: [0.99, 1.0, 1.0]}))
    assert found.curve.value is None and found.curve.reason == definition.FROM_START
    assert found.curve.at_most == 100 and found.to_dict()["at_most"] == 100


def test_the_spread_over_seeds_is_the_standard_deviation_of_each_seeds_own_pstar():
    rows = _rows({0: [0.5, 0.98, 1.0], 1: [0.5, 0.9, 0.98], 2: [0.5, 0.6, 0.7]})
    found = definition.pstar(rows)
    assert [c.value for c in found.per_seed.values()] == [1000.0, 10_000.0, None]  # seed 2 never crosses alone
    assert found.std == pytest.approx(statistics.stdev([1000.0, 10_000.0]))
    assert found.seed_mean == pytest.approx(5500.0)
    payload = found.to_dict()
    assert payload["num_seeds_crossing"] == 2 and [s["seed"] for s in payload["per_seed"]] == [0, 1, 2]
    assert payload["mean"] is None  # the mean curve: gaps 0.5, 0.173, 0.107: never within ε


def test_pstar_by_kl_is_the_same_rule_on_the_kl_to_bp0_below_delta():
    rows = _rows({0: [0.5, 0.9, 1.0]}, kl={0: [0.5, 0.05, 0.005]})
    found = definition.pstar(rows, "kl")  # δ = 0.01: (0.05 − 0.01) / (0.05 − 0.005) of the way from 1000
    assert found.threshold == definition.DELTA == 0.01
    assert found.curve.value == pytest.approx(1000 * 10 ** (0.04 / 0.045), rel=1e-9)
    assert definition.pstar(rows, "kl", 0.1).curve.value == pytest.approx(100 * 10 ** (0.4 / 0.45), rel=1e-9)


@pytest.mark.parametrize("quantity, threshold, said", [
    ("accuracy", 0.0, r"`epsilon` must be a number in \(0, 1\), got 0.0"),
    ("accuracy", 1.0, r"`epsilon` must be a number in \(0, 1\), got 1.0"),
    ("kl", -0.1, r"`delta` must be a number > 0, got -0.1"),
    ("kl", math.nan, r"`delta` must be a number > 0, got nan"),
    ("loss", 0.1, r"`quantity` must be one of \('accuracy', 'kl'\), got 'loss'")])
def test_a_threshold_out_of_range_is_refused_by_name(quantity, threshold, said):
    with pytest.raises(ValueError, match=said):
        definition.pstar(_rows({0: [0.5, 0.9, 1.0]}), quantity, threshold)


def test_the_slope_of_ln_pstar_on_ln_scale_and_its_standard_error_are_the_least_squares_ones():
    # ln x = 0, 1, 2 and ln y = 0, 1, 3: slope 3/2, intercept −1/6, residuals 1/6, −1/3, 1/6, SE sqrt(1/12)
    points = [(math.exp(x), math.exp(y), f"g{x}") for x, y in ((0, 0), (1, 1), (2, 3))]
    fit = definition.fit_slope(points, {"g9": definition.NEVER})
    assert fit.slope == pytest.approx(1.5) and fit.intercept == pytest.approx(-1 / 6)
    assert fit.slope_se == pytest.approx(math.sqrt(1 / 12))
    assert fit.consistent is True  # |1.5 − 1| = 0.5 <= 2 × 0.289
    payload = fit.to_dict()
    assert payload["theory_slope"] == 1.0 and payload["num_points"] == 3
    assert payload["left_out"] == {"g9": definition.NEVER}
    exact = definition.fit_slope([(8.0, 16.0, "a"), (64.0, 128.0, "b"), (512.0, 1024.0, "c")])
    assert exact.slope == pytest.approx(1.0) and exact.slope_se == pytest.approx(0.0, abs=1e-12)
    two = definition.fit_slope([(8.0, 16.0, "a"), (64.0, 512.0, "b")])  # ln 32 / ln 8
    assert two.slope == pytest.approx(5 / 3) and two.slope_se is None and two.consistent is None
    assert definition.fit_slope([(8.0, 16.0, "a")]).slope is None


# ---------------------------------------------------------------- the sentences


def _entry(architecture: str, grammar: str, mean, *, reason=None, at_most=None, std=None, fit=None, n=None) -> dict:
    return {"grammar": grammar, "task": "root", "architecture": architecture, "kind": "rhm" if n else "paper",
            "n_c_m_L": n, "sizes": [64, 128, 256], "seeds": [0, 1], "epsilon": 0.02, "accuracy": [0.5, 0.7, 0.9],
            "bp_accuracy": [1.0, 1.0, 1.0], "pstar": {"mean": mean, "std": std, "reason": reason,
                                                      "at_most": at_most, "num_seeds_crossing": 2 if std else 0},
            **({"fit": fit} if fit else {})}


def test_the_sentences_name_the_learner_with_the_fewest_samples_and_whether_each_follows_the_theory():
    paper = [_entry("gpt2", "paper-seed0-sigma1.0", 2000.0, std=300.0),
             _entry("treelang", "paper-seed0-sigma1.0", 1000.0, std=100.0),
             _entry("bert", "paper-seed0-sigma1.0", None, reason=definition.NEVER)]
    follows = {"slope": 0.98, "slope_se": 0.05, "num_points": 3, "consistent_with_theory": True, "left_out": {}}
    steeper = {"slope": 1.6, "slope_se": 0.1, "num_points": 3, "consistent_with_theory": False, "left_out": {}}
    rhm = [_entry("treelang", "rhm-v8-m2-s2-L3", None, reason=definition.FROM_START, at_most=64, fit=follows, n=64),
           _entry("rwkv", "rhm-v8-m2-s2-L3", 90.0, fit=steeper, n=64)]
    paper_line, rhm_line, scaling = results.summary_lines(paper + rhm)
    assert paper_line.startswith("- **paper-seed0-sigma1.0** (root; ε = 0.02; P = 64 … 256): the fewest samples to "
                                 "BP_0's accuracy: TreeLang (P* ≈ 1,000 ± 100 over 2 seeds); then GPT-2 (P* ≈ 2,000 "
                                 "± 300 over 2 seeds); never within ε on the grid: BERT (accuracy 0.900 at P = 256 "
                                 "where BP_0 has 1.000).")
    assert "the fewest samples to BP_0's accuracy: TreeLang (P* ≤ 64 (within ε at the smallest P))" in rhm_line
    assert "TreeLang 0.98 ± 0.05 over 3 grammars, consistent with 1" in scaling
    assert "RWKV 1.60 ± 0.10 over 3 grammars, not consistent with 1" in scaling
    assert results.summary_lines([]) == [results.NO_RUNS]


def test_the_readme_sentence_names_the_fastest_learner_and_who_follows_the_theory():
    follows = {"slope": 0.98, "slope_se": 0.05, "num_points": 3, "consistent_with_theory": True, "left_out": {}}
    steeper = {"slope": 1.6, "slope_se": 0.1, "num_points": 3, "consistent_with_theory": False, "left_out": {}}
    entries = [_entry("gpt2", "paper-seed0-sigma1.0", 2000.0), _entry("treelang", "paper-seed0-sigma1.0", 1000.0),
               _entry("treelang", "rhm-v8-m2-s2-L3", 80.0, fit=follows, n=64),
               _entry("rwkv", "rhm-v8-m2-s2-L3", 60.0, fit=steeper, n=64),
               _entry("treelang", "rhm-v8-m3-s2-L3", 200.0, fit=follows, n=216),
               _entry("rwkv", "rhm-v8-m3-s2-L3", 90.0, fit=steeper, n=216)]
    assert results.readme_line(entries) == (
        results.README_HEAD + ": on paper-seed0-sigma1.0 the fewest samples within ε = 0.02 of BP_0's accuracy: "
        "TreeLang (P* ≈ 1,000); the fewest on the 2 Random Hierarchy Models: RWKV on 2; P* ∝ n_c m^L within two "
        "standard errors: TreeLang; not: RWKV.")
    assert results.readme_line([]).endswith("no runs are published yet.")


def test_the_readme_quotes_the_sentence_of_the_published_pstar_json():
    """What the README says of the sample complexity is what the published pstar.json gives (no runs yet: it says
    so), so that it cannot contradict the data."""
    published = results.read_entries(ROOT / "docs" / "sample_complexity")
    assert results.quoted_lines((ROOT / "README.md").read_text()) == [results.readme_line(published)]


# ---------------------------------------------------------------- the grid


def test_the_campaign_is_every_root_architecture_on_the_papers_grammar_and_four_on_the_random_hierarchies():
    curves = learners.campaign_curves()
    paper = [c for c in curves if not c.grammar.is_random_hierarchy]
    assert [c.learner.architecture for c in paper] == list(comparison.ROOT)
    assert all(c.sizes == tuple(2**p for p in range(10, 17)) and c.seeds == (0, 1, 2) for c in paper)
    rates = comparison.read_rates(learners.RATES_FILE)
    assert all(c.learner.learning_rate == rates[f"{c.grammar.family}-root-{c.learner.architecture}"]["chosen"]
               for c in curves)
    hierarchies = [c for c in curves if c.grammar.is_random_hierarchy]
    assert {(c.grammar.num_rules, c.grammar.depth) for c in hierarchies} == {(m, L) for m in (2, 3, 4) for L in (2, 3)}
    assert {c.learner.architecture for c in hierarchies} == set(learners.RHM_ARCHITECTURES)
    assert len(learners.RHM_ARCHITECTURES) >= 4
    for curve in hierarchies:  # n_c m^L / 8 ... 8 n_c m^L in doublings
        scale = curve.grammar.num_classes * curve.grammar.num_rules ** curve.grammar.depth
        assert curve.sizes == tuple(scale * 2**j // 8 for j in range(7)) and curve.seeds == (0, 1)
        assert curve.name.startswith("rhm-v8-m") and curve.grammar.num_symbols == curve.grammar.num_classes == 8
    assert sum(len(c.sizes) * len(c.seeds) for c in curves) == 6 * 7 * 3 + 6 * 4 * 7 * 2
    # whole curves first: the grammars in order, each grammar's curves one after another
    assert [c.grammar.name for c in curves] == sorted((c.grammar.name for c in curves),
                                                      key=[c.grammar.name for c in curves].index)


def test_a_curves_runs_are_the_laptop_root_run_with_the_stopping_rule_of_laptop_full(tmp_path):
    from hf_treelang.train import laptop_settings

    curve = next(c for c in learners.campaign_curves() if c.name == "rhm-v8-m4-s2-L3-rwkv")
    runs = curve.runs(tmp_path)
    assert [run.name for run in runs[:3]] == ["rhm-v8-m4-s2-L3/rwkv-P64-seed0", "rhm-v8-m4-s2-L3/rwkv-P64-seed1",
                                              "rhm-v8-m4-s2-L3/rwkv-P128-seed0"]
    run = runs[0]
    full = laptop_settings.FULL
    t, d = run.training_args, run.data_args
    assert (t.early_stopping_patience, t.early_stopping_eval_steps, t.early_stopping_min_steps, t.max_steps) == (
        full["sweep_patience"], full["sweep_check_steps"], full["sweep_min_steps"], full["sweep_max_steps"])
    assert (d.num_eval, d.num_test, d.k_train, d.k_test) == (full["sweep_num_eval"], full["sweep_num_test"], 0, [0])
    assert (d.num_rules, d.num_classes, d.arity, d.depth) == (4, 8, 2, 3)
    assert run.model_args.model_type == "rwkv" and "num_hidden_layers=3" in run.model_args.config_overrides
    assert t.cpu_threads == 1 and t.learning_rate == comparison.read_rates(learners.RATES_FILE)[
        "rhm-root-rwkv"]["chosen"]


# ---------------------------------------------------------------- a tiny campaign, end to end

TINY_MODELS = {"treelang": "hidden_size=16,intermediate_size=16,num_hidden_layers=1",
               "bert": "hidden_size=16,num_hidden_layers=1,num_attention_heads=1,intermediate_size=32"}
TINY_STOPPING = learners.Stopping(patience=1, every=4, min_steps=0, max_steps=12)


def _tiny_curves() -> list:
    grammars = (learners.paper_grammar(num_symbols=3, depth=2), learners.random_hierarchy(4, 2, 2))
    return [learners.Curve(grammar, learners.Learner(name, 3e-3, overrides), (16, 64), (0, 1), TINY_STOPPING,
                           num_validation=32, num_test=32, extra={"use_dataset_builder": False, "cpu_threads": 1})
            for grammar in grammars for name, overrides in TINY_MODELS.items()]


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    """The tiny campaign trained into OUT and published into OUT/../published, with one more curve never trained."""
    base = tmp_path_factory.mktemp("campaign")
    out, folder = base / "out", base / "published"
    curves = _tiny_curves()
    lines = []
    result = learners.run_campaign(out, curves=curves, workers=0, log=lines.append)
    untrained = learners.Curve(learners.paper_grammar(num_symbols=3, depth=2, grammar_seed=1),
                               learners.Learner("treelang", 3e-3, TINY_MODELS["treelang"]), (16,), (0,),
                               TINY_STOPPING, num_validation=32, num_test=32, extra={"use_dataset_builder": False})
    published = results.publish_campaign(out, folder, curves=[*curves, untrained], log=lines.append)
    return {"out": out, "folder": folder, "curves": curves, "result": result, "published": published,
            "lines": lines}


def test_a_tiny_campaign_publishes_rows_pstar_figures_and_a_loadable_dataset(campaign):
    import datasets

    assert campaign["result"].failed == {} and len(campaign["result"].trained) == 16
    folder = campaign["folder"]
    rows = json.loads((folder / "runs.json").read_text())
    assert len(rows) == 16 and {r["architecture"] for r in rows} == {"treelang", "bert"}
    assert {r["grammar"] for r in rows} == {"paper-seed0-sigma1.0-q3-depth2", "rhm-v4-m2-s2-L2"}
    table = datasets.load_dataset(str(folder), cache_dir=str(folder.parent / "cache"))["train"]
    assert table.num_rows == 16 and table.column_names == list(results.ROW_COLUMNS)
    entries = json.loads((folder / "pstar.json").read_text())
    assert len(entries) == 4 and all({"grammar", "architecture", "pstar", "pstar_kl", "epsilon"} <= set(e)
                                     for e in entries)
    assert all({"mean", "std", "per_seed"} <= set(e["pstar"]) for e in entries)
    assert all(e["fit"]["theory_slope"] == 1.0 for e in entries if e["kind"] == "rhm")
    assert not any("fit" in e for e in entries if e["kind"] == "paper")
    for grammar in {r["grammar"] for r in rows}:
        assert (folder / f"curves-{grammar}.png").stat().st_size > 1000
    assert (folder / "summary.md").read_text().splitlines() == results.summary_lines(entries)
    assert campaign["published"]["partial"] == ["paper-seed1-sigma1.0-q3-depth2-treelang"]  # never trained: left out
    assert any("0 of 1 runs finished; not published" in line for line in campaign["lines"])


def test_every_row_has_the_published_columns_and_a_random_hierarchys_rows_its_m_and_l(campaign):
    rows = json.loads((campaign["folder"] / "runs.json").read_text())
    required = ("architecture", "grammar", "task", "num_train", "seed", "learning_rate", "accuracy", "bp_accuracy",
                "kl_bp0", "command", "m", "L", "steps", "stopped", "best_step")
    for row in rows:
        assert set(row) == set(results.ROW_COLUMNS) and all(name in row for name in required)
        assert row["task"] == "root" and 0.0 <= row["accuracy"] <= 1.0 and row["bp_accuracy"] == pytest.approx(1.0)
        assert row["kl_bp0"] > 0 and row["steps"] <= 12 and row["learning_rate"] == 3e-3
        if row["grammar"].startswith("rhm"):
            assert (row["m"], row["L"], row["n_c"], row["n_c_m_L"]) == (2, 2, 4, 16)
        else:
            assert row["m"] is None and row["L"] is None
    header = (campaign["folder"] / "runs.csv").read_text().splitlines()[0].split(",")
    assert header == list(results.ROW_COLUMNS)


def test_the_published_pstar_is_the_definition_recomputed_from_the_rows(campaign):
    rows = json.loads((campaign["folder"] / "runs.json").read_text())
    entries = json.loads((campaign["folder"] / "pstar.json").read_text())
    for entry in entries:
        ours = [r for r in rows if (r["grammar"], r["architecture"]) == (entry["grammar"], entry["architecture"])]
        assert entry["pstar"] == definition.pstar(ours, "accuracy", 0.02).to_dict()
        assert entry["pstar_kl"] == definition.pstar(ours, "kl", 0.01).to_dict()


def test_a_rows_command_trains_that_run_alone_to_the_same_identity_and_result(campaign, tmp_path, monkeypatch):
    from hf_treelang.train.loop import train

    monkeypatch.chdir(tmp_path)
    rows = json.loads((campaign["folder"] / "runs.json").read_text())
    for row in rows:
        argv = shlex.split(row["command"])
        assert argv[:2] == ["python", "training/run_root.py"] and argv[-2:] == ["--output_dir", f"runs/{row['run']}"]
        (run,), _ = runs_from_command_line("root", argv[2:])
        assert run.identity == row["identity"]
    row = next(r for r in rows if r["architecture"] == "bert" and r["grammar"].startswith("rhm"))
    (run,), _ = runs_from_command_line("root", shlex.split(row["command"])[2:])
    again = train(run)
    assert again.final_metrics["eval_acc_ktest0"] == row["accuracy"] and again.global_step == row["steps"]


def test_a_campaign_run_again_trains_nothing_and_its_plan_counts_every_run_finished(campaign):
    lines = []
    again = learners.run_campaign(campaign["out"], curves=campaign["curves"], workers=0, log=lines.append)
    assert again.trained == [] and len(again.skipped) == 16
    plan = learners.plan_campaign(campaign["out"], curves=campaign["curves"], measure=False)
    assert len(plan.runs) == len(plan.finished) == 16 and plan.most_steps == plan.fewest_steps == 0
    assert plan.lines()[0].startswith("16 runs in 4 curves (a grammar and an architecture each), 16 finished in OUT")


def test_the_results_page_is_generated_from_the_published_files(campaign):
    hooks = runpy.run_path(str(ROOT / "docs" / "hooks.py"), run_name="docs_hooks")
    page = hooks["_sample_complexity_page"](campaign["folder"])
    entries = json.loads((campaign["folder"] / "pstar.json").read_text())
    assert results.quoted_lines(page) == results.summary_lines(entries)
    assert "| rhm-v4-m2-s2-L2 | bert | 0.003 |" in page and "## P* against n_c m^L" in page
    assert "![paper-seed0-sigma1.0-q3-depth2](../sample_complexity/curves-paper-seed0-sigma1.0-q3-depth2.png)" in page
    empty = hooks["_sample_complexity_page"](campaign["folder"].parent / "nothing")
    assert results.quoted_lines(empty) == [results.NO_RUNS] and "| grammar |" not in empty


# ---------------------------------------------------------------- the plan


@pytest.mark.parametrize("min_steps, fewest", [(0, 8), (10, 12), (12, 12), (200, 100)])
def test_the_fewest_steps_of_a_run_count_the_floor_up_to_the_next_check_and_never_past_the_cap(min_steps, fewest):
    stopping = learners.Stopping(patience=1, every=4, min_steps=min_steps, max_steps=100)
    assert stopping.fewest_steps == fewest
    assert stopping.arguments().get("early_stopping_min_steps", 0) == min_steps


def test_the_plan_bounds_the_steps_between_every_run_stopping_at_once_and_every_run_at_its_cap(tmp_path):
    curves = _tiny_curves()[:1]
    plan = learners.plan_campaign(tmp_path / "out", curves=curves, measure=False)
    assert len(plan.runs) == 4 and plan.finished == []
    assert (plan.fewest_steps, plan.most_steps) == (4 * 8, 4 * 12)  # (patience + 1) × 4 steps; the cap of 12
    assert plan.lines()[1] == "  paper-seed0-sigma1.0-q3-depth2: treelang × P = 16 … 64 (2 values) × 2 seeds: 4 runs"
    assert not (tmp_path / "out").exists()


def test_the_time_estimate_measures_each_architecture_apart():
    """Two architectures of one TreeLang size are two models: the plan measures each (RWKV's step is not GPT-2's)."""
    tiny = {"depth": 2, "num_symbols": 3, "num_train": 64}
    gpt2 = resolve("root", {**tiny, "model_type": "gpt2", "config_overrides": "n_embd=16,n_layer=1,n_head=1"})
    bert = resolve("root", {**tiny, "model_type": "bert", "config_overrides": TINY_MODELS["bert"]})
    keys = {estimate.architecture_key(gpt2), estimate.architecture_key(bert)}
    assert len(keys) == 2
    assert "gpt2 (n_embd=16,n_layer=1,n_head=1)" in estimate.describe_key(estimate.architecture_key(gpt2))
    treelang = resolve("root", tiny)
    assert "d=64" in estimate.describe_key(estimate.architecture_key(treelang))


# ---------------------------------------------------------------- refusals, in one line, before any folder


TINY_ARGS = ["--num_symbols", "3", "--depth", "2", "--sizes", "16,64"]


@pytest.mark.parametrize("argv, said", [
    (["--model_type", "nonsense"], "--model_type 'nonsense' has no size in the comparison"),
    (["--model_type", "nonsense", "--config_overrides", "hidden_size=8", "--learning_rate", "1e-3"],
     "--model_type 'nonsense' is not a model type of transformers"),
    (["--model_type", "distilbert"], "no tuned learning rate for cell 'paper-root-distilbert'"),
    (["--model_type", "bert", "--rates", "no/such/rates.json"], "the comparison's rates file 'no/such/rates.json' "
                                                                "does not exist"),
    (["--sizes", "0,16"], "`sizes` must be an integer >= 1, got 0"),
    (["--sizes", "16,16"], r"`sizes` must not repeat a value, got \[16, 16\]"),
    (["--epochs", "3"], "--epochs is an option of Fig. 1f's arms"),
    (["--num_rules", "2", "--sigma", "0.5"], "--sigma 0.5 is the paper's grammar's"),
    (["--num_rules", "9"], r"`num_rules` must be an integer in \[1, 3\]"),
    (["--epsilon", "1.5"], r"`epsilon` must be a number in \(0, 1\), got 1.5"),
    (["--early_stopping_patience", "0"], r"`early_stopping_patience` must be an integer >= 1, got 0"),
], ids=lambda value: value if isinstance(value, str) else " ".join(value)[:30])
def test_the_learner_mode_refuses_bad_input_in_one_line_before_any_folder(argv, said, tmp_path, capsys):
    out = tmp_path / "out"
    arguments = TINY_ARGS + argv if "--sizes" not in argv else TINY_ARGS[:4] + argv
    assert run_command("sample-complexity", ["--out", str(out), *arguments]) == 2
    error = capsys.readouterr().err
    assert error.startswith("hf-treelang sample-complexity: error: ") and len(error.strip().splitlines()) == 1
    assert __import__("re").search(said, error), error
    assert not out.exists()


def test_the_learner_mode_needs_sizes_and_the_arms_mode_refuses_the_learners_options(tmp_path, capsys):
    assert run_command("sample-complexity", ["--out", str(tmp_path / "a")]) == 2
    assert "--sizes: the learner mode (no CHECKPOINT) needs the grid of P" in capsys.readouterr().err
    assert run_command("sample-complexity", ["checkpoint", "--out", str(tmp_path / "b"), "--model_type", "bert"]) == 2
    assert "--model_type is an option of the learner mode (no CHECKPOINT)" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_the_cli_states_the_thresholds_of_the_definition():
    assert (cli.PSTAR_EPSILON, cli.PSTAR_DELTA) == (definition.EPSILON, definition.DELTA)


def test_an_empty_or_unknown_curve_selection_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"--only \['paper-gpt5'\]: no curve is named so"):
        learners.plan_campaign(tmp_path, curves=_tiny_curves(), only=["paper-gpt5"], measure=False)
    with pytest.raises(ValueError, match="name one curve or more"):
        learners.run_campaign(tmp_path, curves=_tiny_curves(), only=[""])
    assert not any(tmp_path.iterdir())
