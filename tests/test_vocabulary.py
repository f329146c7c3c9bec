"""One vocabulary: ``config.vocab_size == len(tokenizer) == logits.shape[-1]`` (q + 2) for every language-model head,
every logit finite in every dtype, label smoothing finite and defined over the q symbols, the trajectories and the
published checkpoints of the q-way readout unchanged, and metadata only of what the grammar has."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSequenceClassification
from transformers.trainer_pt_utils import LabelSmoother

from hf_treelang import Grammar, TreeLangConfig
from hf_treelang.core.vocabulary import Vocabulary
from hf_treelang.models import TreeLangForCausalLM, TreeLangForMaskedLM, TreeLangForSequenceClassification
from hf_treelang.models.bp_transformer import build_bp_transformer
from hf_treelang.models.loading import load_pretrained
from hf_treelang.models.special_logits import SPECIAL_LOGIT_GAP
from hf_treelang.models.tokenization_treelang import TreeLangTokenizer
from hf_treelang.train.run import resolve
from hf_treelang.train.trainer import SymbolLabelSmoother

ROOT = Path(__file__).parent.parent
DATA = Path(__file__).parent / "data"
PUBLISHED = ROOT / "docs" / "compare" / "protocol" / "runs" / "main"
Q, DEPTH, T = 4, 3, 8
HEADS = {"mlm": TreeLangForMaskedLM, "clm": TreeLangForCausalLM, "root": TreeLangForSequenceClassification}
AUTO = {"mlm": AutoModelForMaskedLM, "clm": AutoModelForCausalLM, "root": AutoModelForSequenceClassification}


def tiny(task: str, seed: int = 0, **overrides):
    kwargs = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32)
    kwargs.update(overrides)
    torch.manual_seed(seed)
    return HEADS[task](TreeLangConfig.from_data(num_symbols=Q, depth=DEPTH, **kwargs)).eval()


def inputs(task: str, batch: int = 13, seed: int = 0, q: int = Q, length: int = T) -> tuple:
    """(input_ids, labels) of ``batch`` sequences: masked leaves for MLM, ``[BOS, x_0 ..]`` for next-leaf prediction,
    the root symbol as the label of the root classifier (its values do not matter here)."""
    generator = torch.Generator().manual_seed(seed)
    leaves = torch.randint(0, q, (batch, length), generator=generator)  # (b, T)
    if task == "root":
        return leaves, torch.randint(0, q, (batch,), generator=generator)
    if task == "clm":
        return torch.cat([torch.full((batch, 1), q), leaves[:, :-1]], 1), leaves
    masked = torch.rand(batch, length, generator=generator) < 0.3
    masked[:, 0] = True
    return torch.where(masked, q, leaves), torch.where(masked, leaves, -100)


# ---------------------------------------------------------------- one vocabulary


@pytest.mark.parametrize("task", ["mlm", "clm", "bp_mlm"])
def test_language_model_logits_cover_the_config_vocabulary_and_the_tokenizer(task):
    if task == "bp_mlm":
        model = build_bp_transformer(Grammar.random(Q, 1.0, 0), DEPTH, task="mlm")
        x, _ = inputs("mlm")
    else:
        model = tiny(task)
        x, _ = inputs(task)
    with torch.no_grad():
        logits = model(input_ids=x).logits
    tokenizer = TreeLangTokenizer(num_symbols=Q, causal=task == "clm")
    assert logits.shape == (13, T, model.config.vocab_size)  # transformers' test_for_masked_lm shape
    assert model.config.vocab_size == len(tokenizer) == Vocabulary(Q).size == Q + 2
    assert model.config.mask_token_id == tokenizer.mask_token_id == Q


def test_the_config_names_every_id_of_the_vocabulary():
    config = TreeLangConfig.from_data(num_symbols=5)
    tokenizer = TreeLangTokenizer(num_symbols=5, causal=True)
    assert (config.vocab_size, config.mask_token_id, config.bos_token_id, config.pad_token_id) == (7, 5, 5, 6)
    assert (tokenizer.mask_token_id, tokenizer.bos_token_id, tokenizer.pad_token_id) == (5, 5, 6)
    with pytest.raises(ValueError, match=r"`pad_token_id` must be q \+ 1 = 6"):
        config.pad_token_id = 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("task", ["mlm", "clm", "root"])
def test_every_output_is_finite_in_every_dtype(task, dtype):
    model = tiny(task).to(dtype)
    x, _ = inputs(task)
    with torch.no_grad():
        output = model(input_ids=x, output_hidden_states=True)
    assert output.logits.dtype == dtype
    assert bool(torch.isfinite(output.logits).all()), output.logits
    assert all(bool(torch.isfinite(state).all()) for state in output.hidden_states)


@pytest.mark.parametrize("task", ["mlm", "clm", "root"])
def test_batched_outputs_are_finite_and_those_of_each_row_alone(task):
    # transformers' test_batching_equivalence: the batch's outputs, row by row, to float rounding (1e-5)
    model = tiny(task)
    x, _ = inputs(task)
    with torch.no_grad():
        batched = model(input_ids=x).logits
        single = torch.cat([model(input_ids=x[i:i + 1]).logits for i in range(x.shape[0])])
    assert bool(torch.isfinite(batched).all()) and bool(torch.isfinite(single).all())
    assert torch.allclose(batched, single, rtol=0, atol=1e-5)


@pytest.mark.parametrize("task", ["mlm", "clm"])
def test_the_special_ids_rank_after_every_symbol_with_probability_zero(task):
    model = tiny(task)
    x, labels = inputs(task)
    output = model(input_ids=x, labels=labels)
    symbols, special = output.logits[..., :Q], output.logits[..., Q:]  # (b, T, q), (b, T, 2)
    assert bool((special <= symbols.amin(-1, keepdim=True) - SPECIAL_LOGIT_GAP).all())
    probabilities = output.logits.softmax(-1)  # float32
    assert bool((probabilities[..., Q:] == 0.0).all())
    assert torch.allclose(probabilities[..., :Q], symbols.softmax(-1), rtol=0, atol=1e-7)
    expected = F.cross_entropy(symbols.reshape(-1, Q), labels.reshape(-1), ignore_index=-100)
    assert torch.equal(output.loss, expected)  # the loss of the q-way readout
    output.logits[..., Q:].sum().backward()  # the special ids' scores are constants: no gradient reaches the model
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())


# ---------------------------------------------------------------- label smoothing


@pytest.mark.parametrize("task", ["mlm", "clm"])
def test_transformers_label_smoother_on_the_models_outputs_is_finite(task):
    model = tiny(task)
    x, labels = inputs(task)
    output = model(input_ids=x)
    smoothed = LabelSmoother(epsilon=0.1)(output, labels)  # over all q + 2 ids: what a plain Trainer computes
    assert bool(torch.isfinite(smoothed)) and smoothed > output.logits.new_tensor(0.0)
    smoothed.backward()
    assert all(bool(torch.isfinite(p.grad).all()) for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("task", ["mlm", "clm", "root"])
def test_the_trainers_label_smoothing_averages_over_the_q_symbols(task):
    model = tiny(task)
    x, labels = inputs(task)
    output = model(input_ids=x)
    smoothed = SymbolLabelSmoother(epsilon=0.1, model=model)(output, labels)
    logits = output.logits[..., :Q]
    expected = F.cross_entropy(logits.reshape(-1, Q), labels.reshape(-1), label_smoothing=0.1, ignore_index=-100)
    assert torch.isclose(smoothed, expected, rtol=0, atol=1e-6), (float(smoothed), float(expected))


# ---------------------------------------------------------------- the trajectories of the q-way readout


def seeded_step(task: str, initializer: str) -> dict:
    """The weights after ``torch.manual_seed(0)`` and the model's construction, then after one AdamW step on the
    model's loss (dropout on, gradients clipped to norm 0.01); the loss and the norm before clipping (q = 3, ℓ = 2).
    Computed in one torch thread: more threads sum some reductions in another order, which moves the last bit."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _seeded_step(task, initializer)
    finally:
        torch.set_num_threads(threads)


