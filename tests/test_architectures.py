"""Any transformers architecture against the exact oracle: the TreeLang vocabulary and tokenizer, configs fitted to
it (hf_treelang.models.architectures), tiny runs of every architecture of the published comparison with finite
BP-KLs, the pipelines on run folders, the probability off the symbols reported, a user's registered architecture,
and every refusal in one line before any work."""

import json
import math

import pytest
import torch
from transformers import (
    AutoConfig,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    PreTrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    pipeline,
)
from transformers.modeling_outputs import MaskedLMOutput

from hf_treelang import TreeLangConfig
from hf_treelang.core.vocabulary import Vocabulary
from hf_treelang.models.architectures import ArchitectureError, build_model, check_runs, patch_config
from hf_treelang.models.tokenization_treelang import TreeLangTokenizer
from hf_treelang.train.callbacks import BPKLCallback, symbol_log_probabilities
from hf_treelang.train.loop import main
from hf_treelang.core.grammar import Grammar
from hf_treelang.core.sampling import sample_trees

# a tiny run of another architecture: ℓ = 2, q = 3, 64 sequences, 6 steps (sizes come from --config_overrides)
OTHER = ["--depth", "2", "--num_symbols", "3", "--num_train", "64", "--num_eval", "16", "--num_test", "16",
         "--per_device_train_batch_size", "8", "--max_steps", "6", "--num_evaluations", "2", "--num_checkpoints", "1",
         "--disable_tqdm", "true", "--report_to", "none", "--cpu_threads", "1", "--use_dataset_builder", "false"]
SIZES = {  # every architecture of the published comparison, at a tiny size
    "bert": "hidden_size=16,num_hidden_layers=1,num_attention_heads=1,intermediate_size=32",
    "roberta": "hidden_size=16,num_hidden_layers=1,num_attention_heads=1,intermediate_size=32",
    "distilbert": "dim=16,n_layers=1,n_heads=1,hidden_dim=32",
    "modernbert": "hidden_size=16,num_hidden_layers=1,num_attention_heads=1,intermediate_size=32",
    "gpt2": "n_embd=16,n_layer=1,n_head=1",
    "llama": "hidden_size=16,num_hidden_layers=1,num_attention_heads=1,num_key_value_heads=1,intermediate_size=32",
    "mamba": "hidden_size=16,num_hidden_layers=1",
}
COMPARISON = [("mlm", "bert"), ("mlm", "roberta"), ("mlm", "distilbert"), ("mlm", "modernbert"), ("clm", "gpt2"),
              ("clm", "llama"), ("clm", "mamba"), ("root", "bert"), ("root", "gpt2"), ("root", "llama"),
              ("root", "mamba")]


def _train(task, model_type, out, *extra):
    return main(task, [*OTHER, "--model_type", model_type, "--config_overrides", SIZES[model_type],
                       "--output_dir", str(out), *extra], as_script=True)


# ---------------------------------------------------------------- the vocabulary and the tokenizer


def test_the_vocabulary_puts_the_special_ids_after_the_symbols():
    vocabulary = Vocabulary(5)
    assert (vocabulary.mask_token_id, vocabulary.bos_token_id, vocabulary.pad_token_id, vocabulary.size) == (5, 5, 6, 7)
    assert [vocabulary.is_symbol(i) for i in (0, 4, 5, 6)] == [True, True, False, False]
    assert TreeLangConfig.from_data(num_symbols=5).mask_token_id == vocabulary.mask_token_id  # the model's own ids


def test_the_tokenizer_round_trips_symbols_and_special_tokens(tmp_path):
    tokenizer = TreeLangTokenizer(num_symbols=5, causal=True)
    ids = tokenizer("4 0 [MASK] 3")["input_ids"]
    assert ids == [5, 4, 0, 5, 3] and len(tokenizer) == 7 and tokenizer.pad_token_id == 6
    assert tokenizer.decode(ids, skip_special_tokens=True).split() == ["4", "0", "3"]
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)  # a stock fast tokenizer: tokenizer.json
    assert isinstance(loaded, PreTrainedTokenizerFast) and loaded("1 2")["input_ids"] == [5, 1, 2]
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
    with pytest.raises(ValueError, match="'5' is not a TreeLang token"):
        tokenizer("5 1")


