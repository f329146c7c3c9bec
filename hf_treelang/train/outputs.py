"""What a finished run writes next to its weights: ``run_config.json``, ``metrics.json``, the curves and the model card.

* :func:`write_outputs` — every file below, from the run's arguments, final metrics and evaluation history;
* :func:`plot_curves` — ``kl_curves.png`` (mean D_KL(BP_k || model) against the step, every k) and ``curves.png``
  (KL, the k_test accuracies, the loss — with a causal run's excess loss — and the agreement with the matched BP,
  each on its own axes); a run without
  evaluations during training (``--num_evaluations 0``) has no curves, and its card says so;
* :func:`render_model_card` — ``README.md`` from the template ``model_cards/treelang_model_card.md``.
"""

from __future__ import annotations

import importlib.resources
import json
import math
import os
import string

from hf_treelang.citation import BIBTEX, RANDOM_HIERARCHY_BIBTEX
from hf_treelang.models.tokenization_treelang import save_tokenizer
from hf_treelang.plotting import level_color, pyplot, save_figure

from .arguments import DataArguments, ModelArguments, TreeLangTrainingArguments

MODEL_CARD_TEMPLATE = importlib.resources.files("hf_treelang.model_cards") / "treelang_model_card.md"
CURVES_TEXT = """![KL curves](kl_curves.png)

`curves.png` adds the test accuracies per k_test (dashed: BP), the validation loss and the agreement with the
matched BP; `eval_history.json` and `tensorboard/` hold every evaluation."""
NO_CURVES_TEXT = """No curves: the run was not evaluated during training (`--num_evaluations 0`); the numbers above come
from one evaluation after its last step."""
PIPELINE_TAGS = {"root": "text-classification", "mlm": "fill-mask", "finetune": "text-classification",
                 "clm": "text-generation"}
TASK_TAGS = {"root": "root-classification", "mlm": "masked-language-modeling", "finetune": "root-classification",
             "clm": "causal-language-modeling"}
TASK_TITLES = {
    "root": "root classification",
    "mlm": "masked language modelling (one masked leaf)",
    "finetune": "root classification fine-tuned from an MLM checkpoint",
    "clm": "next-leaf prediction (causal language modelling)",
}
MODEL_CLASSES = {"root": "AutoModelForSequenceClassification", "mlm": "AutoModelForMaskedLM",
                 "finetune": "AutoModelForSequenceClassification", "clm": "AutoModelForCausalLM"}
ARCHITECTURES = {"clm": "A causal transformer"}
USAGE = {  # the sizes filled in per run: the sequence length, q, a masked text and a prompt
    "clm": """bos = torch.full((1, 1), ${num_symbols})  # the beginning-of-sequence id is q = ${num_symbols}
leaves = model.generate(bos, do_sample=True)[:, 1:]  # (1, ${length}): a sequence sampled from the model
logits = model(input_ids=torch.cat([bos, leaves[:, :-1]], 1)).logits  # (1, ${length}, q + 2)
next_leaf = logits[0, :, :${num_symbols}].softmax(-1)  # (${length}, q): row i is P(x_i | x_<i)

from transformers import pipeline

generator = pipeline("text-generation", model="path/to/this/folder")
print(generator("", do_sample=True)[0]["generated_text"])  # a whole sequence: the tokenizer adds BOS to a prompt
print(generator("${prompt}", do_sample=True)[0]["generated_text"])  # a prompt of leaves, completed""",
    "mlm": """input_ids = torch.randint(0, ${num_symbols}, (1, ${length}))  # symbols in [0, q)
input_ids[0, 0] = ${num_symbols}  # mask leaf 0: the mask id is q = ${num_symbols}
logits = model(input_ids=input_ids).logits  # (1, ${length}, q + 2): the symbols, then [MASK] and [PAD]
probabilities = logits[0, 0, :${num_symbols}].softmax(-1)  # (q,): P(leaf 0 | the other leaves)

from transformers import pipeline

fill = pipeline("fill-mask", model="path/to/this/folder")
print(fill("${masked_text}", targets=[str(x) for x in range(${num_symbols})]))  # the q symbols' scores""",
}
DEFAULT_USAGE = (  # the root classifiers: a sequence of symbols in [0, q)
    "input_ids = torch.randint(0, ${num_symbols}, (1, ${length}))  # symbols in [0, q)\n"
    "logits = model(input_ids=input_ids).logits  # (1, classes): the root's")