def _seeded_step(task: str, initializer: str) -> dict:
    q, depth = 3, 2
    config = TreeLangConfig.from_data(num_symbols=q, depth=depth, hidden_size=8, num_hidden_layers=2,
                                      intermediate_size=8, initializer=initializer)
    torch.manual_seed(0)
    model = HEADS[task](config).train()
    out = {f"init/{name}": value.detach().clone() for name, value in model.state_dict().items()}
    generator = torch.Generator().manual_seed(5)
    leaves = torch.randint(0, q, (6, 2**depth), generator=generator)  # (6, T)
    if task == "root":
        input_ids, labels = leaves, torch.randint(0, q, (6,), generator=generator)
    elif task == "clm":
        input_ids, labels = torch.cat([torch.full((6, 1), q), leaves[:, :-1]], 1), leaves
    else:
        masked = torch.rand(6, 2**depth, generator=generator) < 0.4  # (6, T)
        masked[:, 0] = True
        input_ids, labels = torch.where(masked, q, leaves), torch.where(masked, leaves, -100)
    loss = model(input_ids=input_ids, labels=labels).loss
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
    torch.optim.AdamW(model.parameters(), lr=1e-2).step()
    out.update({f"step/{name}": value.detach().clone() for name, value in model.state_dict().items()})
    out.update({"loss": loss.detach().reshape(1), "grad_norm": norm.detach().reshape(1)})
    return out


