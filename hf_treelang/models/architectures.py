"""Any ``transformers`` architecture on TreeLang data: its config patched to the TreeLang vocabulary, and its head.

Glossary: ``q`` symbols, ``l`` depth (ℓ), sequences of ``L = 2**l`` leaves, ``V = q + 2`` ids
(:class:`hf_treelang.core.vocabulary.Vocabulary`).

A model type other than ``"treelang"`` is built the way transformers' own example scripts build one
(``--model_type`` / ``--config_overrides`` / ``--config_name``): its config comes from ``AutoConfig.for_model(type,
**overrides)`` (so that the config derives its dependent sizes, e.g. Llama's ``head_dim``) or from a local config
file, and the model from ``AutoModelFor{MaskedLM, CausalLM, SequenceClassification}.from_config``. Before that,
:func:`patch_config` fits the config to TreeLang data, and says what it changed:

* ``vocab_size`` = q + 2;
* every special id is made distinct from every symbol: padding q + 1, beginning of sequence and mask q, end of
  sequence (and any other special id: CLS, SEP, UNK) none — TreeLang sequences have a fixed length, nothing ends them.
  Architectures' defaults otherwise collide with the symbols or fall outside the vocabulary: BERT's
  ``pad_token_id = 0`` (the embedding's ``padding_idx``: symbol 0 would be a zero row that never trains), RoBERTa's
  pad 1, Llama's bos 1 / eos 2, GPT-2's 50256, ModernBERT's 50281–50283;
* positions: ``max_position_embeddings`` (or the field it aliases, e.g. GPT-2's ``n_positions``, RWKV's
  ``context_length``) = 2**ℓ, plus pad + 1 where the architecture numbers positions after the padding id (RoBERTa and
  the other models that use ``create_position_ids_from_input_ids``);
* what an architecture needs at 2**ℓ tokens: ModernBERT ``sparse_prediction = False`` (logits at every position),
  Mamba2 and xLSTM ``chunk_size`` at most 2**ℓ, Mamba2 ``num_heads`` = expand · hidden_size / head_dim unless
  given (its default fits only its default size), xLSTM ``mode = "train"``; the decoder flag of an encoder used as a causal LM;
* root classification: ``num_labels`` = q with the labels ``symbol_0 .. symbol_{q-1}``.

A value the user gave (an override, or a field of the config file) is never changed: where it does not fit, the
config is refused in one line naming the field and the value (:class:`ArchitectureError`), as is a type without a
head for the task. Finally one forward pass of two sequences checks that the model runs at 2**ℓ tokens.

Root classification for architectures without a sequence-classification head in transformers (Mamba, Mamba2, RWKV,
xLSTM, ...): :class:`PooledRootClassifier`, the backbone's final state of the *last* position through one linear
layer to q logits. Why the last position: these models are causal, so the last position is the only one whose state
has read the whole sequence — the same pooling transformers' own decoder classifiers (GPT-2, Llama) use.

A user's own architecture joins as in transformers: ``AutoConfig.register("mine", MyConfig)`` and
``AutoModelForMaskedLM.register(MyConfig, MyForMaskedLM)``, then ``--model_type mine``.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    PreTrainedModel,
)
from transformers.modeling_outputs import SequenceClassifierOutput

from hf_treelang.core.vocabulary import Vocabulary

TREELANG = "treelang"
TASK_HEADS = {"mlm": AutoModelForMaskedLM, "clm": AutoModelForCausalLM, "root": AutoModelForSequenceClassification}
HEAD_NAMES = {"mlm": "masked-LM", "clm": "causal-LM", "root": "sequence-classification"}
POSITION_FIELDS = ("max_position_embeddings", "n_positions", "context_length", "n_ctx")
SPECIAL_ID_ROLES = {"pad_token_id": "pad", "bos_token_id": "bos", "mask_token_id": "mask",
                    "decoder_start_token_id": "bos"}  # every other *_token_id becomes None
# Types whose pooled root head hf_treelang provides (no sequence-classification head in transformers).
POOLED_ROOT_TYPES = ("mamba", "mamba2", "rwkv", "xlstm", "falcon_mamba")
# Types whose fast kernels come from packages that run on CUDA only (transformers' modeling files: Mamba's
# `use_kernel_func_from_hub_with_fallback(..., "mamba_ssm" / "causal_conv1d")`, RWKV's WKV kernel compiled with ninja
# on a GPU): elsewhere, or without the packages, transformers runs its torch reference path (Mamba's and RWKV's scan
# the positions one after another). {model type: the packages' distribution names}
CUDA_KERNEL_PACKAGES = {"mamba": ("mamba-ssm", "causal-conv1d"), "falcon_mamba": ("mamba-ssm", "causal-conv1d"),
                        "mamba2": ("mamba-ssm", "causal-conv1d"), "rwkv": ("ninja",)}


class ArchitectureError(ValueError):
    """A model type, override or config that cannot be fitted to TreeLang data (one line naming field and value)."""


@dataclass
class PatchedConfig:
    """A config fitted to TreeLang data, and what the fitting changed.

    Attributes:
        config: the ``PreTrainedConfig`` to build the model from.
        model_type: its type.
        changes: ``{field: [before, after]}`` of every value :func:`patch_config` set.
        overrides: the user's ``{field: value}`` (from ``--config_overrides``).
    """

    config: object
    model_type: str
    changes: dict = field(default_factory=dict)
    overrides: dict = field(default_factory=dict)

    def summary(self) -> dict:
        """JSON-ready record of the patch (written to the run folder as ``architecture.json``)."""
        return json.loads(json.dumps({"model_type": self.model_type, "overrides": self.overrides,
                                      "changes": self.changes}, default=str))

    def describe(self) -> str:
        """One console line: the type and the fields the patch changed."""
        changed = ", ".join(f"{name} {before!r} -> {after!r}" for name, (before, after) in self.changes.items())
        return f"{self.model_type}: fitted to TreeLang data ({changed or 'nothing changed'})"


# ---------------------------------------------------------------- parsing


def parse_overrides(text: str | None) -> dict:
    """``"k=v,k2=v2"`` as a dict of strings (values are typed by :func:`typed_overrides`); ``{}`` for None / "".

    Example:
        >>> parse_overrides("hidden_size=64, num_hidden_layers=4")
        {'hidden_size': '64', 'num_hidden_layers': '4'}
    """
    if text is None or not str(text).strip():
        return {}
    out = {}
    for item in str(text).split(","):
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name.isidentifier() or not value:
            raise ArchitectureError(f"--config_overrides must be 'field=value' pairs separated by commas, got "
                                    f"{item.strip()!r} in {text!r}")
        if name in out:
            raise ArchitectureError(f"--config_overrides sets {name!r} twice in {text!r}")
        out[name] = value
    return out


def _typed(name: str, text: str, default):
    """``text`` as the type of the field's ``default`` (bool, int, float, str; JSON where the default is None)."""
    if isinstance(default, bool):
        if text.lower() in ("true", "1"):
            return True
        if text.lower() in ("false", "0"):
            return False
        raise ArchitectureError(f"config override {name}={text!r}: {name} must be true or false")
    if isinstance(default, int):
        try:
            return int(text)
        except ValueError:
            raise ArchitectureError(f"config override {name}={text!r}: {name} must be an integer") from None
    if isinstance(default, float):
        try:
            value = float(text)
        except ValueError:
            raise ArchitectureError(f"config override {name}={text!r}: {name} must be a number") from None
        if not math.isfinite(value):
            raise ArchitectureError(f"config override {name}={text!r}: {name} must be a finite number")
        return value
    if isinstance(default, str):
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


