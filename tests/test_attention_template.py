"""App. F's attention templates (hf_treelang.core.attention_template) and ``hf-treelang attention RUN --template``."""

import json

import numpy as np
import pytest
import torch

from hf_treelang.analysis import attention
from hf_treelang.cli import run_command
from hf_treelang.core import template_attention, template_similarity, uniform_similarity

from tiny_run import run_tiny

EXACT = 0.0  # the templates are sums of powers of 2: exact in float64
JSON_ROUNDING = 1e-5  # maps are written with 6 decimals; the similarity of a 4x4 map moves by at most 4 * 5e-7


@pytest.mark.parametrize("depth", [1, 2, 3, 5])
def test_every_template_is_row_stochastic_with_two_to_the_m_equal_weights_and_no_self_attention(depth):
    for layer in range(1, depth + 1):
        template = template_attention(depth, layer)
        assert template.shape == (2**depth, 2**depth)
        assert np.all(template >= 0)
        assert np.abs(template.sum(1) - 1.0).max() == EXACT
        assert np.all((template > 0).sum(1) == 2 ** (layer - 1))  # the 2**m leaves of the complementary subtree
        assert set(np.unique(template)) == {0.0, 2.0 ** -(layer - 1)}
        assert np.all(np.diag(template) == 0)


def test_depth_three_templates_are_the_sibling_then_the_cousin_pair_then_the_other_half():
    o, h, q = 0.0, 0.5, 0.25
    sibling = [
        [o, 1, o, o, o, o, o, o],
        [1, o, o, o, o, o, o, o],
        [o, o, o, 1, o, o, o, o],
        [o, o, 1, o, o, o, o, o],
        [o, o, o, o, o, 1, o, o],
        [o, o, o, o, 1, o, o, o],
        [o, o, o, o, o, o, o, 1],
        [o, o, o, o, o, o, 1, o],
    ]
    cousins = [
        [o, o, h, h, o, o, o, o],
        [o, o, h, h, o, o, o, o],
        [h, h, o, o, o, o, o, o],
        [h, h, o, o, o, o, o, o],
        [o, o, o, o, o, o, h, h],
        [o, o, o, o, o, o, h, h],
        [o, o, o, o, h, h, o, o],
        [o, o, o, o, h, h, o, o],
    ]
    other_half = [
        [o, o, o, o, q, q, q, q],
        [o, o, o, o, q, q, q, q],
        [o, o, o, o, q, q, q, q],
        [o, o, o, o, q, q, q, q],
        [q, q, q, q, o, o, o, o],
        [q, q, q, q, o, o, o, o],
        [q, q, q, q, o, o, o, o],
        [q, q, q, q, o, o, o, o],
    ]
    np.testing.assert_array_equal(template_attention(3, 1), np.array(sibling))
    np.testing.assert_array_equal(template_attention(3, 2), np.array(cousins))
    np.testing.assert_array_equal(template_attention(3, 3), np.array(other_half))


def test_similarity_is_one_for_the_template_itself_and_zero_for_the_disjoint_others():
    templates = np.stack([template_attention(3, t) for t in (1, 2, 3)])  # (3, 8, 8)
    np.testing.assert_array_equal(template_similarity(templates, 3), np.eye(3))
    np.testing.assert_array_equal(template_similarity(torch.from_numpy(templates), 3), np.eye(3))


def test_the_uniform_map_is_half_similar_to_the_other_half_and_less_to_the_finer_templates():
    uniform = np.full((8, 8), 1 / 8)
    np.testing.assert_allclose(template_similarity(uniform, 3), [1 / 8, 1 / 4, 1 / 2], rtol=0, atol=1e-15)
    assert [uniform_similarity(3, t) for t in (1, 2, 3)] == [1 / 8, 1 / 4, 1 / 2]


def test_a_map_between_two_templates_is_equally_similar_to_both_and_below_one():
    mixed = 0.5 * template_attention(3, 1) + 0.5 * template_attention(3, 3)
    np.testing.assert_allclose(template_similarity(mixed, 3), [0.5, 0.0, 0.5], rtol=0, atol=1e-15)


@pytest.mark.parametrize("layer", [0, 4, -1])
def test_a_layer_outside_one_to_depth_is_refused_naming_it_and_the_range(layer):
    with pytest.raises(ValueError, match=rf"`layer` must be an integer in \[1, 3\], got {layer}"):
        template_attention(3, layer)


def test_a_map_of_the_wrong_size_or_not_row_stochastic_is_refused():
    with pytest.raises(ValueError, match=r"`attention` must have shape \(\.\.\., 8, 8\) for depth 3, got \(4, 4\)"):
        template_similarity(np.full((4, 4), 0.25), 3)
    with pytest.raises(ValueError, match="`attention` rows must sum to 1"):
        template_similarity(np.full((8, 8), 0.2), 3)


@pytest.fixture(scope="module")
def tiny_mlm_run(tmp_path_factory):
    """A trained tiny MLM run (ℓ = 2, 2 layers, 12 steps) with checkpoints at steps 1 and 3 and the final model."""
    folder = tmp_path_factory.mktemp("runs") / "mlm"
    run_tiny("mlm", folder)
    return folder


