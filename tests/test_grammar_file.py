"""A user's own grammar from a file (``--grammar_file GRAMMAR.json``, the JSON ``Grammar.save`` writes): the root, MLM
and next-leaf scripts train on it, with the data sampled from it, the BP oracle run on it and the run folder's
grammar.json equal to it; the run's identity is the file's content, not its path; flags of a generated grammar and a
bad file are refused in one line before anything is written."""

import json
import shutil

import numpy as np
import pytest
import torch

from hf_treelang import Grammar
from hf_treelang.analysis.checkpoint import as_checkpoint
from hf_treelang.core.sampling import sample_trees
from hf_treelang.models.loading import load_pretrained
from hf_treelang.train.callbacks import REFERENCE_SIZE, BPKLCallback
from hf_treelang.train.data import grammar_file_split_seed, load_run_data
from hf_treelang.train.folders import TASK_ARCHITECTURES
from hf_treelang.train.loop import main, train
from hf_treelang.train.run import runs_from_command_line

import hf_treelang.models.modeling_treelang as modeling

TINY = ["--hidden_size", "32", "--num_hidden_layers", "2", "--intermediate_size", "32", "--num_train", "96",
        "--num_eval", "24", "--num_test", "16", "--per_device_train_batch_size", "8", "--num_train_epochs", "1",
        "--num_evaluations", "2", "--num_checkpoints", "0", "--disable_tqdm", "true", "--report_to", "none",
        "--cpu_threads", "1"]


def hand_made_grammar() -> Grammar:
    """q = 3, one shared M written by hand: each symbol has two rules, and the child pairs (0, 0), (1, 2), (2, 1)
    have no parent (a BP on such a grammar meets sequences of probability zero)."""
    M = np.zeros((3, 3, 3))
    M[0, 0, 1], M[0, 1, 0] = 0.7, 0.3
    M[1, 2, 2], M[1, 1, 1] = 0.6, 0.4
    M[2, 0, 2], M[2, 2, 0] = 0.5, 0.5
    return Grammar(M, np.array([0.5, 0.3, 0.2]))


def rhm_grammar() -> Grammar:
    """A Random Hierarchy Model of arity 3 and 2 root classes out of 4 symbols, saved as any grammar."""
    return Grammar.random_hierarchy(num_symbols=4, num_classes=2, num_rules=2, arity=3, depth=2, grammar_seed=1)


GRAMMARS = {"hand_made": (hand_made_grammar, ["--depth", "3"]), "rhm": (rhm_grammar, [])}


def grammar_file(folder, kind: str = "hand_made"):
    path = folder / f"{kind}.json"
    GRAMMARS[kind][0]().save(path)
    return path


def file_run(task, path, output_dir, *extra):
    (run,), _ = runs_from_command_line(task, ["--grammar_file", str(path), *TINY, "--output_dir", str(output_dir),
                                              *extra])
    return run


@pytest.mark.parametrize("kind", sorted(GRAMMARS))
@pytest.mark.parametrize("task", ["root", "mlm", "clm"])
def test_a_grammar_file_trains_with_its_grammar_as_data_oracle_and_grammar_json(tmp_path, task, kind):
    path = grammar_file(tmp_path, kind)
    grammar = Grammar.load(path)
    run = file_run(task, path, tmp_path / "run", *GRAMMARS[kind][1])
    result = train(run)
    folder = tmp_path / "run"
    assert (folder / "grammar.json").read_bytes() == path.read_bytes()
    assert as_checkpoint(folder).grammar == grammar  # the analyses read the run's grammar
    # the data are sampled from the file's grammar: the splits are sample_trees of it at their seeds
    data = load_run_data(run.data_args)
    assert data.grammar == grammar
    for k, split in [(0, data.train), (0, data.validation), *data.tests.items()]:
        drawn = sample_trees(grammar, len(split), run.data_args.depth, k, split.sampling_seed)
        assert np.array_equal(drawn.leaves, split.leaves) and np.array_equal(drawn.roots, split.roots)
    # the logged KLs are those of a BP-KL callback built from the file's grammar
    model = load_pretrained(getattr(modeling, TASK_ARCHITECTURES[run.model_task]), folder).eval()
    oracle = BPKLCallback(grammar, run.data_args.depth, 0, run.model_task, data.validation, data.tests,
                          reference_size=REFERENCE_SIZE)
    with torch.no_grad():
        expected = oracle.compute(model)
    levels = range(run.data_args.depth + 1)
    assert any(f"eval_kl_bp_k{k}" in result.final_metrics for k in levels)
    for k in levels:
        key = f"eval_kl_bp_k{k}"
        assert (key in result.final_metrics) == (key in expected)
        if key in expected:
            assert result.final_metrics[key] == pytest.approx(expected[key], rel=1e-5, abs=1e-7)
    for k in levels:
        key = f"eval_bp_acc_ktest{k}"
        assert result.final_metrics.get(key) == pytest.approx(expected.get(key), abs=1e-12)


