"""Portable run folders: a tokenizer of the ``tokenizers`` library that stock transformers loads, the same ids and
texts as before, a model card whose ``model-index`` is the run's metrics, and the comparison as a results dataset."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, pipeline

import hf_treelang  # noqa: F401  (registers the earlier tokenizer class for the folders it wrote)
from hf_treelang import cli
from hf_treelang.models.tokenization_treelang import TreeLangTokenizer
from hf_treelang.train.loop import main

DATA = Path(__file__).parent / "data"
TINY = ["--depth", "2", "--num_symbols", "3", "--num_train", "64", "--num_eval", "16", "--num_test", "16",
        "--per_device_train_batch_size", "8", "--max_steps", "4", "--num_evaluations", "1", "--num_checkpoints", "0",
        "--disable_tqdm", "true", "--report_to", "none", "--cpu_threads", "1", "--use_dataset_builder", "false"]
TREELANG = ["--hidden_size", "16", "--intermediate_size", "32", "--num_hidden_layers", "1"]
RUNS = {  # name: (task, flags): every task of TreeLang's, and one other architecture per task
    "treelang-mlm": ("mlm", TREELANG), "treelang-clm": ("clm", TREELANG), "treelang-root": ("root", TREELANG),
    "electra-mlm": ("mlm", ["--model_type", "electra", "--config_overrides",
                            "hidden_size=16,embedding_size=16,num_hidden_layers=1,num_attention_heads=1,"
                            "intermediate_size=32"]),
    "gpt_neox-clm": ("clm", ["--model_type", "gpt_neox", "--config_overrides",
                             "hidden_size=16,num_hidden_layers=1,num_attention_heads=1,intermediate_size=32"]),
    "bert-root": ("root", ["--model_type", "bert", "--config_overrides",
                           "hidden_size=16,num_hidden_layers=1,num_attention_heads=1,intermediate_size=32"]),
}
PIPELINES = {"mlm": "fill-mask", "clm": "text-generation", "root": "text-classification"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("portable")
    for name, (task, flags) in RUNS.items():
        assert main(task, [*TINY, *flags, "--output_dir", str(root / name)], as_script=True) == 0
    return root


def test_the_fast_tokenizer_encodes_and_decodes_as_the_earlier_one():
    reference = json.loads((DATA / "treelang_tokenizer_reference.json").read_text())["cases"]
    tokenizers = {}
    for case in reference:
        key = (case["num_symbols"], case["causal"])
        tokenizer = tokenizers.setdefault(key, TreeLangTokenizer(num_symbols=key[0], causal=key[1]))
        if "error" in case:
            with pytest.raises(ValueError, match="is not a TreeLang token"):
                tokenizer(case["text"])
            continue
        ids = tokenizer(case["text"])["input_ids"]
        assert ids == case["input_ids"], case
        # the same texts; an encoder's tokenizer writes no space before the first token (one token decodes to itself)
        decoded, decoded_skip = (case["decoded"], case["decoded_skip"]) if case["causal"] else (
            case["decoded"].removeprefix(" "), case["decoded_skip"].removeprefix(" "))
        assert tokenizer.decode(ids) == decoded and tokenizer.decode(ids, skip_special_tokens=True) == decoded_skip, case
        assert tokenizer([case["text"], "0"], padding=True)["input_ids"] == case["padded"], case
    assert len({key[0] for key in tokenizers}) >= 5  # q up to 256: one-, two- and three-digit symbols


@pytest.mark.parametrize("kind, causal", [("clm", True), ("mlm", False)])
def test_a_folder_of_the_earlier_tokenizer_still_loads(kind, causal):
    loaded = AutoTokenizer.from_pretrained(DATA / f"tokenizer_before_tokenizers_{kind}")
    assert isinstance(loaded, TreeLangTokenizer) and loaded.causal is causal
    assert loaded("1 [MASK] 3")["input_ids"] == ([4] if causal else []) + [1, 4, 3]


def test_every_run_folder_opens_in_a_python_that_never_imports_hf_treelang(runs):
    code = f"""
import json, sys
from transformers import AutoTokenizer, pipeline
out = {{}}
for name, task in {json.dumps({name: task for name, (task, _) in RUNS.items()})}.items():
    folder = {str(runs)!r} + "/" + name
    remote = name.startswith("treelang")  # the TreeLang model is the folder's own code
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
    ids = tokenizer("0 1 [MASK] 2")["input_ids"]
    if task == "mlm":
        result = pipeline("fill-mask", model=folder, trust_remote_code=remote)("0 [MASK] 2 1")
        answer = [r["token"] for r in result]
    elif task == "clm":
        result = pipeline("text-generation", model=folder, trust_remote_code=remote)("2 0", max_new_tokens=2,
                                                                                        do_sample=False)
        answer = result[0]["generated_text"]
    else:
        answer = pipeline("text-classification", model=folder, trust_remote_code=remote)("0 1 2 0")[0]["label"]
    out[name] = {{"class": type(tokenizer).__name__, "ids": ids, "answer": answer}}
