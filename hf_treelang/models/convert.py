"""Convert a state dict saved by the paper's code into a TreeLang checkpoint folder.

The paper's module (a `torch.nn.TransformerEncoder` with batch_first, post-LN blocks) saves these keys:

    input_embedding.weight                                   (q + 1, d)   token embedding; (q, d) for the paper's
                                                                          root classifiers, which have no mask token
    positional_embedding.pe                                  (1, 5000, d) fixed sinusoidal table (a buffer)
    transformer_encoder.layers.{i}.self_attn.in_proj_weight  (3d, d)      [W_Q; W_K; W_V]
    transformer_encoder.layers.{i}.self_attn.in_proj_bias    (3d,)
    transformer_encoder.layers.{i}.self_attn.out_proj.{weight,bias}
    transformer_encoder.layers.{i}.linear1.{weight,bias}     (d', d), (d',)
    transformer_encoder.layers.{i}.linear2.{weight,bias}     (d, d'), (d,)
    transformer_encoder.layers.{i}.norm1.{weight,bias}, norm2.{weight,bias}
    decoder.linear_layers.0.{weight,bias}                    root: (q, d * 2**l) flattened tokens, or (q, d)
                                                             averaged tokens (embedding_agg="mean"); mlm: (q, d)
    encoder_layer.*                                          unused template layer, ignored

A checkpoint of the paper's training loop, ``{"model_state_dict": ..., "training_history": ...}``, is read too. Any
other key (a fine-tuning head of several layers, another model) is refused, as is a masked-LM state dict given with
``--task root`` (q + 1 embedding rows and a one-token readout).

Sizes (q, d, d', layers, the root readout's pooling) are read from the weights; only the depth ℓ and the task are
given. The depth is checked against a root readout over the concatenated tokens (input size d * 2**ℓ); a masked-LM
model's weights work at any length, so the command says that its depth is as given, and the converted model refuses
sequences of another length. The number of heads cannot be read from the weights and defaults to 1, as in the paper.

A root classifier of the paper embeds the q symbols only. TreeLang models embed q + 1 ids (the symbols and the mask
token q; the padding id q + 1 is refused as an input, so it has no row), so the converter appends a zero row for the
mask token: the root classifier never sees it, and on every input of symbols the converted model gives the same
logits. A converted masked-LM model's logits cover the vocabulary's q + 2 ids, the paper's q scores first.

Usage: `hf-treelang convert STATE_DICT OUT --task root|mlm --depth L`
"""

import os
import pickle
import re
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

import torch

from hf_treelang.core.params import check_int, check_param

from .configuration_treelang import TreeLangConfig
from .modeling_treelang import (
    TORCH_LAYER_PARAMETERS,
    TreeLangForMaskedLM,
    TreeLangForSequenceClassification,
    sinusoidal_positional_encoding,
)

TASKS = ("root", "mlm")
CHECKPOINT_KEY = "model_state_dict"  # where the paper's training loop keeps the state dict in its checkpoints

# paper key suffix within a layer -> our key suffix within `treelang.layers.{i}`
_LAYER_KEYS = TORCH_LAYER_PARAMETERS
_LAYER_PATTERN = re.compile(r"^transformer_encoder\.layers\.(\d+)\.(.+)$")
_OTHER_KEYS = ("input_embedding.weight", "positional_embedding.pe", "decoder.linear_layers.0.weight",
               "decoder.linear_layers.0.bias")
_IGNORED_PREFIX = "encoder_layer."  # the template layer nn.TransformerEncoder deep-copies


def _known_key(key: str) -> bool:
    return key in _OTHER_KEYS or key.startswith(_IGNORED_PREFIX) or _LAYER_PATTERN.match(key) is not None


def depth_is_read_from_weights(config: TreeLangConfig, task: str) -> bool:
    """Whether the weights fix the depth ℓ (a root readout over the concatenated tokens, of input size d * 2**ℓ); a
    masked-LM model or a mean-pooled readout works on any length, so ``--depth`` is taken as given."""
    return task == "root" and config.classifier_pooling == "concat"