def test_the_oracle_leaves_out_rows_of_probability_zero_for_any_grammar_but_the_papers_family():
    from hf_treelang.train.callbacks import may_give_probability_zero

    assert not may_give_probability_zero(Grammar.random(num_symbols=4, sigma=1.0, grammar_seed=0))
    assert may_give_probability_zero(hand_made_grammar())  # three child pairs without a parent
    assert may_give_probability_zero(rhm_grammar())  # arity 3, rules per level
    full = Grammar.random(num_symbols=3, sigma=1.0, grammar_seed=0)
    assert may_give_probability_zero(Grammar(full.M, np.array([0.5, 0.5, 0.0])))  # a root it never draws


def test_the_training_data_follow_the_files_grammar(tmp_path):
    grammar = hand_made_grammar()
    path = grammar_file(tmp_path)
    run = file_run("root", path, tmp_path / "run", "--depth", "3", "--num_train", "4000")
    data = load_run_data(run.data_args)
    siblings = data.train.leaves.reshape(-1, 4, 2)  # (n, 4 pairs, 2): the children of the 4 nodes of level 2
    has_parent = grammar.M.sum(0) > 0  # (q, q): the child pairs a rule writes
    assert has_parent[siblings[..., 0], siblings[..., 1]].all()
    frequency = np.bincount(data.train.roots, minlength=3) / len(data.train.roots)  # (q,)
    assert np.abs(frequency - grammar.root_prior).max() < 4 * np.sqrt(0.25 / len(data.train.roots))


def test_a_grammar_files_identity_and_data_are_its_content_not_its_path(tmp_path):
    first = grammar_file(tmp_path)
    (tmp_path / "copy").mkdir()
    copy = shutil.copy(first, tmp_path / "copy" / "renamed.json")
    run = file_run("root", first, tmp_path / "a", "--depth", "3")
    same = file_run("root", copy, tmp_path / "b", "--depth", "3")
    assert run.identity == same.identity
    assert np.array_equal(load_run_data(run.data_args).train.leaves, load_run_data(same.data_args).train.leaves)
    other = hand_made_grammar()
    changed = other.M.copy()
    changed[0, 0, 1], changed[0, 1, 0] = 0.6, 0.4
    Grammar(changed, other.root_prior).save(first)  # another grammar under the same name
    again = file_run("root", first, tmp_path / "a", "--depth", "3")
    assert again.identity != run.identity
    assert again.data_args.grammar_file == run.data_args.grammar_file


def test_a_grammar_files_splits_never_share_draws_and_differ_from_a_generated_grammars():
    grammar = hand_made_grammar()
    seeds = {grammar_file_split_seed(grammar, 3, k, split) for k in range(4) for split in ("train", "validation",
                                                                                           "test")}
    assert len(seeds) == 12
    assert grammar_file_split_seed(rhm_grammar(), 3, 0, "train") != grammar_file_split_seed(grammar, 3, 0, "train")


def test_a_grammar_file_gives_q_the_arity_the_depth_and_the_root_classes(tmp_path):
    run = file_run("root", grammar_file(tmp_path, "rhm"), tmp_path / "run")
    data_args = run.data_args
    assert (data_args.num_symbols, data_args.arity, data_args.depth, data_args.num_classes) == (4, 3, 2, 2)
    assert (data_args.sigma, data_args.grammar_seed, data_args.num_rules, data_args.use_dataset_builder) == (
        None, None, None, False)
    config = run.model_args.config(data_args)
    assert (config.num_symbols, config.arity, config.num_classes, config.sigma, config.grammar_seed) == (
        4, 3, 2, None, None)
    hand_made = file_run("root", grammar_file(tmp_path), tmp_path / "other", "--depth", "5").data_args
    assert (hand_made.num_symbols, hand_made.depth, hand_made.num_classes) == (3, 5, None)  # one M: any depth


@pytest.mark.parametrize("extra, named", [
    (["--grammar_seed", "1"], "--grammar_seed 1"),
    (["--sigma", "2"], "--sigma 2.0"),
    (["--num_symbols", "3"], "--num_symbols 3"),
    (["--use_dataset_builder", "true"], "--use_dataset_builder true"),
    (["--sigma_curriculum_start", "3", "--sigma_curriculum_epochs", "1"], "--sigma_curriculum_start 3.0"),
    (["--arity", "2"], "--arity 2 (the file's: 3)"),
    (["--num_rules", "3"], "--num_rules 3 (the file's: 2)"),
    (["--num_classes", "4"], "--num_classes 4 (the file's: 2)"),
    (["--depth", "3"], "--depth 3 (the file's: 2)"),
])
def test_flags_of_another_grammar_are_refused_with_a_grammar_file_in_one_line(tmp_path, capsys, extra, named):
    path = grammar_file(tmp_path, "rhm")
    code = main("root", ["--grammar_file", str(path), *extra, "--output_dir", str(tmp_path / "run")], as_script=True)
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "`grammar_file`" in err and named in err
    assert not (tmp_path / "run").exists()