out["imported"] = "hf_treelang" in sys.modules
print(json.dumps(out))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PATH": "/usr/bin:/bin",
                               "OMP_NUM_THREADS": "1", "HOME": str(runs)}, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result.pop("imported") is False
    for name, seen in result.items():
        causal = RUNS[name][0] == "clm"
        assert seen["ids"] == ([3] if causal else []) + [0, 1, 3, 2], (name, seen)  # today's ids: mask = BOS = q
    assert {token for name in ("treelang-mlm", "electra-mlm") for token in result[name]["answer"][:3]} <= {0, 1, 2}
    assert all(len(result[name]["answer"].split()) == 4 for name in ("treelang-clm", "gpt_neox-clm"))
    assert all(result[name]["answer"].startswith("symbol_") for name in ("treelang-root", "bert-root"))


def test_fill_mask_token_strings_are_the_symbols_and_the_special_ids_rank_last_with_score_zero(runs):
    for name in ("treelang-mlm", "electra-mlm"):
        fill = pipeline("fill-mask", model=str(runs / name))
        answers = fill("0 [MASK] 2 1")  # the default top 5 of the q + 2 = 5 ids
        assert [answer["token_str"] for answer in answers[:3]] == [str(answer["token"]) for answer in answers[:3]]
        assert {answer["token"] for answer in answers[:3]} == {0, 1, 2} and all(
            not answer["token_str"].startswith(" ") for answer in answers)
        if name == "treelang-mlm":  # [MASK] and [PAD] last, with probability 0
            assert [answer["score"] for answer in answers[3:]] == [0.0, 0.0]
        symbols = fill("0 [MASK] 2 1", targets=["0", "1", "2"])  # the model card's call: the q symbols only
        assert {answer["token"] for answer in symbols} == {0, 1, 2}
        if name == "treelang-mlm":  # its scores are the softmax over the symbols
            assert sum(answer["score"] for answer in symbols) == pytest.approx(1.0, abs=1e-6)


def test_fill_mask_on_a_constructed_folder_gives_bp0s_marginal(tmp_path):
    from hf_treelang import BeliefPropagation, Grammar

    assert cli.main(["construct", str(tmp_path / "bp"), "--num-symbols", "4", "--depth", "2"]) == 0
    answers = pipeline("fill-mask", model=str(tmp_path / "bp"))("[MASK] 1 2 3")  # the default top 5 of 6 ids
    marginal = BeliefPropagation(Grammar.random(4, 1.0, 0), 2).leaf_marginals(torch.tensor([[4, 1, 2, 3]]))[0, 0]
    scores = {answer["token"]: answer["score"] for answer in answers}
    assert len(answers) == 5 and all(scores.get(x, 0.0) == pytest.approx(float(marginal[x]), abs=1e-5)
                                     for x in range(4))


def test_text_generation_completes_any_prompt_to_a_whole_sequence_of_symbols(runs):
    generate = pipeline("text-generation", model=str(runs / "treelang-clm"))
    completed = generate("2 0")[0]["generated_text"]  # the model's generation config: 2**depth = 4 leaves in all
    assert completed.startswith("2 0 ") and len(completed.split()) == 4
    torch.manual_seed(0)
    sampled = [generate("", do_sample=True)[0]["generated_text"] for _ in range(10)]  # BOS alone: a whole sequence
    assert all(len(text.split()) == 4 and set(text.split()) <= {"0", "1", "2"} for text in sampled), sampled


def test_a_prompt_that_repeats_the_bos_token_is_refused_saying_that_the_tokenizer_adds_it(runs):
    generate = pipeline("text-generation", model=str(runs / "treelang-clm"))
    with pytest.raises(ValueError, match=r"BOS again at position 1: a causal run's tokenizer adds BOS itself, so a "
                                         r"text prompt holds leaves only"):
        generate("[MASK] 2")


def test_a_padded_batch_of_text_classification_is_refused_naming_the_padding(runs):
    classify = pipeline("text-classification", model=str(runs / "treelang-root"))
    assert len(classify(["0 1 2 0", "2 1 0 0"], batch_size=2)) == 2  # sequences of 2**depth leaves need no padding
    with pytest.raises(ValueError, match=r"the padding id \[PAD\] = q \+ 1 = 4: every TreeLang sequence has exactly 4 "
                                         r"tokens and none is padded"):
        classify(["0 1 2 0", "0 1 2"], batch_size=2)