# config fields a run may not set: the package decides them (outputs it reads, the training precision)
OWNED_FIELDS = {
    "output_attentions": "the analyses ask for attention maps when they read them (hf-treelang attention)",
    "output_hidden_states": "the analyses ask for hidden states when they read them (hf-treelang probe)",
    "return_dict": "the training loop reads the model's outputs by name",
    "dtype": "the training precision is the Trainer's (--bf16, --tf32), the weights stay float32",
    "torch_dtype": "the training precision is the Trainer's (--bf16, --tf32), the weights stay float32",
}


def typed_overrides(config_class, overrides: dict) -> dict:
    """The overrides typed like the fields of ``config_class()``; an unknown field, a private name and a field the
    package owns (:data:`OWNED_FIELDS`) are refused."""
    try:
        default = config_class()
    except Exception as error:  # a registered config that cannot be built with its defaults
        raise ArchitectureError(f"{getattr(config_class, 'model_type', config_class.__name__)}: its config cannot be "
                                f"built with its defaults ({type(error).__name__}: {_first_line(error)})") from None
    out = {}
    for name, text in overrides.items():
        if name.startswith("_"):
            raise ArchitectureError(f"config override {name}={text!r}: {name!r} is not a config field")
        if name in OWNED_FIELDS:
            raise ArchitectureError(f"config override {name}={text!r}: leave {name} unset: {OWNED_FIELDS[name]}")
        if name in ("vocab_size", "num_labels") or name in SPECIAL_ID_ROLES or name.endswith("_token_id"):
            raise ArchitectureError(f"config override {name}={text!r}: {name} is set by the TreeLang data "
                                    f"(vocab_size q + 2, special ids outside the symbols, num_labels q)")
        if not hasattr(default, name):
            raise ArchitectureError(f"config override {name}={text!r}: {type(default).__name__} has no field "
                                    f"{name!r}")
        out[name] = _typed(name, text, getattr(default, name))
    return out