def test_flags_that_agree_with_a_grammar_file_are_accepted(tmp_path):
    run = file_run("root", grammar_file(tmp_path, "rhm"), tmp_path / "run", "--arity", "3", "--num_rules", "2",
                   "--num_classes", "2", "--depth", "2")
    assert run.identity == file_run("root", tmp_path / "rhm.json", tmp_path / "run").identity


@pytest.mark.parametrize("content, message", [
    (None, "does not exist"),
    ("folder", "is a folder"),
    (b"{not json", "is not valid JSON"),
    (b"\xff\xfe", "is not UTF-8 text"),
    (json.dumps({"format": "something else"}).encode(), "not a grammar description"),
    (json.dumps({"format": "hf-treelang-grammar/1", "M": [[[0.5]]], "root_prior": [1.0]}).encode(), "M"),
])
def test_a_bad_grammar_file_is_refused_in_one_line_before_any_folder_is_written(tmp_path, capsys, content, message):
    path = tmp_path / "grammar.json"
    if content == "folder":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    for task in ("root", "mlm", "clm"):
        out = tmp_path / f"run_{task}"
        code = main(task, ["--grammar_file", str(path), "--output_dir", str(out)], as_script=True)
        err = capsys.readouterr().err
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "`grammar_file`" in err and message in err
        assert not out.exists()


def test_reproduce_plans_every_run_on_a_grammar_file_and_builds_its_data_and_runs_on_it(tmp_path):
    from hf_treelang.reproduce import reproduce
    from hf_treelang.reproduce.plan import planned_runs, resolve_for_plan
    from hf_treelang.reproduce.presets import PRESETS
    from hf_treelang.reproduce.steps import Context, with_grammar_file
    from hf_treelang.train.arguments import grammar_content_hash

    path = grammar_file(tmp_path)
    grammar = Grammar.load(path)
    spec = with_grammar_file(PRESETS["tiny"], path)
    assert (spec.num_symbols, spec.grammar_sha256) == (3, grammar_content_hash(grammar))
    assert "seed_sweep" not in spec.figure_steps()  # other grammar seeds: not of a grammar file
    out = tmp_path / "out"
    planned = planned_runs(Context(out, spec, progress=False))
    assert {entry["task"] for entry in planned} == {"root", "mlm", "finetune"}
    for entry in planned:  # every run of the reproduction, the sweeps and Fig. 1f's included
        run = resolve_for_plan(entry, out)
        assert run.data_args.file_grammar() == grammar, entry["name"]
        assert run.config["data_args"]["grammar_file"] == "sha256:" + grammar_content_hash(grammar)
    reproduce(out, "tiny", progress=False, grammar_file=str(path), only=["data", "train_root"])
    assert Grammar.load(out / "data" / "grammar.json") == grammar
    assert (out / "runs" / "root" / "grammar.json").read_bytes() == path.read_bytes()
    # the runs read OUT's copy: the user's file edited afterwards changes nothing of the reproduction ...
    assert json.loads((out / "preset.json").read_text())["grammar_file"] == str((out / "grammar_file.json").resolve())
    # ... and OUT refuses a reproduction on another grammar
    other = tmp_path / "other.json"
    Grammar.random(3, 1.0, 7).save(other)
    with pytest.raises(ValueError, match="another grammar"):
        reproduce(out, "tiny", progress=False, grammar_file=str(other), only=["data"])


def test_reproduce_refuses_a_missing_grammar_file_in_one_line_before_writing_out(tmp_path, capsys):
    from hf_treelang.cli import main as cli_main

    out = tmp_path / "out"
    code = cli_main(["reproduce", "--grammar_file", str(tmp_path / "missing.json"), "--preset", "tiny", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "`grammar_file`" in err and "does not exist" in err
    assert not out.exists()


def test_fig1f_arms_of_a_grammar_files_mlm_model_train_on_its_grammar(tmp_path):
    from hf_treelang.analysis.sample_complexity import sample_complexity_sweep

    path = grammar_file(tmp_path)
    train(file_run("mlm", path, tmp_path / "mlm", "--depth", "3"))
    seen = {}

    def record(run):  # the arms' runs as resolved, not trained
        seen[run.name] = run
        return {"accuracy": 0.5, "bp_accuracy": 0.6}

    sample_complexity_sweep(tmp_path / "mlm", [16], tmp_path / "sweep", epochs=1.0, num_test=16, num_eval=8,
                            train=record, progress=False)
    assert set(seen) == {"scratch-P16", "frozen-P16", "finetuned-P16"}
    for run in seen.values():
        assert run.data_args.file_grammar() == Grammar.load(path)
        assert run.data_args.grammar_seed is None and run.data_args.use_dataset_builder is False