EXCESS_LOSS_TEXT = """
Next-leaf prediction is not a task of the paper: every leaf is predicted from the leaves before it, and the numbers
above average over the sequences and their 2^ℓ positions (KL to BP_k's exact next-leaf distributions). Excess loss
on the same in-sample sequences — the model's cross-entropy per leaf minus their exact loss −log P(x)/2^ℓ under
BP_${k_train} (0 for the exact model): ${excess_loss} nats per leaf, the exact loss being ${exact_loss}.
"""


def _series(history: list, key: str) -> tuple:
    """(steps, values) of ``key`` over the evaluations that logged a finite value; step 0 drawn at 0.5 (log axis)."""
    points = [(max(e["step"], 0.5), e[key]) for e in history
              if isinstance(e.get(key), (int, float)) and math.isfinite(e[key])]
    return ([p[0] for p in points], [p[1] for p in points]) if points else ([], [])


def _kl_panel(ax, history: list, depth: int, k_train: int, num_eval: int | None) -> None:
    for k in range(depth + 1):
        x, y = _series(history, f"eval_kl_bp_k{k}")
        matched = k == k_train
        ax.plot(x, y, marker="o", ms=3, color=level_color(k, depth), lw=2.4 if matched else 1.3,
                label=f"BP$_{{{k}}}$" + (" (matched)" if matched else ""))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("training step (step 0 drawn at 0.5)")
    ax.set_ylabel(r"mean $D_{KL}(\mathrm{BP}_k \,\|\, \mathrm{model})$ (nats)")
    on = f" on {num_eval} in-sample sequences" if num_eval else ""
    ax.set_title(f"Alignment with BP$_k${on}", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)


