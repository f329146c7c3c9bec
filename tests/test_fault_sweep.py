"""The defects of a fault sweep (issue 42, items 5-10): each a case that gave a silent wrong answer, a raw traceback
or a hang, now a clear result or one line naming what to change."""

import json

import pytest
import torch
from transformers import Trainer

from hf_treelang.models.architectures import ArchitectureError, patch_config
from hf_treelang.train.loop import main, train
from hf_treelang.train.run import resolve
from hf_treelang.train.trainer import EvaluatesEveryRow

TINY = {"depth": 2, "num_symbols": 3, "num_train": 64, "num_eval": 16, "num_test": 16, "max_steps": 4,
        "per_device_train_batch_size": 8, "num_evaluations": 1, "num_checkpoints": 0, "report_to": "none",
        "disable_tqdm": True, "cpu_threads": 1, "use_dataset_builder": False}
BERT = {"model_type": "bert", "config_overrides": "hidden_size=16,num_hidden_layers=1,num_attention_heads=1,"
                                                   "intermediate_size=32"}


def _bert_config_file(folder, hidden_size: int = 16):
    from transformers import BertConfig

    folder.mkdir(parents=True, exist_ok=True)
    BertConfig(hidden_size=hidden_size, num_hidden_layers=1, num_attention_heads=1,
               intermediate_size=32).to_json_file(folder / "config.json")
    return folder / "config.json"


# ---------------------------------------------------------------- 5: silent wrong answers


def test_a_config_file_is_part_of_the_run_identity_by_its_content(tmp_path):
    path = _bert_config_file(tmp_path / "cfg")
    first = resolve("mlm", {**TINY, "config_name": str(path)}, tmp_path / "a")
    again = resolve("mlm", {**TINY, "config_name": str(path)}, tmp_path / "b")
    _bert_config_file(tmp_path / "cfg", hidden_size=32)  # the same path, another file
    edited = resolve("mlm", {**TINY, "config_name": str(path)}, tmp_path / "c")
    assert first.identity == again.identity != edited.identity
    assert first.config["model_args"]["config_name"].startswith("sha256:")


def test_a_config_file_run_records_the_files_architecture(tmp_path):
    path = _bert_config_file(tmp_path / "cfg")
    run = resolve("mlm", {**TINY, "config_name": str(path)}, tmp_path / "run")
    assert run.model_args.model_type == "bert" and not run.model_args.is_treelang
    train(run)
    recorded = json.loads((tmp_path / "run" / "run_config.json").read_text())
    assert recorded["model_args"]["model_type"] == "bert"
    assert "A `treelang` model" not in (tmp_path / "run" / "README.md").read_text()


@pytest.mark.parametrize("model_type", ["bart", "t5"])
def test_an_encoder_decoder_model_is_refused_in_one_line(model_type):
    with pytest.raises(ArchitectureError, match="is an encoder-decoder model: its decoder would read the labels"):
        patch_config(model_type, "mlm", 3, 2)


def test_sample_complexity_of_an_rhm_checkpoint_trains_every_arm_on_its_grammar(tmp_path):
    from hf_treelang.analysis.sample_complexity import sample_complexity_sweep

    rhm = {**TINY, "num_symbols": 4, "num_rules": 2, "hidden_size": 16, "num_hidden_layers": 2,
           "intermediate_size": 16, "num_checkpoints": 1}
    train(resolve("mlm", rhm, tmp_path / "mlm"))
    seen = []

    def record(run):
        seen.append(run)
        return {"accuracy": 0.5, "bp_accuracy": 0.6}

    sample_complexity_sweep(tmp_path / "mlm", [16], tmp_path / "sweep", epochs=1.0, num_test=16, num_eval=16,
                            use_dataset_builder=False, train=record, progress=False)
    assert sorted(run.task for run in seen) == ["finetune", "finetune", "root"]
    for run in seen:
        assert (run.data_args.num_rules, run.data_args.num_classes, run.data_args.sequence_arity) == (2, 4, 2)


def test_fp16_on_a_cpu_is_refused_rather_than_trained_in_fp32(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("fp16 is the GPU's")
    with pytest.raises(ValueError, match="`fp16` needs a CUDA GPU"):
        resolve("root", {**TINY, "fp16": True}, tmp_path)


def test_dropping_the_last_training_batch_keeps_every_evaluation_row():
    class Rows(torch.utils.data.Dataset):
        def __len__(self):
            return 20

        def __getitem__(self, index):
            return {"input_ids": torch.tensor([index]), "labels": torch.tensor(0)}

    class Kept(EvaluatesEveryRow, Trainer):
        pass

    from transformers import TrainingArguments

    args = TrainingArguments(output_dir="unused", per_device_eval_batch_size=8, dataloader_drop_last=True,
                             report_to="none", use_cpu=True)
    model = torch.nn.Linear(1, 1)
    assert len(Trainer(model=model, args=args, eval_dataset=Rows()).get_eval_dataloader()) == 2  # 16 of 20 rows
    kept = Kept(model=model, args=args, eval_dataset=Rows())
    assert len(kept.get_eval_dataloader()) == 3 and kept.args.dataloader_drop_last  # all 20; training still drops


# ---------------------------------------------------------------- 8: one line before any work


def test_a_schedule_missing_its_arguments_is_refused_before_any_work(tmp_path):
    with pytest.raises(ValueError, match="`lr_scheduler_type` 'cosine_with_min_lr' .* cannot be built"):
        resolve("root", {**TINY, "lr_scheduler_type": "cosine_with_min_lr"}, tmp_path / "run")
    assert not (tmp_path / "run").exists()
    resolve("root", {**TINY, "lr_scheduler_type": "cosine_with_min_lr", "lr_scheduler_kwargs": {"min_lr": 1e-5}},
            tmp_path / "ok")