def check_arguments(task: str, depth: int, num_attention_heads: int = 1) -> tuple[str, int, int]:
    """The conversion's own arguments, checked before any file is read."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    return task, check_param("depth", depth), check_int("num_attention_heads", num_attention_heads, 1)


def convert_state_dict(
    state_dict: dict[str, torch.Tensor], task: str, depth: int, num_attention_heads: int = 1
) -> tuple[TreeLangConfig, dict[str, torch.Tensor]]:
    """Map a paper state dict to (config, state dict of TreeLangForSequenceClassification / TreeLangForMaskedLM)."""
    task, depth, num_attention_heads = check_arguments(task, depth, num_attention_heads)
    if not isinstance(state_dict, Mapping):
        raise ValueError(f"a state dict must be a dict of tensors, got {type(state_dict).__name__}")
    for required in ("input_embedding.weight", "decoder.linear_layers.0.weight", "decoder.linear_layers.0.bias"):
        if required not in state_dict:
            raise ValueError(f"state dict lacks the key {required!r}; is it a state dict of the paper's model?")
    for key, value in state_dict.items():
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"state dict entry {key!r} is a {type(value).__name__}, not a tensor")

    embedding = state_dict["input_embedding.weight"]  # (q + 1, d), or (q, d) for a root classifier
    readout_weight = state_dict["decoder.linear_layers.0.weight"]  # (q, d * 2**l) or (q, d)
    if embedding.ndim != 2 or readout_weight.ndim != 2:
        raise ValueError(
            f"input_embedding.weight and decoder.linear_layers.0.weight must be matrices, got shapes "
            f"{tuple(embedding.shape)} and {tuple(readout_weight.shape)}"
        )
    num_rows, hidden_size = embedding.shape
    num_symbols = check_param("num_symbols", readout_weight.shape[0], as_name="num_symbols (q, the readout's outputs)")
    unknown = sorted(key for key in state_dict if not _known_key(key))
    if unknown:
        raise ValueError(f"state dict holds keys the paper's model does not have: {', '.join(unknown[:5])}"
                         f"{' ...' if len(unknown) > 5 else ''} (a fine-tuning head of several layers, or another "
                         "model); only the single linear readout `decoder.linear_layers.0` converts")
    if task == "root" and num_rows == num_symbols + 1 and readout_weight.shape[1] == hidden_size:
        raise ValueError(
            f"task='root', but the state dict has the shapes of a masked-LM model: {num_rows} = q + 1 embedding rows "
            f"(the mask token) and a readout of one token (input size d = {hidden_size}); the paper's root "
            "classifiers embed the q symbols only. Convert it with --task mlm"
        )
    if num_rows == num_symbols and task == "root":
        # No mask token in the paper's root classifiers: append one, never seen by a root classifier.
        embedding = torch.cat([embedding, embedding.new_zeros(1, hidden_size)])  # (q + 1, d)
    elif num_rows != num_symbols + 1:
        expected = "q + 1 (symbols and the mask token)" if task == "mlm" else "q or q + 1"
        raise ValueError(
            f"input_embedding.weight has {num_rows} rows but the readout has q = {num_symbols} outputs; expected "
            f"{expected} rows for task={task!r}"
        )
    converted = {"treelang.embeddings.token_embeddings.weight": embedding}
    layer_ids = set()
    for key, value in state_dict.items():
        match = _LAYER_PATTERN.match(key)
        if match is None:
            continue
        index, suffix = match.groups()
        if suffix not in _LAYER_KEYS:
            raise ValueError(f"unexpected key {key!r} in the paper's encoder layers")
        layer_ids.add(int(index))
        converted[f"treelang.layers.{index}.{_LAYER_KEYS[suffix]}"] = value
    num_layers = len(layer_ids)
    if num_layers == 0 or layer_ids != set(range(num_layers)):
        raise ValueError(f"encoder layers must be numbered 0..n-1, got {sorted(layer_ids)}")
    if "transformer_encoder.layers.0.linear1.weight" not in state_dict:
        raise ValueError("state dict lacks the key 'transformer_encoder.layers.0.linear1.weight'")
    intermediate_size = state_dict["transformer_encoder.layers.0.linear1.weight"].shape[0]

    head = "classifier" if task == "root" else "lm_head"
    pooling = "concat"
    if task == "root" and readout_weight.shape[1] == hidden_size:
        pooling = "mean"  # the paper's embedding_agg="mean": the readout sees the average token
    expected_in = hidden_size * 2**depth if pooling == "concat" and task == "root" else hidden_size
    if readout_weight.shape[1] != expected_in:
        allowed = f"{expected_in} (d * 2**depth) or {hidden_size} (d, averaged tokens)" if task == "root" else expected_in
        raise ValueError(
            f"readout decoder.linear_layers.0.weight has input size {readout_weight.shape[1]}, expected {allowed} "
            f"for task={task!r}, depth={depth}, hidden size d = {hidden_size}"
        )
    converted[f"{head}.weight"] = readout_weight
    converted[f"{head}.bias"] = state_dict["decoder.linear_layers.0.bias"]

    if "positional_embedding.pe" not in state_dict:
        raise ValueError(
            "state dict lacks positional_embedding.pe: the model was trained without positional encoding "
            "(positional_encoding=False), which a TreeLang model cannot reproduce"
        )
    # The table is not a weight: we recompute it; refuse files whose table is another encoding.
    table = state_dict["positional_embedding.pe"]
    if table.numel() < 2**depth * hidden_size:
        raise ValueError(f"positional_embedding.pe has {table.numel()} entries, fewer than 2**depth * d")
    table = table.reshape(-1, hidden_size)[: 2**depth].float()  # (T, d)
    if not torch.allclose(table, sinusoidal_positional_encoding(2**depth, hidden_size), atol=1e-5):
        raise ValueError("positional_embedding.pe is not the sinusoidal encoding of Vaswani et al.")

    config = TreeLangConfig(
        vocab_size=num_symbols + 2,  # the symbols, [MASK] and [PAD]
        depth=depth,
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_attention_heads,
        intermediate_size=intermediate_size,
        classifier_pooling=pooling,
    )
    return config, {key: value.detach().clone().contiguous() for key, value in converted.items()}


def load_state_dict(path) -> dict:
    """The state dict in a file of the paper's code (``torch.save`` of a state dict or of a training checkpoint).

    Only tensors and plain containers are unpickled (``weights_only=True``): a file holding other objects is refused
    with one line saying so, as is a file that ``torch.save`` did not write.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"state_dict: no such file: {path}")
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        reasons = [line.strip() for line in str(error).splitlines() if "WeightsUnpickler error" in line]
        reason = reasons[0].split(" Please use")[0] if reasons else str(error).splitlines()[0]
        raise ValueError(
            f"state_dict: {path} holds objects other than tensors, which are not loaded ({reason}); if you trust "
            f"the file, save its tensors alone: torch.save(torch.load(path, weights_only=False), path)"
        ) from None
    except Exception as error:  # a text file gives KeyError: 101, an empty one EOFError, a truncated one RuntimeError
        detail = (str(error).splitlines() or [""])[0][:200]
        raise ValueError(
            f"state_dict: {path} is not a file written by torch.save ({type(error).__name__}: {detail})"
        ) from None
    if isinstance(loaded, Mapping) and "input_embedding.weight" not in loaded and CHECKPOINT_KEY in loaded:
        loaded = loaded[CHECKPOINT_KEY]
    if not isinstance(loaded, Mapping):
        raise ValueError(f"state_dict: {path} holds a {type(loaded).__name__}, not a state dict")
    return dict(loaded)