STEP_REFERENCE = DATA / "treelang_step_reference.safetensors"
INITIALIZERS = ("torch", "torch_cloned_layers")


def write_step_reference(path=STEP_REFERENCE) -> None:
    """Write :func:`seeded_step` of every task and initializer to ``path``, keyed ``<task>/<initializer>/<name>``:
    the reference of the test below. Regenerate it only where a change to the initialisation or the training step is
    meant (``cd tests && python -c "from test_vocabulary import write_step_reference; write_step_reference()"``), and
    say why in the commit: the file pins the draws, loss, gradient norm and step of the q-way readout."""
    from safetensors.torch import save_file

    tensors = {f"{task}/{initializer}/{key}": value.contiguous() for task in HEADS for initializer in INITIALIZERS
               for key, value in seeded_step(task, initializer).items()}
    save_file(tensors, str(path), metadata={"holds": "seeded_step(task, initializer) of tests/test_vocabulary.py"})


@pytest.mark.parametrize("initializer", INITIALIZERS)
@pytest.mark.parametrize("task", ["mlm", "clm", "root"])
def test_initialisation_and_one_step_are_bit_for_bit_those_of_the_q_way_readout(task, initializer):
    """The weights at initialisation and after one step, the loss and the gradient norm (:func:`seeded_step`) are
    those of :data:`STEP_REFERENCE` (written by :func:`write_step_reference`) to the bit: a head scores the q symbols
    and its loss and gradients read them alone, so the special ids' scores change none of them."""
    reference = load_file(STEP_REFERENCE)
    prefix = f"{task}/{initializer}/"
    expected = {key.removeprefix(prefix): value for key, value in reference.items() if key.startswith(prefix)}
    actual = seeded_step(task, initializer)
    assert set(actual) == set(expected)
    differing = [key for key in expected if not torch.equal(actual[key], expected[key])]
    assert not differing, differing


# ---------------------------------------------------------------- earlier checkpoints


def test_a_config_of_the_earlier_layout_reads_as_the_same_q_symbols(tmp_path):
    earlier = {"model_type": "treelang", "vocab_size": Q + 1, "bos_token_id": Q, "depth": DEPTH}
    (tmp_path / "config.json").write_text(json.dumps(earlier))
    for config in (TreeLangConfig.from_dict(earlier), TreeLangConfig(vocab_size=Q + 1, bos_token_id=Q),
                   AutoConfig.from_pretrained(tmp_path)):
        assert (config.num_symbols, config.vocab_size, config.bos_token_id, config.pad_token_id) == (Q, Q + 2, Q, Q + 1)


@pytest.mark.parametrize("bos_token_id", ["absent", None, Q])
def test_a_config_dict_reads_as_the_constructor_reads_its_arguments(tmp_path, bos_token_id):
    """``vocab_size = q + 2`` whichever way a config is built: only the earlier layout's mark (``bos_token_id`` one
    below ``vocab_size``) reads a dict as ``q + 1`` ids."""
    arguments = {"vocab_size": Q + 2, "depth": DEPTH}
    if bos_token_id != "absent":
        arguments["bos_token_id"] = bos_token_id
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "treelang", **arguments}))
    for config in (TreeLangConfig(**arguments), TreeLangConfig.from_dict(arguments),
                   AutoConfig.from_pretrained(tmp_path)):
        assert (config.num_symbols, config.vocab_size, config.bos_token_id) == (Q, Q + 2, Q)


@pytest.mark.parametrize("task", ["mlm", "clm", "root"])
def test_a_folder_of_the_earlier_layout_loads_with_the_same_symbol_probabilities(tmp_path, task):
    model = tiny(task)
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "vocab_size": Q + 1}))  # the earlier layout
    loaded = load_pretrained(AUTO[task], tmp_path).eval()  # no missing, unexpected or resized weight
    x, _ = inputs(task)
    with torch.no_grad():
        expected, actual = model(input_ids=x).logits, loaded(input_ids=x).logits
    assert loaded.config.vocab_size == Q + 2 and torch.equal(actual, expected)