# ---------------------------------------------------------------- fitting a config


def test_bert_defaults_would_freeze_symbol_0_and_the_fitted_config_trains_it():
    patched = patch_config("bert", "mlm", 4, 2, config_overrides=SIZES["bert"])
    assert patched.changes["pad_token_id"] == [0, 5] and patched.config.vocab_size == 6
    model = build_model(patched, "mlm")
    embedding = model.bert.embeddings.word_embeddings
    assert embedding.padding_idx == 5
    before = embedding.weight[0].detach().clone()
    inputs = torch.tensor([[0, 1, 4, 0], [0, 2, 3, 4]])
    labels = torch.full_like(inputs, -100)
    labels[:, 2] = torch.tensor([0, 0])
    model(input_ids=inputs, labels=labels).loss.backward()
    torch.optim.SGD(model.parameters(), lr=0.5).step()
    assert not torch.equal(embedding.weight[0], before)  # symbol 0's row trains


@pytest.mark.parametrize("model_type, field", [("roberta", "max_position_embeddings"), ("gpt2", "n_positions"),
                                               ("llama", "max_position_embeddings")])
def test_positions_hold_the_sequence_plus_the_architectures_offset(model_type, field):
    patched = patch_config(model_type, "mlm" if model_type == "roberta" else "clm", 4, 3,
                           config_overrides=SIZES[model_type])
    offset = 4 + 2 if model_type == "roberta" else 0  # RoBERTa numbers positions after its padding id q + 1 = 5
    assert getattr(patched.config, field) == 8 + offset
    for name, value in patched.config.to_dict().items():
        if name.endswith("_token_id") and value is not None:
            assert not 0 <= value < 4, (name, value)  # no special id is a symbol


def test_a_pooled_root_head_reads_the_last_position():
    model = build_model(patch_config("mamba", "root", 3, 2, config_overrides=SIZES["mamba"]), "root").eval()
    first, second = torch.tensor([[0, 1, 2, 0]]), torch.tensor([[0, 1, 2, 1]])
    assert model(input_ids=first).logits.shape == (1, 3)
    assert not torch.allclose(model(input_ids=first).logits, model(input_ids=second).logits)


# ---------------------------------------------------------------- tiny runs of the comparison's architectures


@pytest.fixture(scope="module")
def comparison_runs(tmp_path_factory):
    """A tiny run of every architecture of the published comparison: {(task, model_type): folder, or its exit code}."""
    root = tmp_path_factory.mktemp("comparison")
    runs = {}
    for task, model_type in COMPARISON:
        folder = root / f"{task}-{model_type}"
        code = _train(task, model_type, folder)
        runs[task, model_type] = folder if code == 0 else code
    return runs


@pytest.mark.parametrize("task, model_type", COMPARISON, ids=[f"{t}-{m}" for t, m in COMPARISON])
def test_every_architecture_of_the_comparison_trains_and_logs_finite_bp_kls(comparison_runs, task, model_type):
    tmp_path = comparison_runs[task, model_type]
    assert not isinstance(tmp_path, int), f"the run exited with status {tmp_path}"
    final = json.loads((tmp_path / "metrics.json").read_text())["final"]
    for k in range(3):
        assert math.isfinite(final[f"eval_kl_bp_k{k}"]) and final[f"eval_kl_bp_k{k}"] >= 0
    assert 0.0 <= final["eval_mass_on_special_tokens"] <= 1.0
    architecture = json.loads((tmp_path / "architecture.json").read_text())
    assert architecture["model_type"] == model_type and architecture["changes"]["vocab_size"][1] == 5
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == model_type
    card = (tmp_path / "README.md").read_text()
    assert f"model of transformers (`{model_type}`)" in card and "trust_remote_code" not in card


