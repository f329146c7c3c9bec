"""The defects of a fault sweep (issue 42, items 5-10): each a case that gave a silent wrong answer, a raw traceback
or a hang, now a clear result or one line naming what to change."""

import json
import re

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


def test_the_fp16_refusal_advises_flags_that_train_on_this_machine(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("fp16 is the GPU's")
    from hf_treelang.train.loop import runs_from_command_line

    argv = ["--depth", "2", "--num_symbols", "3", "--max_steps", "4", "--report_to", "none"]
    with pytest.raises(ValueError, match="`fp16` needs a CUDA GPU") as refused:
        runs_from_command_line("mlm", [*argv, "--output_dir", str(tmp_path / "refused"), "--fp16", "true"])
    advised = [part for flag in re.findall(r"(--\w+) (true|false)", str(refused.value)) for part in flag]
    assert advised[:2] == ["--bf16", "true"]
    (run,), _ = runs_from_command_line("mlm", [*argv, "--output_dir", str(tmp_path / "advised"), *advised])
    assert run.training_args.bf16 and not run.training_args.fp16  # what it advises is accepted on this machine


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


# ---------------------------------------------------------------- 6, 7, 8: other architectures, before any work

OTHER = ["--depth", "2", "--num_symbols", "3", "--num_train", "64", "--num_eval", "16", "--num_test", "16",
         "--per_device_train_batch_size", "8", "--max_steps", "2", "--num_evaluations", "1", "--num_checkpoints", "0",
         "--disable_tqdm", "true", "--report_to", "none", "--cpu_threads", "1", "--use_dataset_builder", "false"]


def _refused(task, out, capsys, *flags) -> str:
    assert main(task, [*OTHER, "--output_dir", str(out), *flags], as_script=True) == 2
    lines = [line for line in capsys.readouterr().err.strip().splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert not out.exists()  # nothing made
    return lines[0]


@pytest.mark.parametrize("model_type, overrides", [
    ("bert", "hidden_size=64,num_hidden_layers=1,num_attention_heads=1,max_position_embeddings=100000000"),
    ("bert", "hidden_size=64,num_hidden_layers=1,num_attention_heads=1,type_vocab_size=100000000"),
    ("gpt2", "n_embd=64,n_layer=1,n_head=1,n_positions=100000000"),
])
def test_the_memory_of_another_architecture_is_its_parameter_count_on_the_meta_device(model_type, overrides,
                                                                                       tmp_path, capsys):
    line = _refused("mlm" if model_type == "bert" else "clm", tmp_path / "run", capsys, "--model_type", model_type,
                    "--config_overrides", overrides)
    assert "the model's 6,400," in line and "parameters need about 102." in line, line


def test_a_config_file_with_code_of_its_own_is_refused_unless_trusted(tmp_path, capsys):
    path = _bert_config_file(tmp_path / "cfg")
    config = json.loads(path.read_text())
    config["auto_map"] = {"AutoConfig": "configuration_mine.MineConfig"}
    path.write_text(json.dumps(config))
    line = _refused("mlm", tmp_path / "run", capsys, "--config_name", str(path))
    assert "has an auto_map" in line and "--trust_remote_code true" in line


@pytest.mark.parametrize("task, model_type, overrides, message", [
    ("mlm", "bert", "hidden_size=-1,num_hidden_layers=1,num_attention_heads=1", "cannot be built"),
    ("mlm", "bert", "hidden_size=16,num_hidden_layers=1,num_attention_heads=0", "num_attention_heads"),
    ("root", "rwkv", "hidden_size=16,num_hidden_layers=1", ""),
    ("mlm", "bert", "hidden_size=16,num_hidden_layers=1,num_attention_heads=1,hidden_act=foo", "foo"),
    ("mlm", "bert", "hidden_size=16,num_hidden_layers=1,num_attention_heads=1,output_attentions=true",
     "leave output_attentions unset"),
    ("mlm", "bert", "hidden_size=16,num_hidden_layers=1,num_attention_heads=1,dtype=float16", "leave dtype unset"),
    ("clm", "xlnet", "d_model=16,n_layer=1,n_head=1,d_inner=32", "cannot be fitted"),
    ("root", "bert", "hidden_size=16,num_hidden_layers=1,num_attention_heads=1,__class__=x", "is not a config field"),
])
def test_an_architecture_that_cannot_build_or_take_a_first_step_is_one_line(task, model_type, overrides, message,
                                                                             tmp_path, capsys):
    line = _refused(task, tmp_path / "run", capsys, "--model_type", model_type, "--config_overrides", overrides)
    assert line.startswith("__main__.py: error:") or "error:" in line, line
    assert message in line, line


def test_an_architecture_whose_training_step_fails_at_2_to_the_l_leaves_is_one_line_before_any_work(tmp_path, capsys):
    from transformers import ReformerConfig

    (tmp_path / "cfg").mkdir()
    ReformerConfig(hidden_size=16, num_attention_heads=1, attention_head_size=16, feed_forward_size=32,
                   axial_pos_embds_dim=[8, 8], attn_layers=["local"], is_decoder=True).to_json_file(
        tmp_path / "cfg" / "config.json")  # its positions need 64 × 64 tokens in training, not 4
    line = _refused("clm", tmp_path / "run", capsys, "--config_name", str(tmp_path / "cfg"))
    assert "reformer cannot run sequences of 4 leaves" in line and "axial_pos_shape" in line


# ---------------------------------------------------------------- 10: claims, a user's value, messages, tokens


@pytest.mark.parametrize("content", ["", "garbage", "[1, 2]", '{"host": "x"}', '{"host": "x", "pid": true}'])
def test_an_unreadable_claim_is_garbage_taken_over_once_it_has_had_time_to_be_written(content, tmp_path):
    import os
    import time

    from hf_treelang import claims

    folder = tmp_path / "run"
    folder.mkdir()
    (folder / claims.CLAIM_FILE).write_text(content)
    with pytest.raises(claims.FolderTaken, match="holds an unreadable claim .* names no process"):
        with claims.claim_folder(folder, "output_dir"):
            pass
    old = time.time() - 2 * claims.UNREADABLE_STALE_S
    os.utime(folder / claims.CLAIM_FILE, (old, old))
    with claims.claim_folder(folder, "output_dir"):  # taken over: not held for ten minutes
        assert claims._ours(json.loads((folder / claims.CLAIM_FILE).read_text()))


@pytest.mark.parametrize("pid", [0, -1, 1])
def test_a_claim_naming_no_real_process_never_blocks_a_folder(pid, tmp_path):
    import os
    import socket
    import time

    from hf_treelang import claims

    folder = tmp_path / "run"
    folder.mkdir()
    (folder / claims.CLAIM_FILE).write_text(json.dumps({"host": socket.gethostname(), "pid": pid}))
    old = time.time() - 2 * claims.UNREADABLE_STALE_S
    os.utime(folder / claims.CLAIM_FILE, (old, old))
    with claims.claim_folder(folder, "output_dir"):
        pass


def test_a_claim_that_is_a_folder_is_one_line(tmp_path):
    from hf_treelang import claims

    (tmp_path / "run" / claims.CLAIM_FILE).mkdir(parents=True)
    with pytest.raises(claims.FolderTaken, match="is a folder, not a claim: remove it"):
        with claims.claim_folder(tmp_path / "run", "output_dir"):
            pass


def test_a_users_problem_type_is_refused_not_replaced():
    with pytest.raises(ArchitectureError, match="problem_type='regression'"):
        patch_config("bert", "root", 3, 2, config_overrides="hidden_size=16,num_hidden_layers=1,num_attention_heads=1,"
                                                            "problem_type=regression")


def test_compare_names_the_file_of_a_value_it_cannot_read(tmp_path, capsys):
    from hf_treelang import cli

    run = tmp_path / "run"
    train(resolve("root", {**TINY, "hidden_size": 16, "num_hidden_layers": 1, "intermediate_size": 16}, run))
    metrics = json.loads((run / "metrics.json").read_text())
    metrics["global_step"] = "four"
    (run / "metrics.json").write_text(json.dumps(metrics))
    from hf_treelang.train.folders import RUN_COMPLETE  # the marker records sizes: rewrite it as a damaged copy would not

    record = json.loads((run / RUN_COMPLETE).read_text())
    record.get("files", {}).pop("metrics.json", None)
    (run / RUN_COMPLETE).write_text(json.dumps(record))
    assert cli.main(["compare", str(run), "--out", str(tmp_path / "cmp")]) == 2
    line = capsys.readouterr().err.strip()
    assert "metrics.json" in line and "global_step must be an integer, got 'four'" in line, line


@pytest.mark.parametrize("text", ["٣ 0 1 2", "３ 0 1 2"])
def test_the_tokenizer_reads_ascii_digits_only(text):
    from hf_treelang.models.tokenization_treelang import TreeLangTokenizer

    tokenizer = TreeLangTokenizer(num_symbols=4)
    with pytest.raises(ValueError, match="is not a TreeLang token"):  # not symbol 3
        tokenizer(text)


def test_the_next_leaf_console_line_counts_the_leaves_of_any_arity(tmp_path, capsys):
    rhm = ["--num_symbols", "4", "--num_rules", "2", "--arity", "3", "--depth", "2", "--hidden_size", "16",
           "--num_hidden_layers", "1", "--intermediate_size", "16", "--num_train", "32", "--num_eval", "8",
           "--num_test", "8", "--max_steps", "2", "--num_evaluations", "1", "--num_checkpoints", "0",
           "--disable_tqdm", "true", "--report_to", "none", "--cpu_threads", "1", "--use_dataset_builder", "false",
           "--k_test", "0"]
    assert main("clm", [*rhm, "--output_dir", str(tmp_path / "run")], as_script=True) == 0
    printed = capsys.readouterr().out
    assert "-log P(x)/9" in printed and "2**depth" not in printed


def test_masked_lm_logits_cover_the_vocabulary_with_the_specials_never_predicted():
    from hf_treelang import TreeLangConfig, TreeLangForMaskedLM

    torch.manual_seed(0)
    model = TreeLangForMaskedLM(TreeLangConfig.from_data(num_symbols=4, depth=2, hidden_size=8, num_hidden_layers=1,
                                                         intermediate_size=8)).eval()
    inputs = torch.tensor([[0, 4, 2, 1]])
    labels = torch.tensor([[-100, 3, -100, -100]])
    output = model(input_ids=inputs, labels=labels)
    symbols = output.logits[..., :4]
    assert output.logits.shape == (1, 4, 6) and torch.isfinite(output.logits).all()
    assert (output.logits[..., 4:] < symbols.amin(-1, keepdim=True)).all()  # [MASK] and [PAD] below every symbol
    assert (output.logits.softmax(-1)[..., 4:] == 0.0).all()
    assert torch.allclose(output.logits.softmax(-1)[..., :4], symbols.softmax(-1), rtol=0, atol=1e-7)
    expected = torch.nn.functional.cross_entropy(symbols.reshape(-1, 4), labels.reshape(-1), ignore_index=-100)
    assert torch.equal(output.loss, expected)  # the loss over the q symbols, as before
