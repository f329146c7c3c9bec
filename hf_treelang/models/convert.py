"""Convert a state dict saved by the paper's code into a TreeLang checkpoint folder.

The paper's module (a `torch.nn.TransformerEncoder` with batch_first, post-LN blocks) saves these keys:

    input_embedding.weight                                   (q + 1, d)   token embedding
    positional_embedding.pe                                  (1, 5000, d) fixed sinusoidal table (a buffer)
    transformer_encoder.layers.{i}.self_attn.in_proj_weight  (3d, d)      [W_Q; W_K; W_V]
    transformer_encoder.layers.{i}.self_attn.in_proj_bias    (3d,)
    transformer_encoder.layers.{i}.self_attn.out_proj.{weight,bias}
    transformer_encoder.layers.{i}.linear1.{weight,bias}     (d', d), (d',)
    transformer_encoder.layers.{i}.linear2.{weight,bias}     (d, d'), (d,)
    transformer_encoder.layers.{i}.norm1.{weight,bias}, norm2.{weight,bias}
    decoder.linear_layers.0.{weight,bias}                    root: (q, d * 2**l); mlm: (q, d)
    encoder_layer.*                                          unused template layer, ignored

Sizes (q, d, d', layers) are read from the weights; only the depth ℓ and the task are given. The number of heads
cannot be read from the weights and defaults to 1, as in the paper.

Usage: `hf-treelang convert STATE_DICT OUT --task root|mlm --depth L`
"""

import re
import sys
from pathlib import Path

import torch

from .configuration_treelang import TreeLangConfig
from .modeling_treelang import TreeLangForMaskedLM, TreeLangForSequenceClassification, sinusoidal_positional_encoding

TASKS = ("root", "mlm")

# paper key suffix within a layer -> our key suffix within `treelang.layers.{i}`
_LAYER_KEYS = {
    "self_attn.in_proj_weight": "attention.in_proj.weight",
    "self_attn.in_proj_bias": "attention.in_proj.bias",
    "self_attn.out_proj.weight": "attention.out_proj.weight",
    "self_attn.out_proj.bias": "attention.out_proj.bias",
    "linear1.weight": "linear1.weight",
    "linear1.bias": "linear1.bias",
    "linear2.weight": "linear2.weight",
    "linear2.bias": "linear2.bias",
    "norm1.weight": "attention_norm.weight",
    "norm1.bias": "attention_norm.bias",
    "norm2.weight": "feed_forward_norm.weight",
    "norm2.bias": "feed_forward_norm.bias",
}
_LAYER_PATTERN = re.compile(r"^transformer_encoder\.layers\.(\d+)\.(.+)$")


def convert_state_dict(
    state_dict: dict[str, torch.Tensor], task: str, depth: int, num_attention_heads: int = 1
) -> tuple[TreeLangConfig, dict[str, torch.Tensor]]:
    """Map a paper state dict to (config, state dict of TreeLangForSequenceClassification / TreeLangForMaskedLM)."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    for required in ("input_embedding.weight", "decoder.linear_layers.0.weight", "decoder.linear_layers.0.bias"):
        if required not in state_dict:
            raise ValueError(f"state dict lacks the key {required!r}; is it a state dict of the paper's model?")

    embedding = state_dict["input_embedding.weight"]  # (q + 1, d)
    vocab_size, hidden_size = embedding.shape
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
    intermediate_size = state_dict["transformer_encoder.layers.0.linear1.weight"].shape[0]

    readout_weight = state_dict["decoder.linear_layers.0.weight"]  # (q, d * 2**l) or (q, d)
    num_symbols = readout_weight.shape[0]
    head = "classifier" if task == "root" else "lm_head"
    expected_in = hidden_size * 2**depth if task == "root" else hidden_size
    if readout_weight.shape[1] != expected_in:
        raise ValueError(
            f"readout decoder.linear_layers.0.weight has input size {readout_weight.shape[1]}, expected {expected_in} "
            f"for task={task!r}, depth={depth}, hidden size {hidden_size}"
        )
    converted[f"{head}.weight"] = readout_weight
    converted[f"{head}.bias"] = state_dict["decoder.linear_layers.0.bias"]
    if num_symbols + 1 != vocab_size:
        raise ValueError(
            f"readout has {num_symbols} outputs (q) but the embedding has {vocab_size} ids; expected q + 1 = "
            f"{num_symbols + 1}"
        )

    if "positional_embedding.pe" in state_dict:
        # The table is not a weight: we recompute it; refuse files whose table is another encoding.
        table = state_dict["positional_embedding.pe"].reshape(-1, hidden_size)[: 2**depth].float()  # (T, d)
        ours = sinusoidal_positional_encoding(2**depth, hidden_size)
        if table.shape != ours.shape or not torch.allclose(table, ours, atol=1e-5):
            raise ValueError("positional_embedding.pe is not the sinusoidal encoding of Vaswani et al.")

    config = TreeLangConfig(
        vocab_size=vocab_size,
        depth=depth,
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_attention_heads,
        intermediate_size=intermediate_size,
    )
    return config, {key: value.detach().clone().contiguous() for key, value in converted.items()}


def convert(state_dict_path, output_dir, task: str, depth: int, num_attention_heads: int = 1):
    """Turn a state dict file of the paper's code into a TreeLang checkpoint folder; return the loaded model.

    Args:
        state_dict_path: file written by `torch.save(model.state_dict(), path)` in the paper's code.
        output_dir: folder to write (safetensors weights, config, code).
        task: `"root"` (root classification) or `"mlm"` (masked language modelling).
        depth: tree depth ℓ the model was trained on (sequences of `2**depth` tokens).
        num_attention_heads: heads of the original model (not recoverable from the weights; the paper uses 1).
    """
    state_dict = torch.load(state_dict_path, map_location="cpu", weights_only=True)
    config, converted = convert_state_dict(state_dict, task, depth, num_attention_heads)
    model_class = TreeLangForSequenceClassification if task == "root" else TreeLangForMaskedLM
    model = model_class(config)
    missing, unexpected = model.load_state_dict(converted, strict=False)
    if missing or unexpected:
        raise ValueError(f"conversion left missing keys {missing} and unexpected keys {unexpected}")
    model.eval()
    model.save_pretrained(output_dir)
    return model


def run(args) -> int:
    """``hf-treelang convert`` with the arguments :mod:`hf_treelang.cli` parsed; returns the exit status."""
    convert(Path(args.state_dict), Path(args.output_dir), args.task, args.depth, args.heads)
    sys.stdout.write(f"wrote {args.output_dir}\n")
    return 0


def main(argv=None) -> int:
    """``hf-treelang convert`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    from hf_treelang import cli

    return cli.run_command("convert", argv)


if __name__ == "__main__":
    sys.exit(main())
