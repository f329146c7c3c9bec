"""App. F's BP transformer: ℓ attention layers whose built weights compute BP_0 exactly, and the positive control of
every analysis (the BP-KL callback, the attention templates, the findings check of Fig. 1e, the probes)."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from hf_treelang.analysis.construction import write_bp_transformer
from hf_treelang.core.bp import BeliefPropagation
from hf_treelang.core.grammar import Grammar
from hf_treelang.core.metrics import kl_divergence
from hf_treelang.core.sampling import sample_trees
from hf_treelang.models.bp_transformer import build_bp_transformer


def _inputs(grammar: Grammar, depth: int, n: int = 48, seed: int = 1) -> torch.Tensor:
    """(n, 2**ℓ) sampled leaves with ~30 % masked, the first row all masked, the second none."""
    q = grammar.num_symbols
    leaves = torch.from_numpy(sample_trees(grammar, n, depth, 0, seed).leaves)
    masked = leaves.clone()
    masked[torch.rand(masked.shape, generator=torch.Generator().manual_seed(seed)) < 0.3] = q
    masked[0] = q
    masked[1] = leaves[1]
    return masked


CASES = [(4, 4, 1.0, 0), (2, 2, 1.0, 3), (3, 3, 2.0, 5), (8, 6, 1.0, 7), (2, 6, 0.5, 1), (3, 6, 1.0, 2),
         (8, 2, 1.0, 4), (2, 3, 3.0, 6)]


@pytest.mark.parametrize("q, depth, sigma, seed", CASES)
@pytest.mark.parametrize("task", ["root", "mlm"])
def test_the_construction_is_bp0_to_float_rounding_with_depth_attention_layers(q, depth, sigma, seed, task):
    grammar = Grammar.random(q, sigma, seed)
    inputs = _inputs(grammar, depth)
    bp = BeliefPropagation(grammar, depth)
    reference = bp.root_marginals(inputs) if task == "root" else bp.leaf_marginals(inputs)  # float64
    exact = build_bp_transformer(grammar, depth, task=task, dtype=torch.float64)
    assert exact.config.num_hidden_layers == depth == len(exact.bp.layers)
    with torch.no_grad():
        # the symbols' columns: a masked-LM's logits also cover [MASK] and [PAD] (probability 0)
        probabilities = torch.softmax(exact(input_ids=inputs).logits, -1)[..., :q]
        single = torch.softmax(build_bp_transformer(grammar, depth, task=task)(input_ids=inputs).logits, -1)[..., :q]
    assert probabilities.shape == reference.shape
    assert (probabilities - reference).abs().max() <= 1e-5  # float64 (measured: ~1e-15)
    assert (single.double() - reference).abs().max() <= 1e-4  # float32 (measured: ~1e-6)


def _near_deterministic(q: int, seed: int, concentration: float = 0.02) -> Grammar:
    """Rules M[a] ~ Dirichlet(0.02) over the q² child pairs: most of each row's mass on one or two pairs, the other
    rules down to 1e-90 and below (under float32's smallest number), some exactly 0."""
    rng = np.random.default_rng(seed)
    return Grammar(rng.dirichlet(np.full(q * q, concentration), size=q).reshape(q, q, q))


# (q, ℓ, grammar seed) of near-deterministic grammars
NEAR_DETERMINISTIC = [(4, 3, 0), (3, 3, 1), (4, 4, 2), (2, 3, 3), (3, 2, 4)]
# |log m - log p| on every entry BP_0 gives probability p > 0: the dtype's rounding of log-values up to |log p|
LOG_TOLERANCE = {torch.float64: 1e-11, torch.float32: 1e-4}


@pytest.mark.parametrize("q, depth, seed", NEAR_DETERMINISTIC)
@pytest.mark.parametrize("task", ["root", "mlm"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_construction_gives_bp0s_log_probabilities_on_near_deterministic_grammars(q, depth, seed, task, dtype):
    grammar = _near_deterministic(q, seed)
    inputs = _inputs(grammar, depth, n=32, seed=seed)
    bp = BeliefPropagation(grammar, depth)
    reference = (bp.root_marginals(inputs) if task == "root" else bp.leaf_marginals(inputs)).reshape(-1, q)
    with torch.no_grad():
        logits = build_bp_transformer(grammar, depth, task=task, dtype=dtype)(input_ids=inputs).logits
    log_model = torch.log_softmax(logits.double(), -1)[..., :q].reshape(-1, q)
    possible = reference > 0
    assert bool(torch.isfinite(logits).all())
    error = (log_model[possible] - reference[possible].log()).abs().max()
    assert error <= LOG_TOLERANCE[dtype], (error, reference[possible].min())
    assert bool((log_model[~possible].exp() == 0).all())  # what BP_0 rules out, the construction rules out
    assert float(kl_divergence(reference, log_model).max()) <= 1e-10


def test_the_bp_kl_callback_finds_the_float32_construction_at_bp0_on_a_near_deterministic_grammar():
    from hf_treelang.train.callbacks import BPKLCallback

    grammar, depth = _near_deterministic(4, 0), 3
    in_sample = sample_trees(grammar, 200, depth, 0, 11)
    tests = {k: (lambda s: (s.leaves, s.roots))(sample_trees(grammar, 64, depth, k, 12)) for k in range(depth + 1)}
    callback = BPKLCallback(grammar, depth, 0, "mlm", in_sample.leaves, tests, seed=0, batch_size=64)
    values = callback.compute(build_bp_transformer(grammar, depth, task="mlm"))
    kls = {k: values[f"eval_kl_bp_k{k}"] for k in range(depth + 1)}
    assert kls[0] <= 1e-6 and min(kls, key=kls.get) == 0, kls


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("task", ["root", "mlm"])
def test_every_logit_and_hidden_state_of_the_construction_is_finite_in_half_precision(dtype, task):
    grammar = _near_deterministic(3, 1)
    inputs = _inputs(grammar, 3, n=8)
    with torch.no_grad():
        output = build_bp_transformer(grammar, 3, task=task, dtype=dtype)(input_ids=inputs, output_hidden_states=True)
    assert output.logits.dtype == dtype and bool(torch.isfinite(output.logits).all())
    assert all(bool(torch.isfinite(state).all()) for state in output.hidden_states)


def test_a_random_hierarchy_model_with_rules_per_level_is_built_too():
    grammar = Grammar.random_hierarchy(num_symbols=6, num_classes=3, num_rules=3, arity=2, depth=3, grammar_seed=2)
    leaves = torch.from_numpy(sample_trees(grammar, 32, 3, 0, 0).leaves)
    leaves[:, ::3] = 6
    model = build_bp_transformer(grammar, 3, task="mlm", dtype=torch.float64)
    with torch.no_grad():
        probabilities = torch.softmax(model(input_ids=leaves).logits, -1)[..., :6]
    assert (probabilities - BeliefPropagation(grammar, 3).leaf_marginals(leaves)).abs().max() <= 1e-5


def test_the_construction_refuses_what_it_does_not_build():
    with pytest.raises(ValueError, match="`filter_level` must be 0"):
        build_bp_transformer(Grammar.random(4, 1.0, 0), 3, filter_level=1)
    with pytest.raises(ValueError, match="binary trees"):
        build_bp_transformer(Grammar.random_hierarchy(4, 2, 2, 3, 2), 2)
    with pytest.raises(ValueError, match="`task` must be one of"):
        build_bp_transformer(Grammar.random(4, 1.0, 0), 3, task="clm")


def test_it_saves_and_loads_back_unchanged_and_without_hf_treelang(tmp_path):
    grammar = Grammar.random(4, 1.0, 0)
    model = build_bp_transformer(grammar, 3, task="mlm")
    model.save_pretrained(tmp_path)
    inputs = _inputs(grammar, 3, n=4)
    from transformers import AutoModelForMaskedLM

    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=inputs).logits, model(input_ids=inputs).logits)
    code = (f"import sys, torch; from transformers import AutoModelForMaskedLM; "
            f"m = AutoModelForMaskedLM.from_pretrained({str(tmp_path)!r}, trust_remote_code=True).eval(); "
            f"print(m(input_ids=torch.tensor({inputs.tolist()})).logits.softmax(-1).tolist()); "
            f"print('hf_treelang' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-1500:]
    probabilities, imported = done.stdout.strip().splitlines()[-2:]
    with torch.no_grad():
        expected = model(input_ids=inputs).logits.softmax(-1)
    assert imported == "False" and np.allclose(json.loads(probabilities), expected.numpy(), atol=1e-6)


# ---------------------------------------------------------------- the positive controls


def test_the_bp_kl_callback_finds_the_construction_at_bp0():
    from hf_treelang.train.callbacks import BPKLCallback

    grammar, depth = Grammar.random(4, 1.0, 0), 3
    in_sample = sample_trees(grammar, 200, depth, 0, 11)
    tests = {k: (lambda s: (s.leaves, s.roots))(sample_trees(grammar, 64, depth, k, 12)) for k in range(depth + 1)}
    callback = BPKLCallback(grammar, depth, 0, "mlm", in_sample.leaves, tests, seed=0, batch_size=64)
    values = callback.compute(build_bp_transformer(grammar, depth, task="mlm"))
    kls = {k: values[f"eval_kl_bp_k{k}"] for k in range(depth + 1)}
    assert kls[0] <= 1e-6 and min(kls, key=kls.get) == 0
    assert values["eval_match_bp"] == 1.0


@pytest.fixture(scope="module")
def construction(tmp_path_factory):
    return write_bp_transformer(tmp_path_factory.mktemp("bp") / "mlm", Grammar.random(4, 1.0, 0), 3, task="mlm")


def test_the_attention_of_the_construction_is_app_f_template_layer_by_layer(construction, tmp_path):
    from hf_treelang.analysis.attention import template_dynamics

    result = template_dynamics(construction, num_samples=256)
    similarity = np.asarray(result.similarity[-1])  # (layers, ℓ): layer t against template t'
    assert np.allclose(np.diag(similarity), 1.0, atol=1e-6)  # the template distance is ~0
    assert [entry["best_template"] for entry in result.final_layers()] == [1, 2, 3]


def test_the_fig1e_check_reproduces_on_the_construction(construction, tmp_path):
    from hf_treelang.analysis.attention import average_attention
    from hf_treelang.reproduce import findings

    maps = average_attention(construction, num_samples=256)
    folder = tmp_path / "attention" / "mlm"
    folder.mkdir(parents=True)
    (folder / "attention.json").write_text(json.dumps({"models": [json.loads(json.dumps(
        maps.to_dict(), default=lambda value: value.tolist()))]}))
    check = next(c for c in findings.CHECKS if c.figure == "1e")
    finding = check(tmp_path)
    assert finding.verdict == "reproduced", finding
    assert finding.measured["tree_distance_per_layer"] == pytest.approx([1.0, 2.0, 3.0])


def test_the_probes_find_each_ancestor_at_the_layer_that_writes_its_message_and_not_before(tmp_path):
    from hf_treelang.analysis.probing import probe

    depth = 2
    folder = write_bp_transformer(tmp_path / "mlm", Grammar.random(4, 1.0, 0), depth, task="mlm")
    result = probe(folder, levels=[0, 1], num_train=1024, num_validation=256, num_test=512, epochs=15,
                   batch_size=64, learning_rate=3e-3, progress=False)
    accuracy = np.asarray(result.accuracy)  # (layers 0..ℓ, levels 0..1)
    bp = np.asarray(result.bp_accuracy)
    for column, level in enumerate([0, 1]):
        written = depth - level  # the message of the level-v ancestor is written by layer ℓ - v
        assert accuracy[written, column] >= bp[column] - 0.03, (level, accuracy[:, column], bp[column])
        assert accuracy[written - 1, column] <= accuracy[written, column] - 0.1, (level, accuracy[:, column])


# ---------------------------------------------------------------- hf-treelang construct: folders, metadata, ranges


def _snapshot(folder) -> dict:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def _construct(argv: list, capsys) -> tuple:
    from hf_treelang.cli import main

    status = main(["construct", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.fixture
def training_run(tmp_path):
    """A folder as training leaves it: its run_config.json (written first), config, weights, grammar."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "run_config.json").write_text(json.dumps({"task": "mlm", "data_args": {"num_symbols": 4, "depth": 2},
                                                     "model_args": {"model_type": "treelang"},
                                                     "training_args": {"output_dir": str(run)}}))
    (run / "config.json").write_text(json.dumps({"model_type": "treelang", "num_symbols": 4}))
    (run / "model.safetensors").write_bytes(b"trained weights")
    Grammar.random(4, 1.0, 0).save(run / "grammar.json")
    return run


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_construct_refuses_a_training_run_folder_before_writing_anything(training_run, overwrite, capsys):
    before = _snapshot(training_run)
    status, out, err = _construct([str(training_run), "--depth", "2", *overwrite], capsys)
    assert status == 2 and out == "" and err.count("\n") == 1
    assert "training run" in err and str(training_run) in err
    assert _snapshot(training_run) == before


def test_construct_refuses_a_folder_holding_a_users_own_files(tmp_path, capsys):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "config.json").write_text('{"mine": true}')
    for overwrite in ([], ["--overwrite"]):
        status, _, err = _construct([str(folder), "--depth", "2", *overwrite], capsys)
        assert status == 2 and err.count("\n") == 1 and "not empty (config.json)" in err
    assert _snapshot(folder) == {"config.json": b'{"mine": true}'}


def test_construct_replaces_an_earlier_construction_only_with_overwrite_and_only_that(tmp_path, capsys):
    folder = tmp_path / "bp"
    assert _construct([str(folder), "--depth", "2"], capsys)[0] == 0
    first = _snapshot(folder)
    status, _, err = _construct([str(folder), "--depth", "3"], capsys)
    assert status == 2 and "--overwrite" in err and _snapshot(folder) == first
    status, out, _ = _construct([str(folder), "--depth", "3", "--overwrite"], capsys)
    assert status == 0 and "wrote the BP_0 construction" in out
    assert json.loads((folder / "config.json").read_text())["depth"] == 3
    from hf_treelang.train.folders import check_run_complete

    check_run_complete(folder)
    (folder / "notes.txt").write_text("mine")
    second = _snapshot(folder)
    status, _, err = _construct([str(folder), "--depth", "2", "--overwrite"], capsys)
    assert status == 2 and "notes.txt" in err and _snapshot(folder) == second


@pytest.mark.parametrize("sigma", ["0", "0.123456789"])
def test_construct_records_the_grammars_sigma_everywhere_and_a_command_that_rebuilds_it(tmp_path, sigma, capsys):
    import shlex

    from hf_treelang.analysis.checkpoint import load_checkpoint

    folder = tmp_path / "bp"
    assert _construct([str(folder), "--depth", "2", "--sigma", sigma, "--grammar-seed", "3"], capsys)[0] == 0
    config = json.loads((folder / "config.json").read_text())
    grammar = Grammar.load(folder / "grammar.json")
    data = json.loads((folder / "run_config.json").read_text())
    assert config["sigma"] == grammar.params["sigma"] == data["data_args"]["sigma"] == float(sigma)
    assert config["grammar_seed"] == grammar.params["grammar_seed"] == data["data_args"]["grammar_seed"] == 3
    assert load_checkpoint(folder).grammar == grammar  # the analyses read it
    command = shlex.split(data["command"])
    assert command[:3] == ["hf-treelang", "construct", str(folder)]
    again = tmp_path / "again"
    assert _construct([str(again), *command[3:]], capsys)[0] == 0
    assert Grammar.load(again / "grammar.json") == grammar
    assert (again / "model.safetensors").read_bytes() == (folder / "model.safetensors").read_bytes()


def test_the_metadata_records_only_what_the_grammar_has(tmp_path):
    from hf_treelang.analysis.checkpoint import load_checkpoint

    rng = np.random.default_rng(0)
    array = Grammar(rng.dirichlet(np.ones(9), size=3).reshape(3, 3, 3))
    config = build_bp_transformer(array, 2).config
    assert config.sigma is None and config.grammar_seed is None
    rhm = Grammar.random_hierarchy(num_symbols=4, num_classes=2, num_rules=2, arity=2, depth=2, grammar_seed=5)
    labelled = Grammar(array.M, params={"num_symbols": 3, "sigma": 1.0, "grammar_seed": 0})  # not that draw
    for name, grammar in (("array", array), ("rhm", rhm), ("labelled", labelled)):
        folder = write_bp_transformer(tmp_path / name, grammar, 2)
        data = json.loads((folder / "run_config.json").read_text())
        assert "command" not in data, name  # no command builds these grammars
        assert load_checkpoint(folder).grammar == grammar
    rhm_data = json.loads((tmp_path / "rhm" / "run_config.json").read_text())["data_args"]
    assert "sigma" not in rhm_data
    assert {key: rhm_data[key] for key in ("num_classes", "num_rules", "arity", "grammar_seed")} == {
        "num_classes": 2, "num_rules": 2, "arity": 2, "grammar_seed": 5}
    rhm_config = json.loads((tmp_path / "rhm" / "config.json").read_text())
    assert rhm_config["sigma"] is None and rhm_config["grammar_seed"] == 5
    array_data = json.loads((tmp_path / "array" / "run_config.json").read_text())["data_args"]
    assert "sigma" not in array_data and "grammar_seed" not in array_data


@pytest.mark.parametrize("beta", ["1", "29.9", "1e308", "1001", "nan"])
def test_construct_refuses_a_beta_that_does_not_give_bp0_in_one_line(tmp_path, beta, capsys):
    from hf_treelang.models.configuration_bp_transformer import MAX_BETA, MIN_BETA

    status, out, err = _construct([str(tmp_path / "bp"), "--depth", "2", "--beta", beta], capsys)
    assert status == 2 and out == "" and err.count("\n") == 1
    assert "`beta`" in err and f"[{MIN_BETA:g}, {MAX_BETA:g}]" in err and "Traceback" not in err
    assert not (tmp_path / "bp").exists()
    with pytest.raises(ValueError, match="`beta` must be"):
        build_bp_transformer(Grammar.random(4, 1.0, 0), 2, beta=True)


def test_at_either_end_of_its_beta_range_the_construction_is_bp0():
    from hf_treelang.models.configuration_bp_transformer import MAX_BETA, MIN_BETA

    grammar, depth = Grammar.random(3, 1.0, 2), 5
    inputs = _inputs(grammar, depth, n=16)
    reference = BeliefPropagation(grammar, depth).leaf_marginals(inputs)
    for beta in (MIN_BETA, MAX_BETA):
        with torch.no_grad():
            model = build_bp_transformer(grammar, depth, task="mlm", beta=beta, dtype=torch.float64)
            probabilities = torch.softmax(model(input_ids=inputs).logits, -1)[..., :3]
        assert (probabilities - reference).abs().max() <= 1e-12, beta


@pytest.mark.parametrize("argv, allowed", [(["--depth", "11"], "[1, 10]"), (["--depth", "17"], "[1, 10]"),
                                           (["--num-symbols", "17"], "[2, 16]"),
                                           (["--num-symbols", "300"], "[2, 16]")])
def test_construct_names_the_range_it_enforces(tmp_path, argv, allowed, capsys):
    status, _, err = _construct([str(tmp_path / "bp"), *argv], capsys)
    assert status == 2 and allowed in err and err.count("\n") == 1


def test_the_command_line_states_the_construction_ranges_of_the_model():
    from hf_treelang import cli
    from hf_treelang.models import configuration_bp_transformer as limits

    assert cli.CONSTRUCT_MAX_NUM_SYMBOLS == limits.MAX_NUM_SYMBOLS
    assert cli.CONSTRUCT_MAX_DEPTH == limits.MAX_DEPTH
    assert cli.CONSTRUCT_BETA_RANGE == (limits.MIN_BETA, limits.MAX_BETA)