def convert(state_dict_path, output_dir, task: str, depth: int, num_attention_heads: int = 1):
    """Turn a state dict file of the paper's code into a TreeLang checkpoint folder; return the loaded model.

    Args:
        state_dict_path: file written by `torch.save(model.state_dict(), path)` in the paper's code (or one of its
            training checkpoints, with the state dict under ``"model_state_dict"``).
        output_dir: folder to write (safetensors weights, config, code); an existing file there is refused. The
            files are written to a temporary folder beside it and moved in last: no partial folder on failure.
        task: `"root"` (root classification) or `"mlm"` (masked language modelling).
        depth: tree depth ℓ the model was trained on (sequences of `2**depth` tokens).
        num_attention_heads: heads of the original model (not recoverable from the weights; the paper uses 1).
    """
    task, depth, num_attention_heads = check_arguments(task, depth, num_attention_heads)
    output_dir = Path(output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise FileExistsError(f"output_dir: {output_dir} exists and is not a folder; choose a folder path")
    config, converted = convert_state_dict(load_state_dict(state_dict_path), task, depth, num_attention_heads)
    model_class = TreeLangForSequenceClassification if task == "root" else TreeLangForMaskedLM
    model = model_class(config)
    try:
        missing, unexpected = model.load_state_dict(converted, strict=False)
    except RuntimeError as error:  # shapes that do not fit the sizes read from the embedding and readout
        lines = [line.strip() for line in str(error).splitlines() if "size mismatch" in line]
        raise ValueError(f"the state dict does not fit one model: {lines[0] if lines else error}") from None
    if missing or unexpected:
        raise ValueError(f"conversion left missing keys {missing} and unexpected keys {unexpected}")
    model.eval()
    _save_atomically(model, output_dir)
    return model


def _save_atomically(model, output_dir: Path) -> None:
    """``model.save_pretrained(output_dir)`` through a temporary folder beside it, moved in once complete."""
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.", dir=output_dir.parent))
    try:
        model.save_pretrained(staging)
        if not output_dir.exists():
            os.replace(staging, output_dir)
            return
        for item in staging.iterdir():
            os.replace(item, output_dir / item.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def run(args) -> int:
    """``hf-treelang convert`` with the arguments :mod:`hf_treelang.cli` parsed; returns the exit status.

    Bad input (a missing or unreadable file, an output path that is a file, weights that are not the paper's model)
    is one line ``hf-treelang convert: error: ...`` on stderr and exit status 2.
    """
    try:
        model = convert(Path(args.state_dict), Path(args.output_dir), args.task, args.depth, args.heads)
    except (ValueError, TypeError, OSError) as error:
        sys.stderr.write(f"hf-treelang convert: error: {error}\n")
        return 2
    sys.stdout.write(f"wrote {args.output_dir}\n")
    if not depth_is_read_from_weights(model.config, args.task):
        sys.stdout.write(f"depth {args.depth} is as given: the weights of this model do not fix it (it refuses "
                         f"sequences of any length but {2 ** args.depth}); make sure it is the training data's\n")
    return 0