def test_the_pipelines_work_offline_on_run_folders(comparison_runs):
    folders = {task: comparison_runs[task, model_type]
               for task, model_type in (("mlm", "bert"), ("clm", "gpt2"), ("root", "mamba"))}
    fill = pipeline("fill-mask", model=str(folders["mlm"]))
    assert {answer["token"] for answer in fill("0 [MASK] 2 1", top_k=5)} <= set(range(5))
    generate = pipeline("text-generation", model=str(folders["clm"]))
    text = generate("2 0", max_new_tokens=2, do_sample=False)[0]["generated_text"]
    assert text.startswith("2 0 ") and len(text.split()) == 4
    classify = pipeline("text-classification", model=str(folders["root"]))
    assert classify("0 1 2 0")[0]["label"] in {"symbol_0", "symbol_1", "symbol_2"}
    model = AutoModelForSequenceClassification.from_pretrained(folders["root"])
    assert type(model).__name__ == "MambaForRootClassification"


# ---------------------------------------------------------------- the oracle side over the symbols


def test_the_probability_off_the_symbols_is_reported_not_renormalised_away():
    logits = torch.log(torch.tensor([[0.2, 0.2, 0.1, 0.5], [0.25, 0.25, 0.5, 0.0]]))
    log_p, mass = symbol_log_probabilities(logits, num_symbols=3)
    assert torch.allclose(log_p.exp().sum(-1), torch.ones(2, dtype=torch.float64))
    assert mass == pytest.approx(0.25)


class _SpecialHeavy(torch.nn.Module):
    """A model whose every prediction puts probability 0.6 on the mask id and the rest uniformly on the symbols."""

    def __init__(self, q):
        super().__init__()
        self.q = q
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids):
        probabilities = torch.full((*input_ids.shape, self.q + 2), 0.4 / self.q)
        probabilities[..., self.q], probabilities[..., self.q + 1] = 0.6, 0.0
        return MaskedLMOutput(logits=torch.log(probabilities + 1e-30))


def test_the_bp_kl_callback_reports_a_models_mass_on_special_tokens():
    grammar = Grammar.random(3, 1.0, 0)
    leaves = sample_trees(grammar, 40, 2, 0, 1).leaves
    values = BPKLCallback(grammar, 2, 0, "mlm", leaves).compute(_SpecialHeavy(3))
    assert values["eval_mass_on_special_tokens"] == pytest.approx(0.6, abs=1e-6)
    assert math.isfinite(values["eval_kl_bp_k0"])


# ---------------------------------------------------------------- a user's own architecture


class TinyMLPConfig(PreTrainedConfig):
    model_type = "tiny-mlp-test"

    def __init__(self, vocab_size=10, hidden_size=8, max_position_embeddings=64, pad_token_id=None, **kwargs):
        self.vocab_size, self.hidden_size, self.max_position_embeddings = vocab_size, hidden_size, max_position_embeddings
        super().__init__(pad_token_id=pad_token_id, **kwargs)


class TinyMLPForMaskedLM(PreTrainedModel):
    config_class = TinyMLPConfig

    def __init__(self, config):
        super().__init__(config)
        self.embed = torch.nn.Embedding(config.vocab_size, config.hidden_size)
        self.position = torch.nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.mix = torch.nn.Linear(config.hidden_size, config.hidden_size)
        self.head = torch.nn.Linear(config.hidden_size, config.vocab_size)
        self.post_init()

    def forward(self, input_ids=None, labels=None, **kwargs):
        states = self.embed(input_ids) + self.position.weight[: input_ids.shape[1]]  # (B, T, C)
        states = states + torch.relu(self.mix(states.mean(1, keepdim=True)))  # every token sees the sequence
        logits = self.head(states)  # (B, T, V)
        loss = None
        if labels is not None:
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        return MaskedLMOutput(loss=loss, logits=logits)


def test_a_users_registered_architecture_trains_against_the_oracle(tmp_path):
    AutoConfig.register("tiny-mlp-test", TinyMLPConfig, exist_ok=True)
    AutoModelForMaskedLM.register(TinyMLPConfig, TinyMLPForMaskedLM, exist_ok=True)
    assert main("mlm", [*OTHER, "--model_type", "tiny-mlp-test", "--config_overrides", "hidden_size=12",
                        "--output_dir", str(tmp_path)], as_script=True) == 0
    final = json.loads((tmp_path / "metrics.json").read_text())["final"]
    assert math.isfinite(final["eval_kl_bp_k0"])
    assert json.loads((tmp_path / "architecture.json").read_text())["changes"]["max_position_embeddings"] == [64, 4]


# ---------------------------------------------------------------- refusals: one line, exit 2, nothing written


