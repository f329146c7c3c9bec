"""The tiny training run the training tests share: ℓ = 2, q = 3, a 2-layer 32-wide model, 96 sequences, 1 epoch."""

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