def config_class_of(model_type: str):
    """The config class registered for ``model_type`` (transformers' or a user's ``AutoConfig.register``)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING  # lazy: the registry, read at call time

    if model_type not in CONFIG_MAPPING:
        raise ArchitectureError(f"--model_type {model_type!r} is not a model type of transformers or one "
                                f"registered with AutoConfig.register (e.g. treelang, bert, roberta, modernbert, "
                                f"distilbert, gpt2, llama, mamba)")
    return CONFIG_MAPPING[model_type]


# ---------------------------------------------------------------- the patch


def _position_field(config) -> str | None:
    for name in POSITION_FIELDS:
        if name in getattr(config, "attribute_map", {}):
            return config.attribute_map[name]
        if getattr(config, name, None) is not None and isinstance(getattr(config, name), int):
            return name
    return None


def position_offset(model_type: str, pad_token_id: int) -> int:
    """Positions an architecture numbers before the first token: pad + 1 where its embedding counts positions from
    the padding id on (RoBERTa and the models whose modeling file uses ``create_position_ids_from_input_ids``)."""
    from transformers.models.auto.configuration_auto import model_type_to_module_name  # lazy: resolved per type

    module = model_type_to_module_name(model_type)
    try:
        source = inspect.getsource(importlib.import_module(f"transformers.models.{module}.modeling_{module}"))
    except (ImportError, OSError, TypeError):
        return 0  # a user's own type: the forward check of check_runs says whether 2**l positions fit
    return pad_token_id + 1 if "create_position_ids_from_input_ids" in source else 0


def check_config_file_code(config_name: str, trust_remote_code: bool = False) -> None:
    """A config file is data: one whose ``auto_map`` names code to import from its folder (a model of its own) is
    refused in one line unless ``trust_remote_code`` (``--trust_remote_code true``) says to run that code."""
    candidates = [Path(config_name), Path(config_name) / "config.json"]
    found = next((candidate for candidate in candidates if candidate.is_file()), None)
    if found is None:
        return  # AutoConfig says what is missing
    try:
        value = json.loads(found.read_text())
    except (OSError, ValueError, UnicodeDecodeError) as error:
        raise ArchitectureError(f"--config_name {config_name!r}: {str(found)!r} is not readable JSON ({error})") from None
    if isinstance(value, dict) and value.get("auto_map") and not trust_remote_code:
        raise ArchitectureError(f"--config_name {config_name!r} has an auto_map (code of its own in that folder: "
                                f"{', '.join(sorted(value['auto_map']))}); a config file is read as data: pass "
                                "--trust_remote_code true to run that code")


def patch_config(model_type: str | None, task: str, num_symbols: int, depth: int, *,
                 config_overrides: str | None = None, config_name: str | None = None,
                 trust_remote_code: bool = False) -> PatchedConfig:
    """The config of ``model_type`` (or of the local config file ``config_name``) fitted to TreeLang data of
    ``num_symbols`` (q) symbols and ``depth`` (ℓ) for ``task`` (``"mlm"``, ``"clm"`` or ``"root"``); see the module
    docstring for what changes. Raises :class:`ArchitectureError` (one line) for what cannot fit, whatever the
    foreign config raised. A config file with code of its own (``auto_map``) is refused unless ``trust_remote_code``
    (:func:`check_config_file_code`)."""
    try:
        return _patch_config(model_type, task, num_symbols, depth, config_overrides=config_overrides,
                             config_name=config_name, trust_remote_code=trust_remote_code)
    except ArchitectureError:
        raise
    except Exception as error:  # a foreign config's property or check refusing what the fitting sets
        raise ArchitectureError(f"{model_type or config_name}: its config cannot be fitted to {2**depth} leaves of "
                                f"{num_symbols} symbols ({type(error).__name__}: {_first_line(error)})") from None


def _patch_config(model_type: str | None, task: str, num_symbols: int, depth: int, *,
                  config_overrides: str | None = None, config_name: str | None = None,
                  trust_remote_code: bool = False) -> PatchedConfig:
    if task not in TASK_HEADS:
        raise ArchitectureError(f"task must be one of {tuple(TASK_HEADS)}, got {task!r}")
    vocabulary = Vocabulary(num_symbols)
    overrides = parse_overrides(config_overrides)
    if config_name is not None:
        check_config_file_code(config_name, trust_remote_code)
        try:
            base = AutoConfig.from_pretrained(config_name, trust_remote_code=trust_remote_code)
        except Exception as error:  # OSError, ValueError, a foreign config's own TypeError or KeyError
            raise ArchitectureError(f"--config_name {config_name!r}: not a readable config "
                                    f"({type(error).__name__}: {_first_line(error)})") from None
        if model_type not in (None, base.model_type):
            raise ArchitectureError(f"--model_type {model_type!r} disagrees with --config_name {config_name!r}, "
                                    f"whose model_type is {base.model_type!r}")
        model_type = base.model_type
        typed = typed_overrides(type(base), overrides)
        try:
            for name, value in typed.items():
                setattr(base, name, value)
        except Exception as error:
            raise ArchitectureError(f"--config_overrides {config_overrides!r}: {model_type} refuses them "
                                    f"({type(error).__name__}: {_first_line(error)})") from None
        given = set(base.to_diff_dict()) | set(typed)
        config = base
    else:
        config_class = config_class_of(model_type)
        typed = typed_overrides(config_class, overrides)
        try:
            config = config_class(**_derived_sizes(config_class, typed))
        except Exception as error:  # a foreign config's checks raise what they raise
            raise ArchitectureError(f"--config_overrides {config_overrides!r}: {model_type} refuses them "
                                    f"({type(error).__name__}: {_first_line(error)})") from None
        given = set(typed)
    if model_type == TREELANG:
        raise ArchitectureError("--model_type treelang is built from the TreeLang flags, not patched")
    if getattr(config, "is_encoder_decoder", False):
        raise ArchitectureError(f"{model_type} is an encoder-decoder model: its decoder would read the labels it "
                                "predicts (transformers shifts them into the decoder's input), so the trained function "
                                "is not the one the BP-KL callback evaluates; use an encoder (bert, roberta, ...) or a "
                                "decoder (gpt2, llama, ...)")
    patched = PatchedConfig(config, model_type, overrides=typed)
    changes = patched.changes

    def put(name, value):
        before = getattr(config, name, None)
        if before != value:
            setattr(config, name, value)
            changes[name] = [before, value]

    put("vocab_size", vocabulary.size)
    ids = {"pad": vocabulary.pad_token_id, "bos": vocabulary.bos_token_id, "mask": vocabulary.mask_token_id}
    for name in sorted(config.to_dict()):
        if name.endswith("_token_id") and name not in ("sparse_pred_ignore_index",):
            put(name, ids.get(SPECIAL_ID_ROLES.get(name)))
    if getattr(config, "pad_token_id", None) is None:  # decoders' classifiers need one to find the last token
        put("pad_token_id", vocabulary.pad_token_id)
    sequence_length = 2**depth
    position_field = _position_field(config)
    if position_field is not None:
        needed = sequence_length + position_offset(model_type, vocabulary.pad_token_id)
        current = getattr(config, position_field)
        if position_field in given or "max_position_embeddings" in given:
            if current < needed:
                raise ArchitectureError(f"{position_field}={current} holds fewer positions than the {needed} that "
                                        f"{sequence_length} leaves need with {model_type}: set it to at least "
                                        f"{needed}")
        else:
            put(position_field, needed)
    _fit_architecture(config, model_type, task, sequence_length, given, put)
    if task == "root":
        if getattr(config, "num_labels", num_symbols) != num_symbols and "num_labels" in given:
            raise ArchitectureError(f"num_labels={config.num_labels}: the root classifier predicts one of the "
                                    f"q = {num_symbols} symbols")
        labels = {i: f"symbol_{i}" for i in range(num_symbols)}
        if getattr(config, "id2label", None) != labels:
            config.id2label, config.label2id = labels, {name: i for i, name in labels.items()}
            changes["num_labels"] = [None, num_symbols]
        if "problem_type" in given and getattr(config, "problem_type", None) not in (None,
                                                                                      "single_label_classification"):
            raise ArchitectureError(f"problem_type={config.problem_type!r}: the root classifier is trained with "
                                    "single_label_classification (cross-entropy over the q symbols); leave it unset")
        put("problem_type", "single_label_classification")
    check_head(config, task)
    return patched


def _derived_sizes(config_class, typed: dict) -> dict:
    """The keyword arguments of ``config_class`` with the sizes its own checks tie together filled in where the user
    left them: Mamba2's ``num_heads`` = expand · hidden_size / head_dim (its default suits only its default size)."""
    kwargs = dict(typed)
    if getattr(config_class, "model_type", None) == "mamba2" and "num_heads" not in kwargs:
        default = config_class()
        expand = kwargs.get("expand", default.expand)
        hidden, head_dim = kwargs.get("hidden_size", default.hidden_size), kwargs.get("head_dim", default.head_dim)
        if (expand * hidden) % head_dim == 0:
            kwargs["num_heads"] = int(expand * hidden) // head_dim
    return kwargs