@pytest.mark.parametrize(
    "task, flags, message",
    [
        ("mlm", ["--model_type", "no-such-type"], "--model_type 'no-such-type' is not a model type"),
        ("mlm", ["--model_type", "bert", "--config_overrides", "hidden_size64"], "'field=value' pairs"),
        ("mlm", ["--model_type", "bert", "--config_overrides", "hidden_sise=64"], "BertConfig has no field"),
        ("mlm", ["--model_type", "bert", "--config_overrides", "hidden_size=big"], "hidden_size must be an integer"),
        ("root", ["--model_type", "bert", "--config_overrides", "num_labels=7"], "num_labels is set by the"),
        ("mlm", ["--model_type", "bert", "--config_overrides", "max_position_embeddings=3"],
         "max_position_embeddings=3 holds fewer positions than the 4"),
        ("mlm", ["--model_type", "gpt2"], "'gpt2' has no masked-LM head"),
        ("mlm", ["--model_type", "bert", "--hidden_size", "32"], "--hidden_size sizes the TreeLang encoder"),
        ("mlm", ["--model_type", "bert", "--ensemble_seeds", "0", "1"], "stack TreeLang encoders"),
        ("mlm", ["--config_overrides", "hidden_size=32"], "sets fields of another architecture"),
    ],
    ids=["unknown-type", "malformed", "unknown-field", "bad-value", "num-labels", "positions", "no-head",
         "treelang-flag", "ensemble", "overrides-for-treelang"],
)
def test_a_config_that_cannot_fit_is_refused_in_one_line(tmp_path, capsys, task, flags, message):
    out = tmp_path / "run"
    assert main(task, [*OTHER, "--output_dir", str(out), *flags], as_script=True) == 2
    error = capsys.readouterr().err.strip()
    assert message in error and len(error.splitlines()) == 1, error
    assert not out.exists()


def test_a_model_that_cannot_run_the_sequence_is_refused_before_training():
    patched = patch_config("bert", "mlm", 3, 2, config_overrides=SIZES["bert"])
    model = build_model(patched, "mlm")
    with pytest.raises(ArchitectureError, match="cannot run sequences of 8 leaves"):
        check_runs(model, 3, 3)  # 8 leaves in a 4-position table


# ---------------------------------------------------------------- transformers' conformance of TreeLangConfig


def test_the_treelang_config_takes_any_positive_layer_norm_eps_and_an_assignable_bos_id():
    config = TreeLangConfig(layer_norm_eps=1.0)  # what transformers' eager-vs-SDPA tests set
    config.bos_token_id = config.num_symbols  # q = vocab_size - 2: the symbols, then [MASK] (= BOS) and [PAD]
    config.validate()
    config.bos_token_id = 0
    with pytest.raises(ValueError, match="`bos_token_id` must be q = 4"):
        config.validate()
    with pytest.raises(ValueError, match="layer_norm_eps"):
        TreeLangConfig(layer_norm_eps=0.0)


# ---------------------------------------------------------------- an architecture x seed grid, and the comparison


def test_an_architecture_by_seed_grid_runs_with_the_sweep_engine_and_compares(tmp_path, capsys):
    from hf_treelang import cli
    from hf_treelang.sweep.runner import run_sweep
    from hf_treelang.sweep.spec import load_spec

    base = {"depth": 2, "num_symbols": 3, "num_train": 64, "num_eval": 16, "num_test": 16, "max_steps": 4,
            "per_device_train_batch_size": 8, "num_evaluations": 2, "num_checkpoints": 1, "cpu_threads": 1,
            "use_dataset_builder": False}
    spec = load_spec({"task": "clm", "base": base, "grid": {
        "architecture": [{"model_type": "gpt2", "config_overrides": SIZES["gpt2"]},
                         {"model_type": "llama", "config_overrides": SIZES["llama"]}],
        "seed": [0, 1]}})
    result = run_sweep(spec, tmp_path / "sweep", workers=0, progress=False)
    runs = sorted((tmp_path / "sweep" / "runs").iterdir())
    assert [run.name for run in runs] == ["architecture=gpt2,seed=0", "architecture=gpt2,seed=1",
                                          "architecture=llama,seed=0", "architecture=llama,seed=1"]
    assert len(result.trained) == 4
    assert cli.main(["compare", *map(str, runs), "--out", str(tmp_path / "cmp")]) == 0
    groups = json.loads((tmp_path / "cmp" / "compare.json").read_text())["groups"]
    assert [(g["architecture"], g["seeds"]) for g in groups] == [("gpt2", [0, 1]), ("llama", [0, 1])]
    finals = [json.loads((run / "metrics.json").read_text())["final"]["eval_kl_bp_k0"] for run in runs[:2]]
    assert groups[0]["final_kl_matched"]["mean"] == pytest.approx(sum(finals) / 2)
    assert groups[0]["final_kl_matched"]["std"] == pytest.approx(abs(finals[0] - finals[1]) / 2**0.5)
    table = (tmp_path / "cmp" / "compare.md").read_text()
    assert "| next leaf | q=3 ℓ=2 σ=1.0 seed 0 | gpt2 | 2 | " in table and (tmp_path / "cmp" / "compare.png").is_file()
    assert len((tmp_path / "cmp" / "compare.csv").read_text().splitlines()) == 5