def test_template_command_writes_figure_and_json_whose_numbers_are_the_core_function_of_the_maps(tiny_mlm_run,
                                                                                                  tmp_path, capsys):
    out = tmp_path / "template"
    code = run_command("attention", [str(tiny_mlm_run), "--template", "--out", str(out), "--num-samples", "64"])
    assert code == 0
    assert (out / "attention_template.png").stat().st_size > 1000
    data = json.loads((out / "attention_template.json").read_text())
    steps = [c["step"] for c in data["checkpoints"]]
    assert steps == [1, 3, 12]  # checkpoint-1, checkpoint-3, then the final model (checkpoint-12 is the same step)
    assert data["checkpoints"][-1]["checkpoint"] == str(tiny_mlm_run)
    for checkpoint in data["checkpoints"]:
        maps = np.array(checkpoint["maps"])  # (layers, L, L)
        assert maps.shape == (2, 4, 4)
        similarity = np.array(checkpoint["similarity"])  # (layers, ℓ)
        np.testing.assert_allclose(similarity, template_similarity(maps, 2), rtol=0, atol=JSON_ROUNDING)
        assert checkpoint["best_template"] == list(similarity.argmax(1) + 1)
    for entry in data["final"]:  # a layer is flagged when it is no closer to its template than a uniform map
        assert entry["above_uniform"] == (entry["similarity"] > uniform_similarity(2, entry["best_template"]))
    first = attention.average_attention(tiny_mlm_run / "checkpoint-1", num_samples=64).maps.mean(1)
    np.testing.assert_allclose(np.array(data["checkpoints"][0]["maps"]), first, rtol=0, atol=1e-6)
    printed = capsys.readouterr().out
    assert "layer 1: closest to template" in printed and "layer 2: closest to template" in printed


def test_template_command_refuses_several_folders_and_a_folder_that_is_not_a_run(tiny_mlm_run, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_command("attention", [str(tiny_mlm_run), str(tiny_mlm_run), "--template", "--out", str(out)]) == 2
    assert "--template reads one training run folder, got 2 paths" in capsys.readouterr().err
    checkpoint = tiny_mlm_run / "checkpoint-1"
    assert run_command("attention", [str(checkpoint), "--template", "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert str(checkpoint) in error and "has no run_config.json" in error
    assert not out.exists()


def _flip_last_byte(path):
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # one byte of the last tensor: same size, same header, another number
    path.write_bytes(bytes(data))


def test_a_checkpoint_rotted_after_the_run_finished_is_refused_by_every_analysis_that_reads_it(tiny_mlm_run,
                                                                                                 tmp_path):
    import shutil

    from hf_treelang.analysis import load_checkpoint
    from hf_treelang.train.folders import DamagedFile, check_run_complete

    run = shutil.copytree(tiny_mlm_run, tmp_path / "run")
    _flip_last_byte(run / "checkpoint-1" / "model.safetensors")
    for analysis in (lambda: load_checkpoint(run / "checkpoint-1"),
                     lambda: attention.template_dynamics(run, num_samples=8)):
        with pytest.raises(DamagedFile) as refused:
            analysis()
        line = str(refused.value)
        assert "\n" not in line and "checkpoint-1" in line and "model.safetensors is damaged" in line, line
        assert "sha256" in line and f"rm -r {str(run / 'checkpoint-1')!r}" in line, line
    check_run_complete(run)  # the run itself stays finished: its final model is intact
    load_checkpoint(run)


def test_a_removed_checkpoint_leaves_the_run_finished_and_its_dynamics_go_without_it(tiny_mlm_run, tmp_path):
    import shutil

    from hf_treelang.analysis import load_checkpoint
    from hf_treelang.train.folders import check_run_complete

    run = shutil.copytree(tiny_mlm_run, tmp_path / "run")
    shutil.rmtree(run / "checkpoint-1")
    check_run_complete(run)
    assert list(attention.template_dynamics(run, num_samples=8).steps) == [3, 12]
    with pytest.raises(ValueError, match="checkpoint-1' does not exist"):
        load_checkpoint(run / "checkpoint-1")


def test_a_rotted_checkpoint_of_a_finished_run_of_another_architecture_is_refused_too(tmp_path):
    from hf_treelang.analysis import load_checkpoint
    from hf_treelang.train.folders import DamagedFile, checkpoints
    from hf_treelang.train.loop import main

    run = tmp_path / "gpt2"
    tiny = ["--depth", "2", "--num_symbols", "3", "--num_train", "32", "--num_eval", "8", "--num_test", "8",
            "--per_device_train_batch_size", "8", "--max_steps", "4", "--num_evaluations", "1", "--num_checkpoints",
            "2", "--disable_tqdm", "true", "--report_to", "none", "--cpu_threads", "1", "--use_dataset_builder",
            "false", "--model_type", "gpt2", "--config_overrides", "n_embd=16,n_layer=1,n_head=1"]
    assert main("clm", [*tiny, "--output_dir", str(run)], as_script=True) == 0
    (_, first), *_ = checkpoints(run)
    _flip_last_byte(first / "model.safetensors")
    with pytest.raises(DamagedFile, match=rf"{first.name}'.*model.safetensors is damaged \(its content differs"):
        load_checkpoint(first)
    load_checkpoint(run)  # the run itself stays finished