def test_the_published_treelang_runs_load_with_one_vocabulary_and_their_own_codes_probabilities(tmp_path):
    """The comparison's TreeLang runs (configs of q + 1 ids): loaded here, their symbol probabilities are those their
    own saved modelling code gives in a Python without hf_treelang, to float rounding (1e-6)."""
    from transformers import PreTrainedTokenizerFast

    folders = sorted(path for path in PUBLISHED.glob("*-treelang-*") if (path / "model.safetensors").is_file())
    assert len(folders) >= 10
    tasks = {folder.name: folder.name.split("-")[1] for folder in folders}
    cases = {}
    for folder in folders:
        config = TreeLangConfig.from_pretrained(folder)
        task = tasks[folder.name]
        x, _ = inputs(task, batch=4, q=config.num_symbols, length=config.sequence_length)
        cases[folder.name] = (folder, task, config.num_symbols, x)
    code = f"""
import json, sys, torch
from transformers import {", ".join(sorted({cls.__name__ for cls in AUTO.values()}))}
auto = {{"mlm": AutoModelForMaskedLM, "clm": AutoModelForCausalLM, "root": AutoModelForSequenceClassification}}
out = {{}}
for name, (folder, task, q, x) in json.loads(sys.stdin.read()).items():
    model = auto[task].from_pretrained(folder, trust_remote_code=True).eval()
    with torch.no_grad():
        out[name] = model(input_ids=torch.tensor(x)).logits[..., :q].softmax(-1).tolist()
print(json.dumps({{"imported": "hf_treelang" in sys.modules, "probabilities": out}}))
"""
    payload = json.dumps({name: (str(folder), task, q, x.tolist()) for name, (folder, task, q, x) in cases.items()})
    done = subprocess.run([sys.executable, "-c", code], input=payload, capture_output=True, text=True, timeout=600,
                          env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1",
                               "HOME": str(tmp_path)}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    assert theirs["imported"] is False
    for name, (folder, task, q, x) in cases.items():
        model = load_pretrained(HEADS[task], folder).eval()
        with torch.no_grad():
            logits = model(input_ids=x).logits
        assert bool(torch.isfinite(logits).all())
        if task != "root":
            assert logits.shape[-1] == model.config.vocab_size == len(PreTrainedTokenizerFast.from_pretrained(folder))
        ours = logits[..., :q].softmax(-1)
        assert torch.allclose(ours, torch.tensor(theirs["probabilities"][name]), rtol=0, atol=1e-6), name


# ---------------------------------------------------------------- inputs and metadata


def test_the_padding_id_is_refused_saying_that_no_sequence_is_padded():
    model = tiny("root")
    x, _ = inputs("root", batch=2)
    x[1, -2:] = Q + 1  # a shorter sequence padded to the batch's length
    with pytest.raises(ValueError, match=r"input_ids must lie in \[0, q\] .* with the padding id \[PAD\] = q \+ 1 = 5: "
                                         r"every TreeLang sequence has exactly 8 tokens and none is padded"):
        model(input_ids=x)


def test_a_grammar_without_sigma_or_seed_is_recorded_as_none(tmp_path):
    config = TreeLangConfig.from_data(num_symbols=Q, depth=DEPTH, sigma=None, grammar_seed=None)
    config.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert (loaded.sigma, loaded.grammar_seed) == (None, None)
    rhm = resolve("root", {"num_symbols": 4, "num_rules": 2, "depth": 2, "arity": 2}, str(tmp_path / "run"))
    assert rhm.model_args.config(rhm.data_args).sigma is None  # a Random Hierarchy Model has no σ
    paper = resolve("root", {"num_symbols": 4, "depth": 2, "sigma": 0.5}, str(tmp_path / "run"))
    assert paper.model_args.config(paper.data_args).sigma == 0.5


def test_an_analysis_of_a_folder_without_sigma_nor_grammar_file_asks_for_its_grammar(tmp_path):
    from hf_treelang.analysis.checkpoint import load_checkpoint

    config = TreeLangConfig.from_data(num_symbols=Q, depth=DEPTH, sigma=None, hidden_size=8, num_hidden_layers=1,
                                      intermediate_size=8)
    TreeLangForMaskedLM(config).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="has no grammar.json .* copy the run's grammar.json next to its weights"):
        load_checkpoint(tmp_path, task="mlm")