def test_compare_refuses_a_folder_that_is_not_a_run_in_one_line(tmp_path, capsys):
    from hf_treelang import cli

    (tmp_path / "empty").mkdir()
    assert cli.main(["compare", str(tmp_path / "empty"), "--out", str(tmp_path / "cmp")]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("hf-treelang compare: error:") and len(error.splitlines()) == 1
    assert not (tmp_path / "cmp").exists()


def test_a_linked_grid_axis_mixing_objects_and_values_is_refused():
    from hf_treelang.sweep.spec import load_spec

    with pytest.raises(ValueError, match="mixes objects and single values"):
        load_spec({"task": "mlm", "grid": {"architecture": [{"model_type": "bert"}, "gpt2"]}})
    with pytest.raises(ValueError, match="sets `seed`, which base or another axis sets too"):
        load_spec({"task": "mlm", "base": {"seed": 1}, "grid": {"architecture": [{"model_type": "bert", "seed": 0}]}})


def test_the_pipelines_work_offline_on_treelang_run_folders_too(tmp_path):
    treelang = ["--hidden_size", "16", "--intermediate_size", "32", "--num_hidden_layers", "1"]
    for task in ("mlm", "clm", "root"):
        assert main(task, [*OTHER, *treelang, "--output_dir", str(tmp_path / task)], as_script=True) == 0
    assert isinstance(AutoTokenizer.from_pretrained(tmp_path / "mlm"), PreTrainedTokenizerFast)
    fill = pipeline("fill-mask", model=str(tmp_path / "mlm"))
    assert {answer["token"] for answer in fill("0 [MASK] 2 1", top_k=3)} == {0, 1, 2}
    answers = fill("0 [MASK] 2 1")  # the pipeline's default top 5 of the q + 2 ids (q = 3 here)
    assert len(answers) == 5 and {answer["token"] for answer in answers[:3]} == {0, 1, 2}
    assert sum(answer["score"] for answer in answers[:3]) == pytest.approx(1.0) and answers[3]["score"] == 0.0
    (padding,) = fill("0 [MASK] 2 1", targets=["[PAD]"])  # a special id as the target: probability 0, no error
    assert padding["token_str"].strip() == "[PAD]" and padding["score"] == 0.0
    text = pipeline("text-generation", model=str(tmp_path / "clm"))("2 0", max_new_tokens=2, do_sample=False)
    assert len(text[0]["generated_text"].split()) == 4
    assert pipeline("text-classification", model=str(tmp_path / "root"))("0 1 2 0")[0]["label"].startswith("symbol_")


def test_a_config_file_that_fixes_too_few_positions_is_refused_naming_the_field(tmp_path, capsys):
    from transformers import BertConfig

    BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=1, intermediate_size=32,
               max_position_embeddings=3).save_pretrained(tmp_path / "config")
    out = tmp_path / "run"
    assert main("mlm", [*OTHER, "--config_name", str(tmp_path / "config"), "--output_dir", str(out)],
                as_script=True) == 2
    error = capsys.readouterr().err.strip()
    assert "max_position_embeddings=3 holds fewer positions than the 4" in error and len(error.splitlines()) == 1
    assert not out.exists()