def _fit_architecture(config, model_type: str, task: str, sequence_length: int, given: set, put) -> None:
    """What an architecture needs at ``sequence_length`` tokens (module docstring); a given value is kept."""
    if getattr(config, "sparse_prediction", False):
        if "sparse_prediction" in given:
            raise ArchitectureError("sparse_prediction=True gives logits only at the masked positions: the BP-KL "
                                    "callback reads every position, set sparse_prediction=false")
        put("sparse_prediction", False)
    chunk = getattr(config, "chunk_size", None)
    if isinstance(chunk, int) and chunk > sequence_length and model_type in ("mamba2", "xlstm"):
        if "chunk_size" in given:
            raise ArchitectureError(f"chunk_size={chunk} exceeds the {sequence_length} leaves of a sequence: set "
                                    f"it to at most {sequence_length}")
        put("chunk_size", sequence_length)
    if model_type == "xlstm" and getattr(config, "mode", None) != "train":
        put("mode", "train")
    if task == "clm" and hasattr(config, "is_decoder") and model_type in _masked_lm_types():
        put("is_decoder", True)  # an encoder's causal-LM head (BertLMHeadModel, ...) needs its decoder flag
    if task == "mlm" and getattr(config, "is_decoder", False) and "is_decoder" not in given:
        put("is_decoder", False)


