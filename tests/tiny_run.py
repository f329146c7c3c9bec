"""The tiny training run the training tests share: ℓ = 2, q = 3, a 2-layer 32-wide model, 96 sequences, 1 epoch."""

import torch
from hf_treelang.train.loop import train
from hf_treelang.train.run import runs_from_command_line

TINY = ["--depth", "2", "--num_symbols", "3", "--hidden_size", "32", "--num_hidden_layers", "2",
        "--intermediate_size", "32", "--num_train", "96", "--num_eval", "20", "--num_test", "16",
        "--per_device_train_batch_size", "8", "--num_train_epochs", "1", "--num_evaluations", "3",
        "--num_checkpoints", "3", "--disable_tqdm", "true", "--report_to", "none", "--cpu_threads", "1",
        "--use_dataset_builder", "false"]


def tiny_run(task, output_dir, *extra):
    """The resolved tiny run of ``task`` into ``output_dir`` with ``extra`` flags."""
    (run,), _ = runs_from_command_line(task, TINY + ["--output_dir", str(output_dir), *extra])
    return run


def run_tiny(task, output_dir, *extra):
    """Train the tiny run of ``task`` into ``output_dir`` with ``extra`` flags; returns the TrainingResult."""
    return train(tiny_run(task, output_dir, *extra))


def weights_close(first: dict, second: dict, atol: float = 1e-5) -> bool:
    """Two state dicts of runs that differ in float rounding only, equal to ``atol``, except the attentions' key
    biases: softmax does not depend on them, so their gradient is rounding noise that Adam scales to ±lr per step."""
    for key, value in first.items():
        other = second[key]
        if key.endswith("in_proj.bias"):  # [query; key; value] biases
            width = value.shape[-1] // 3
            value = torch.cat([value[..., :width], value[..., 2 * width:]], dim=-1)
            other = torch.cat([other[..., :width], other[..., 2 * width:]], dim=-1)
        if not torch.allclose(value, other, rtol=0, atol=atol):
            return False
    return True


def run_script(task, argv):
    """``python training/run_TASK.py ARGV`` run in this interpreter as its entry point runs it (its ``sys.argv``):
    returns (exit status, stdout, stderr)."""
    import contextlib
    import io
    import runpy
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "training" / f"run_{task}.py"
    out, err, before = io.StringIO(), io.StringIO(), sys.argv
    sys.argv = [str(script), *map(str, argv)]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            runpy.run_path(str(script), run_name="__main__")
        code = 0
    except SystemExit as stop:
        code = stop.code
    finally:
        sys.argv = before
    return code, out.getvalue(), err.getvalue()