def plot_curves(history: list, depth: int, k_train: int, test_levels: list, path_all: str, path_kl: str, *,
                num_eval: int | None = None, num_test: int | None = None, reference_sizes: dict | None = None) -> None:
    """``kl_curves.png`` (mean D_KL(BP_k || model) vs step, every k) and ``curves.png`` (four panels: the KL curves,
    the accuracy per k_test with BP's reference as dashed lines, the validation loss, and the argmax agreement and
    Spearman correlation with the matched BP), in the paper's colours (:func:`hf_treelang.plotting.level_color`).

    Args:
        history: the evaluation history, one dict per evaluated step (:func:`~.callbacks.evaluation_history`).
        depth, k_train, test_levels: ℓ, the training filter level and the k_test sets.
        num_eval, num_test, reference_sizes: the sizes written on the panels: in-sample sequences, test sequences
            per k_test (the model) and ``{k_test: n}`` behind BP's reference accuracy.

    Raises:
        ValueError: ``history`` holds no evaluation (nothing to draw on the log-scaled axes).
    """
    if not history:
        raise ValueError("`history` must hold at least one evaluation to plot curves, got none (a run with "
                         "num_evaluations=0 has no curves)")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4.0))
    _kl_panel(ax, history, depth, k_train, num_eval)
    fig.tight_layout()
    save_figure(fig, path_kl, crop=False)

    fig, axes = plt.subplots(2, 2, figsize=(12, 8.4))
    _kl_panel(axes[0, 0], history, depth, k_train, num_eval)

    ax = axes[0, 1]
    for k in test_levels:
        color = level_color(k, depth)
        x, y = _series(history, f"eval_acc_ktest{k}")
        ax.plot(x, y, marker="o", ms=3, color=color, label=f"$k_{{test}}={k}$")
        _, reference = _series(history, f"eval_bp_acc_ktest{k}")
        if reference:
            ax.axhline(reference[-1], color=color, ls="--", lw=1)
    sizes = sorted(set((reference_sizes or {}).values()))
    bp_on = f" on {sizes[0]}" if len(sizes) == 1 else ""
    model_on = f" on {num_test}" if num_test else ""
    ax.set_title(f"Test accuracy per $k_{{test}}$: model{model_on}, BP$_{{{k_train}}}$ (dashed){bp_on} sequences",
                 fontsize=10)
    ax.set_xscale("log")
    ax.set_xlabel("training step (step 0 drawn at 0.5)")
    ax.set_ylabel("accuracy")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)

    ax = axes[1, 0]
    x, y = _series(history, "eval_loss")
    ax.plot(x, y, marker="o", ms=3, color="black", label="validation loss")
    x, y = _series(history, "eval_excess_loss")  # next-leaf prediction only
    if x:
        ax.plot(x, y, marker="o", ms=3, ls="--", color="tab:red", label="excess loss (in-sample, above the exact "
                                                                          "entropy)")
        ax.legend(fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("training step (step 0 drawn at 0.5)")
    ax.set_ylabel("cross-entropy (nats" + (" per leaf)" if x else ")"))
    ax.set_title("Validation loss" + (" and excess loss" if x else ""), fontsize=10)
    ax.grid(alpha=0.3)

    ax = axes[1, 1]
    color = level_color(k_train, depth)
    for key, label, style in (("eval_match_bp", "argmax agreement", "-"), ("eval_spearman_bp", "Spearman correlation",
                                                                              ":")):
        x, y = _series(history, key)
        ax.plot(x, y, marker="o", ms=3, ls=style, color=color, label=label)
    ax.set_xscale("log")
    ax.set_xlabel("training step (step 0 drawn at 0.5)")
    ax.set_ylabel("agreement (unitless)")
    ax.set_title(f"Agreement with the matched BP$_{{{k_train}}}$", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path_all, crop=False)


def format_value(value) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4f}"


def optimizer_text(training_args) -> str:
    """The optimiser of a run in words, from its arguments (the model card's)."""
    name = str(getattr(training_args.optim, "value", training_args.optim))
    decay = (f"weight decay {training_args.weight_decay:g}" if training_args.weight_decay else "no weight decay")
    if name.startswith("adamw") or name.startswith("adam"):
        label = "Adam" if not training_args.weight_decay else "AdamW"
        return (f"{label} (`{name}`; β = {training_args.adam_beta1:g}/{training_args.adam_beta2:g}, "
                f"ε = {training_args.adam_epsilon:g}, {decay})")
    return f"`{name}` ({decay})"


def schedule_text(training_args) -> str:
    """The learning-rate schedule of a run in words, from its arguments (the model card's)."""
    schedule = str(getattr(training_args.lr_scheduler_type, "value", training_args.lr_scheduler_type))
    steps, ratio = getattr(training_args, "warmup_steps", 0) or 0, getattr(training_args, "warmup_ratio", 0) or 0
    warmup = (f", warm-up {steps:g} {'of the steps' if 0 < steps < 1 else 'steps'}" if steps
              else f", warm-up ratio {ratio:g}" if ratio else "")
    return f"learning rate {training_args.learning_rate:g} with the `{schedule}` schedule{warmup}"