def _card_code(folder: Path) -> str:
    card = (folder / "README.md").read_text()
    usage = card.split("## Usage", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    return usage.replace("path/to/this/folder", str(folder))


@pytest.mark.parametrize("name", ["treelang-mlm", "treelang-clm", "treelang-root"])
def test_the_model_cards_usage_runs_and_the_masked_lm_example_masks_a_leaf(runs, name, capsys):
    folder = runs / name
    front = (folder / "README.md").read_text().split("---")[1]
    assert "datasets:" not in front  # no Hub dataset is named: the data are generated (the model-index names them)
    namespace = {}
    torch.manual_seed(0)
    exec(_card_code(folder), namespace)  # noqa: S102 (the card's own example, on this run's folder)
    printed = capsys.readouterr().out
    if name == "treelang-mlm":
        assert namespace["input_ids"][0, 0] == 3 and (namespace["input_ids"] == 3).sum() == 1  # leaf 0 masked
        probabilities = namespace["probabilities"].detach()
        assert probabilities.shape == (3,) and float(probabilities.sum()) == pytest.approx(1)
        assert "'token_str': '0'" in printed and "[PAD]" not in printed
    elif name == "treelang-clm":
        sequences = printed.strip().splitlines()[-2:]
        assert all(len(line.split()) == 4 for line in sequences), printed
        assert namespace["next_leaf"].shape == (4, 3)
    else:
        assert namespace["logits"].shape == (1, 3)


def test_the_cards_tokenizer_load_neither_asks_nor_warns_without_hf_treelang(runs):
    folder = runs / "treelang-mlm"
    assert "PreTrainedTokenizerFast.from_pretrained(folder)" in (folder / "README.md").read_text()
    code = (f"from transformers import PreTrainedTokenizerFast; "
            f"tokenizer = PreTrainedTokenizerFast.from_pretrained({str(folder)!r}); import sys; "
            f"print(len(tokenizer), tokenizer.decode([0]), 'hf_treelang' in sys.modules)")
    read, write = os.pipe()  # stdin held open: a question would wait for an answer
    try:
        done = subprocess.run([sys.executable, "-c", code], stdin=read, capture_output=True, text=True, timeout=300,
                              env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "HOME": str(runs)})
    finally:
        os.close(read)
        os.close(write)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["5", "0", "False"]  # q + 2 tokens; one token decodes to itself
    assert "custom code" not in done.stderr and "model of type" not in done.stderr, done.stderr


def _metric_value(results: list, name: str):
    found = [result.metric_value for result in results if result.metric_name == name]
    assert len(found) <= 1, name
    return found[0] if found else None


@pytest.mark.parametrize("name", list(RUNS))
def test_the_model_card_carries_a_model_index_equal_to_the_runs_metrics(runs, name):
    from huggingface_hub import ModelCard, metadata_load

    folder = runs / name
    card = ModelCard((folder / "README.md").read_text())
    assert metadata_load(folder / "README.md")["model-index"]
    results = card.data.eval_results
    final = json.loads((folder / "metrics.json").read_text())["final"]
    config = json.loads((folder / "run_config.json").read_text())["data_args"]
    for k in range(config["depth"] + 1):
        assert _metric_value(results, f"accuracy (k_test = {k})") == final[f"eval_acc_ktest{k}"]
        assert _metric_value(results, f"BP_0 accuracy (k_test = {k})") == final[f"eval_bp_acc_ktest{k}"]
        assert _metric_value(results, f"mean KL(BP_{k} ‖ model)") == final[f"eval_kl_bp_k{k}"]
    assert {result.dataset_config for result in results if result.dataset_split == "test"} == {
        f"seed0-sigma1.0-q3-depth2-k{k}" for k in range(3)}
    if RUNS[name][0] == "clm":
        assert math.isclose(_metric_value(results, "excess loss over BP_0 (nats per leaf)"),
                            final["eval_excess_loss"])
    text = (folder / "README.md").read_text()
    assert "A `electra` model" not in text and ("An Electra model" in text) == (name == "electra-mlm")


def test_the_comparison_is_a_results_dataset_of_one_row_per_run(runs, tmp_path):
    import datasets

    folders = [str(runs / name) for name in RUNS]
    assert cli.main(["compare", *folders, "--out", str(tmp_path / "cmp")]) == 0
    table = datasets.load_dataset(str(tmp_path / "cmp"), cache_dir=str(tmp_path / "datasets-cache"))["train"]
    assert table.num_rows == len(RUNS)
    assert sorted(table["run"]) == sorted(folders)
    row = table[table["run"].index(str(runs / "electra-mlm"))]
    final = json.loads((runs / "electra-mlm" / "metrics.json").read_text())["final"]
    assert row["eval_kl_bp_k0"] == pytest.approx(final["eval_kl_bp_k0"]) and row["architecture"] == "electra"
    assert row["command"].startswith("python training/run_mlm.py ") and "--model_type electra" in row["command"]
    card = (tmp_path / "cmp" / "README.md").read_text()
    assert "data_files: compare.csv" in card and "- `eval_kl_bp_k0`:" in card