def _masked_lm_types() -> set:
    """The model types that have a masked-LM head: encoders, whose causal-LM variant needs ``is_decoder = True``."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES  # lazy: the registry

    return set(MODEL_FOR_MASKED_LM_MAPPING_NAMES)


def has_head(config, task: str) -> bool:
    """Whether transformers (or a user's registration, or :class:`PooledRootClassifier`) has a ``task`` head for
    ``config``'s type."""
    if type(config) in TASK_HEADS[task]._model_mapping:
        return True
    return task == "root" and config.model_type in POOLED_ROOT_TYPES


def check_head(config, task: str) -> None:
    """Refuse a type without a head for ``task``, in one line."""
    if not has_head(config, task):
        raise ArchitectureError(f"--model_type {config.model_type!r} has no {HEAD_NAMES[task]} head in transformers"
                                f" (AutoModelFor{TASK_HEADS[task].__name__[len('AutoModelFor'):]}): choose another "
                                f"type for this task")


# ---------------------------------------------------------------- models


class PooledRootClassifier(PreTrainedModel):
    """Root classification with any backbone: ``AutoModel.from_config(config)``, its last position's final state
    (B, C), one linear layer to the q root classes (module docstring: why the last position).

    Subclassed per config class by :func:`pooled_root_classifier` (``config_class`` must name one), so that
    ``AutoModelForSequenceClassification.from_pretrained`` loads it once ``hf_treelang`` registered it.
    """

    base_model_prefix = "backbone"
    config_class = None

    def __init__(self, config):
        super().__init__(config)
        self.backbone = AutoModel.from_config(config)
        hidden = getattr(config, "hidden_size", None) or getattr(config, "embedding_dim")
        self.classifier = nn.Linear(hidden, config.num_labels)
        self.post_init()

    def _init_weights(self, module):
        if module is self.classifier:
            std = getattr(self.config, "initializer_range", 0.02)
            nn.init.normal_(module.weight, std=std)
            nn.init.zeros_(module.bias)

    def forward(self, input_ids=None, attention_mask=None, labels=None, output_hidden_states=None,
                return_dict=None, **kwargs):
        outputs = self.backbone(input_ids=input_ids, output_hidden_states=output_hidden_states)
        states = outputs[0]  # (B, T, C)
        logits = self.classifier(states[:, -1])  # (B, q): the last position has read the whole sequence
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(logits.float(), labels.view(-1))
        return SequenceClassifierOutput(loss=loss, logits=logits,
                                        hidden_states=getattr(outputs, "hidden_states", None))


_POOLED_CLASSES: dict = {}


def pooled_root_classifier(config_class) -> type:
    """The :class:`PooledRootClassifier` subclass of ``config_class`` (one per class, created once)."""
    if config_class not in _POOLED_CLASSES:
        name = config_class.__name__.replace("Config", "") + "ForRootClassification"
        _POOLED_CLASSES[config_class] = type(name, (PooledRootClassifier,), {
            "config_class": config_class, "__module__": __name__,
            "__doc__": f"{PooledRootClassifier.__doc__.splitlines()[0]} (for {config_class.__name__})."})
    return _POOLED_CLASSES[config_class]


def register_pooled_root_classifiers() -> None:
    """Make ``AutoModelForSequenceClassification`` build and load the pooled root head of :data:`POOLED_ROOT_TYPES`
    (idempotent; a type this transformers release does not have is skipped)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING  # lazy: the registry

    for model_type in POOLED_ROOT_TYPES:
        if model_type not in CONFIG_MAPPING:
            continue
        config_class = CONFIG_MAPPING[model_type]
        if config_class in AutoModelForSequenceClassification._model_mapping:
            continue
        AutoModelForSequenceClassification.register(config_class, pooled_root_classifier(config_class),
                                                     exist_ok=True)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def build_model(patched: PatchedConfig, task: str):
    """The ``task`` model of a patched config; a config the architecture cannot build (a size of 0 or below, an
    unknown activation, a field of the wrong type, a missing optional package) is :class:`ArchitectureError`, one
    line naming the error."""
    config = patched.config
    if task == "root" and type(config) not in AutoModelForSequenceClassification._model_mapping:
        register_pooled_root_classifiers()
    try:
        return TASK_HEADS[task].from_config(config)
    except Exception as error:  # any failure inside a foreign constructor: say which, in one line
        raise ArchitectureError(f"{patched.model_type} cannot be built with this config "
                                f"({_overrides_text(patched)}): {type(error).__name__}: {_first_line(error)}") from None


def _overrides_text(patched: PatchedConfig) -> str:
    given = ", ".join(f"{name}={value}" for name, value in patched.overrides.items())
    return f"--config_overrides {given}" if given else "its defaults"


def parameter_count_on_meta(patched: PatchedConfig, task: str) -> int:
    """The parameters of the ``task`` model of a patched config, counted on the meta device (no memory is taken:
    the count of a config whose weights would not fit is known before they are allocated)."""
    with torch.device("meta"):
        model = build_model(patched, task)
    return int(sum(parameter.numel() for parameter in model.parameters()))


def check_runs(model, num_symbols: int, depth: int) -> None:
    """A first step on two sequences of 2**ℓ leaves, on a copy of the model: one evaluation forward pass and one
    training forward and backward pass, whose logits and gradients must be finite; an architecture that cannot run
    them (a sequence length its positions do not allow in training, a precision that overflows) is refused in one
    line naming the error, before any data or folder is made."""
    import copy

    inputs = torch.zeros((2, 2**depth), dtype=torch.int64)  # (2, L)
    inputs[:, 0] = Vocabulary(num_symbols).bos_token_id
    inputs[1, 1:] = torch.arange(2**depth - 1) % num_symbols  # two different sequences
    name = model.config.model_type
    trial = copy.deepcopy(model)
    try:
        trial.eval()
        with torch.no_grad():
            logits = trial(input_ids=inputs).logits
        trial.train()
        trained = trial(input_ids=inputs).logits
        trained.float().logsumexp(-1).mean().backward()
    except Exception as error:  # any failure inside a foreign forward or backward: say which, in one line
        raise ArchitectureError(f"{name} cannot run sequences of {2**depth} leaves with this config: "
                                f"{type(error).__name__}: {_first_line(error)}") from None
    if logits.shape[0] != 2:
        raise ArchitectureError(f"{name} returned logits of shape {tuple(logits.shape)} for a batch of 2 sequences")
    if not (torch.isfinite(logits).all() and torch.isfinite(trained).all()):
        raise ArchitectureError(f"{name} returns non-finite logits with this config (a precision that overflows?): "
                                "leave dtype unset and train in float32 or with --bf16")
    broken = [n for n, p in trial.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()]
    if broken:
        raise ArchitectureError(f"{name} gives non-finite gradients with this config (first: {broken[0]})")


def slow_path(model_type: str | None, device) -> str | None:
    """Why a ``model_type`` model on ``device`` runs transformers' slow reference path (:data:`CUDA_KERNEL_PACKAGES`:
    not on a CUDA GPU, or the kernels' packages not installed), in words; None where it runs its fast kernels or has
    none to miss."""
    packages = CUDA_KERNEL_PACKAGES.get(model_type)
    if packages is None:
        return None
    missing = [name for name in packages if importlib.util.find_spec(name.replace("-", "_")) is None]
    device_type = torch.device(device).type
    if device_type == "cuda" and not missing:
        return None
    where = (f"on {device_type!r}, and the fast kernels of {', '.join(packages)} run on CUDA GPUs only"
             if device_type != "cuda" else f"{', '.join(missing)} not installed (pip install {' '.join(missing)})")
    return f"{model_type} runs transformers' torch reference path instead of its fused kernels: {where}"


__all__ = ["ArchitectureError", "CUDA_KERNEL_PACKAGES", "OWNED_FIELDS", "PatchedConfig", "PooledRootClassifier",
           "TREELANG", "build_model",
           "check_head", "check_runs", "has_head", "parameter_count_on_meta", "parse_overrides", "patch_config",
           "pooled_root_classifier", "register_pooled_root_classifiers", "slow_path", "typed_overrides"]