def render_model_card(task: str, data_args: DataArguments, model_args: ModelArguments,
                      training_args: TreeLangTrainingArguments, final: dict, train_runtime: float,
                      global_step: int, template_path: str | os.PathLike = MODEL_CARD_TEMPLATE, *,
                      reference_sizes: dict | None = None, has_curves: bool = True,
                      exact_loss: float | None = None, model_config=None) -> str:
    """The model card (README.md) of a finished run, from ``model_cards/treelang_model_card.md``.

    ``has_curves``: the run drew ``curves.png`` / ``kl_curves.png`` (False: it had no evaluation during training,
    and the card says so instead of showing them).

    ``reference_sizes``: ``{k_test: n}``, the sequences behind BP's reference accuracy of each k_test set
    (:attr:`~.callbacks.BPTargets.reference_sizes`; default: the test sets themselves, ``num_test``). The card
    states both sizes and the largest sampling standard error they allow, 0.5/sqrt(n).

    ``exact_loss``: a causal run's exact loss per leaf of its in-sample sequences (:attr:`~.callbacks.BPTargets.
    exact_loss`), stated beside the excess loss.

    ``model_config``: the trained model's config, which names the architecture and its sizes in a run of another
    architecture (``--model_type``); a TreeLang run's card takes them from ``model_args``.
    """
    rows = [
        f"| {k} | {format_value(final.get(f'eval_acc_ktest{k}'))} | {format_value(final.get(f'eval_bp_acc_ktest{k}'))} |"
        for k in data_args.test_levels()
    ]
    kl_rows = [f"| BP_{k} | {format_value(final.get(f'eval_kl_bp_k{k}'))} | {format_value(final.get(f'eval_match_bp_k{k}'))} |"
               for k in range(data_args.depth + 1)]
    sizes = sorted({int(n) for n in (reference_sizes or {}).values()} or {int(data_args.num_test)})
    num_reference = str(sizes[0]) if len(sizes) == 1 else f"{sizes[0]}–{sizes[-1]}"
    model_class = MODEL_CLASSES[task]
    if task == "finetune":
        origin = (f"initialised from the MLM checkpoint `{model_args.model_name_or_path}`, encoder "
                  f"{'frozen' if model_args.freeze_encoder else 'trained'} during fine-tuning")
    else:
        origin = "trained from scratch"
    length = data_args.sequence_arity**data_args.depth
    leaves = [str(i % data_args.num_symbols) for i in range(length)]
    sizes_of = {"num_symbols": data_args.num_symbols, "length": length,
                "masked_text": " ".join(["[MASK]", *leaves[1:]]), "prompt": " ".join(leaves[:length // 2])}
    display = architecture_name(model_args, model_config)
    if model_args.is_treelang:
        model_name, architecture = "TreeLang transformer", ARCHITECTURES.get(task, "An encoder-only transformer")
        shape = (f"d = {model_args.hidden_size}, {model_args.model_kwargs(data_args.depth)['num_hidden_layers']} "
                 f"layers, d' = {model_args.intermediate_size}, one\nattention head")
    else:
        model_name = f"{display} on TreeLang data"
        architecture = (f"{indefinite_article(display).capitalize()} {display} model of transformers "
                        f"(`{model_args.model_type}`), its config fitted to the TreeLang vocabulary "
                        f"(`architecture.json` lists what changed)")
        dimensions = {label: getattr(model_config, field, None) for label, field in
                      (("d", "hidden_size"), ("layers", "num_hidden_layers"), ("d'", "intermediate_size"))}
        shape = ", ".join(f"{label} = {value}" for label, value in dimensions.items() if isinstance(value, int)) or \
            f"config overrides: {model_args.config_overrides}"
    loading_note = LOADING_TREELANG if model_args.is_treelang else string.Template(LOADING_OTHER).substitute(
        model_type=model_args.model_type, pipeline_tag=PIPELINE_TAGS[task])
    values = {
        "front_matter": card_front_matter(task, data_args, final, model_name,
                                          reference_sizes=reference_sizes or {}),
        "loading_note": loading_note,
        "model_name": model_name,
        "shape": shape,
        "architecture": architecture,
        "usage": string.Template(USAGE.get(task, DEFAULT_USAGE)).substitute(sizes_of),
        "task_evaluation": string.Template(EXCESS_LOSS_TEXT).substitute(
            k_train=data_args.k_train, excess_loss=format_value(final.get("eval_excess_loss")),
            exact_loss=format_value(exact_loss)) if task == "clm" else "",
        "pipeline_tag": PIPELINE_TAGS[task],
        "task": task,
        "task_tag": TASK_TAGS[task],
        "task_title": TASK_TITLES[task],
        "k_train": data_args.k_train,
        "depth": data_args.depth,
        "num_symbols": data_args.num_symbols,
        "sigma": data_args.sigma,
        "grammar_seed": data_args.grammar_seed,
        "num_train": data_args.num_train,
        "num_eval": data_args.num_eval,
        "num_test": data_args.num_test,
        "num_reference": num_reference,
        "model_error": f"{0.5 / math.sqrt(data_args.num_test):.3f}",
        "bp_error": f"{0.5 / math.sqrt(sizes[0]):.3f}",
        "origin": origin,
        "model_class": model_class,
        "optimizer": optimizer_text(training_args),
        "schedule": schedule_text(training_args),
        "clipping": (f"gradients clipped at norm {training_args.max_grad_norm:g}" if training_args.max_grad_norm
                     else "no gradient clipping"),
        "batch_size": training_args.per_device_train_batch_size,
        "epochs": training_args.num_train_epochs,
        "global_step": global_step,
        "train_runtime": f"{train_runtime:.0f}",
        "seed": training_args.seed,
        "preset": training_args.preset,
        "accuracy_rows": "\n".join(rows),
        "kl_rows": "\n".join(kl_rows),
        "spearman": format_value(final.get("eval_spearman_bp")),
        "curves": CURVES_TEXT if has_curves else NO_CURVES_TEXT,
        "match": format_value(final.get("eval_match_bp")),
        "citation": BIBTEX + (f"\n{RANDOM_HIERARCHY_BIBTEX}" if data_args.is_random_hierarchy else ""),
    }
    values.update(data_texts(data_args))
    with open(template_path) as handle:
        return string.Template(handle.read()).substitute(values)


LOADING_TREELANG = """Without `hf_treelang`: the folder is a Hub repository of its own (push it as it is). Its
tokenizer (`tokenizer.json`, the `tokenizers` library's) loads with stock transformers and no code of the folder,
`PreTrainedTokenizerFast.from_pretrained(folder)`; `AutoTokenizer` reads the folder's config first, which names the
TreeLang modelling code, so without `import hf_treelang` it asks whether to run it (`trust_remote_code=False`: it
does not, and warns that the config is not a tokenizer's model). The TreeLang model needs that code:
`AutoModelFor...from_pretrained(folder, trust_remote_code=True)` and the pipelines with `trust_remote_code=True` (the
code is saved next to the weights, `modeling_treelang.py`). What needs hf-treelang: BP, the data and the analyses."""
LOADING_OTHER = """Without `hf_treelang`: the folder is a Hub repository of its own (push it as it is). The model (a
`${model_type}` model of transformers) and its tokenizer (`tokenizer.json`, the `tokenizers` library's) load with
transformers alone, and `pipeline("${pipeline_tag}", model=folder)` runs on it; no code of this folder runs. What needs
hf-treelang: BP, the data and the analyses. A word that is not a symbol below q nor `[MASK]` / `[PAD]` has no id: the
stock tokenizer stops on it with `Exception: WordLevel error: Missing [UNK] token from the vocabulary`."""


def architecture_name(model_args: ModelArguments, model_config=None) -> str:
    """The architecture's name as its transformers config class writes it (``Electra``, ``GPTNeoX``, ``Bert``),
    ``TreeLang`` for the package's encoder, the model type where no config is at hand."""
    if model_args.is_treelang:
        return "TreeLang"
    if model_config is not None and type(model_config).__name__.endswith("Config"):
        return type(model_config).__name__.removesuffix("Config")
    return str(model_args.model_type)


def indefinite_article(name: str) -> str:
    """``"an"`` before a vowel sound (``an ELECTRA``, ``an RWKV``, ``an MPT``), ``"a"`` otherwise (``a BERT``)."""
    first = name[:1].upper()
    spelled = name[:2].isupper() and name.replace(" ", "").isalnum() and first in "FHLMNRSX"  # letters read out
    return "an" if first in "AEIOU" or spelled else "a"


def card_front_matter(task: str, data_args: DataArguments, final: dict, model_name: str, *,
                      reference_sizes: dict) -> str:
    """The card's YAML front matter, from ``huggingface_hub.ModelCardData``: the library, pipeline, dataset and tags,
    and a ``model-index`` in the Hub's format whose values are the run's final metrics (``metrics.json``'s
    ``final``): per k_test the model's accuracy and the matched BP_{k_train}'s as a separate named metric (split
    ``test``, the dataset config of that k_test), the mean KL to every BP_k on the in-sample validation inputs (the
    config of k_train), and a causal run's excess loss."""
    from huggingface_hub import EvalResult, ModelCardData

    from .data import dataset_config  # lazy: imports datasets (the card's dataset config names)

    dataset_name = ("Trees of the run's grammar.json (hf-treelang)" if data_args.grammar_file is not None
                    else "Random Hierarchy Model (hf-treelang)" if data_args.is_random_hierarchy
                    else "Filtered hierarchical tree language (hf-treelang)")
    results = []

    def add(metric_type: str, name: str, value, level: int, split: str) -> None:
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            return
        results.append(EvalResult(
            task_type=PIPELINE_TAGS[task], task_name=TASK_TITLES[task], dataset_type="treelang",
            dataset_name=dataset_name, dataset_split=split,
            dataset_config=None if data_args.grammar_file is not None else dataset_config(data_args, level).name,
            metric_type=metric_type, metric_name=name, metric_value=float(value)))

    k = data_args.k_train
    for level in data_args.test_levels():
        add("accuracy", f"accuracy (k_test = {level})", final.get(f"eval_acc_ktest{level}"), level, "test")
        add("accuracy", f"BP_{k} accuracy (k_test = {level})", final.get(f"eval_bp_acc_ktest{level}"), level, "test")
    for level in range(data_args.depth + 1):
        add("kl_divergence", f"mean KL(BP_{level} ‖ model)", final.get(f"eval_kl_bp_k{level}"), k, "validation")
    if task == "clm":
        add("loss", f"excess loss over BP_{k} (nats per leaf)", final.get("eval_excess_loss"), k, "validation")
    data = ModelCardData(library_name="transformers", pipeline_tag=PIPELINE_TAGS[task],
                         tags=["hf-treelang", "hierarchical-filtering", "belief-propagation", "synthetic-data",
                               TASK_TAGS[task]], license="mit", model_name=model_name,
                         eval_results=results or None)
    return data.to_yaml()


def data_texts(data_args: DataArguments) -> dict:
    """The model card's sentences on the data: ``data_summary`` (what it was trained on) and ``input_summary`` (what
    it reads), for the paper's grammar or a Random Hierarchy Model (its dataset config's name and parameters), or a
    grammar file's (no dataset config: the run's grammar.json)."""
    a = data_args
    if a.grammar_file is not None:
        return {
            "data_summary": (f"trees of the grammar in `grammar.json` (filter level k = {a.k_train}, depth ℓ = "
                             f"{a.depth}, arity s = {a.sequence_arity}, q = {a.num_symbols} symbols), sampled "
                             f"directly,\nP = {a.num_train} training sequences of s^ℓ leaves"),
            "input_summary": (f"{a.sequence_arity}^{a.depth} symbols in\n  [0, {a.num_symbols}] generated by this "
                              f"grammar (`grammar.json`)"),
        }
    if not a.is_random_hierarchy:
        return {
            "data_summary": (f"the filtered hierarchical tree language of *How Transformers Learn Structured Data:\n"
                             f"Insights From Hierarchical Filtering* (Garnier-Brun, Mézard, Moscato, Saglietti, ICML "
                             f"2025): the `treelang` dataset,\nconfig `k{a.k_train}` (filter level k = {a.k_train}, "
                             f"depth ℓ = {a.depth}, q = {a.num_symbols} symbols, σ = {a.sigma},\ngrammar seed "
                             f"{a.grammar_seed}), P = {a.num_train} training sequences of 2^ℓ leaves"),
            "input_summary": (f"2^{a.depth} symbols in\n  [0, {a.num_symbols}] generated by this grammar (seed "
                              f"{a.grammar_seed}, σ = {a.sigma})"),
        }
    from .data import dataset_config  # lazy: imports datasets, which a paper's card does not need

    name = dataset_config(a, a.k_train).name
    return {
        "data_summary": (f"a Random Hierarchy Model (Cagnetta, Petrini, Tomasini, Favero & Wyart, PRX 2024): the "
                         f"`treelang` dataset,\nconfig `{name}` (filter level k = {a.k_train}, L = {a.depth} levels "
                         f"of arity s = {a.arity}, v = {a.num_symbols} symbols, n = {a.num_classes}\nroot classes, m = "
                         f"{a.num_rules} rules per symbol, grammar seed {a.grammar_seed}), P = {a.num_train} "
                         f"training sequences of s^L leaves"),
        "input_summary": (f"{a.arity}^{a.depth} symbols in\n  [0, {a.num_symbols}] generated by this grammar "
                          f"(`grammar.json`)"),
    }


ARCHITECTURE_FILE = "architecture.json"  # another architecture's run: what fitting its config to the data changed


def write_tokenizer(output_dir, num_symbols: int, task: str) -> None:
    """Save the run's tokenizer next to its weights (:func:`~hf_treelang.models.tokenization_treelang.save_tokenizer`:
    ``tokenizer.json`` of the ``tokenizers`` library and a stock ``tokenizer_config.json``), so that
    ``AutoTokenizer.from_pretrained`` and ``pipeline(..., model=output_dir)`` work on the folder without hf_treelang
    (a causal run's tokenizer starts every sequence with the beginning-of-sequence token)."""
    save_tokenizer(output_dir, num_symbols, causal=task == "clm")


def write_outputs(task, data_args, model_args, training_args, bp_callback, final, history, train_runtime,
                   train_output, global_step, model_config=None, stopping: dict | None = None) -> None:
    """Write ``metrics.json``, ``curves.png``, ``kl_curves.png`` and the model card into
    ``training_args.output_dir``; ``stopping``: the validation stopping rule's record
    (:meth:`hf_treelang.train.stopping.StoppingRecord.to_dict`), kept as ``early_stopping``."""
    output_dir = training_args.output_dir
    targets = bp_callback.prepare()
    summary = {
        "task": task,
        "global_step": global_step,
        "train_runtime_s": train_runtime,
        "train_loss": train_output.training_loss,
        "final": final,
        "bp_accuracy": {str(k): v for k, v in targets.bp_accuracy.items() if not math.isnan(v)},  # NaN: undefined
        "bp_reference_size": {str(k): n for k, n in targets.reference_sizes.items()},
        "num_test": data_args.num_test,
        "num_eval": data_args.num_eval,
        "history": history,
    }
    if stopping is not None:
        summary["early_stopping"] = stopping
    if targets.exact_loss is not None:  # next-leaf prediction: -log P_{k_train}(x) / 2**l of the in-sample sequences
        summary["exact_loss_per_leaf"] = targets.exact_loss
    with open(os.path.join(output_dir, "metrics.json"), "w") as handle:
        json.dump(summary, handle, indent=1, sort_keys=True)
    if history:  # none with num_evaluations=0: the card says there are no curves
        plot_curves(history, data_args.depth, data_args.k_train, data_args.test_levels(),
                    os.path.join(output_dir, "curves.png"), os.path.join(output_dir, "kl_curves.png"),
                    num_eval=data_args.num_eval, num_test=data_args.num_test, reference_sizes=targets.reference_sizes)
    card = render_model_card(task, data_args, model_args, training_args, final, train_runtime, global_step,
                             reference_sizes=targets.reference_sizes, has_curves=bool(history),
                             exact_loss=targets.exact_loss, model_config=model_config)
    with open(os.path.join(output_dir, "README.md"), "w") as handle:
        handle.write(card)
