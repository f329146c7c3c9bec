"""The root readout of fine-tuning (paper Fig. 1f): linear, or the authors' two-layer head; frozen modules in eval mode.

The paper's text (Sec. 3.2) reads the root out of the concatenated final tokens with one linear layer, which is what
:class:`~hf_treelang.models.TreeLangForSequenceClassification` builds. The authors' fine-tuning code
(``replace_decoder_with_classification_head`` in ``modules/models.py``, used by
``scripts/root_inference_fine_tuning.py`` with ``head_hidden_dim=[64]``) puts a two-layer head there instead::

    logits = W2 relu(W1 x + b1) + b2        x: (b, d * 2**ℓ) -> hidden (b, H) -> logits (b, q),  H = 64

:func:`set_readout` swaps that head onto ``model.classifier`` and records it in the config (``readout``,
``readout_hidden_size``: extra keys of ``config.json``); :func:`load_root_classifier` rebuilds it when loading.
``TreeLangForSequenceClassification.from_pretrained`` alone would not: it builds the linear readout, reports the
head's weights as unexpected and initialises a new one, so load an ``"mlp"`` checkpoint with
:func:`load_root_classifier`.

The authors' ``freeze_encoder_weights`` also puts every frozen module in eval mode (no dropout), so that the frozen
encoder is a fixed feature map; ``Trainer`` calls ``model.train()`` at every step, so
:func:`keep_frozen_in_eval_mode` re-applies eval mode to the encoder right before each forward pass.
"""

from __future__ import annotations

import json
from pathlib import Path

from torch import nn

READOUTS = ("linear", "mlp")


def check_readout(readout: str, hidden_size: int) -> None:
    """Raise a ValueError naming the argument unless ``readout`` is one of :data:`READOUTS` and the size is >= 1."""
    if readout not in READOUTS:
        raise ValueError(f"`readout` must be one of {READOUTS}, got {readout!r}")
    if isinstance(hidden_size, bool) or not isinstance(hidden_size, int) or hidden_size < 1:
        raise ValueError(f"`readout_hidden_size` must be an integer >= 1, got {hidden_size!r}")


class MLPReadout(nn.Sequential):
    """The authors' fine-tuning head: ``Linear(d_in, H) -> ReLU -> Linear(H, q)`` (PyTorch's default init)."""

    def __init__(self, in_features: int, hidden_size: int, num_symbols: int):
        super().__init__(nn.Linear(in_features, hidden_size), nn.ReLU(), nn.Linear(hidden_size, num_symbols))


def set_readout(model, readout: str = "linear", hidden_size: int = 64):
    """Put a new ``readout`` head on a root classifier (``"linear"``: keep the model's own); returns the model.

    Args:
        model: a :class:`~hf_treelang.models.TreeLangForSequenceClassification`.
        readout: ``"linear"`` (Sec. 3.2) or ``"mlp"`` (the authors' fine-tuning head, :class:`MLPReadout`).
        hidden_size: H, hidden units of the ``"mlp"`` head (64 in the authors' code).
    """
    check_readout(readout, hidden_size)
    if readout == "mlp":
        linear = model.classifier
        device = linear.weight.device
        model.classifier = MLPReadout(linear.in_features, hidden_size, linear.out_features).to(device)
        model.config.readout_hidden_size = int(hidden_size)
    model.config.readout = readout
    return model


def keep_frozen_in_eval_mode(model) -> None:
    """Run the (frozen) encoder ``model.base_model`` in eval mode at every forward pass, whatever ``model.train()`` set.

    Dropout stays on in the trainable head only. The hook is not saved with the model.
    """

    def eval_mode(module, args) -> None:  # a pre-hook that returned the module would replace the forward's inputs
        module.train(False)

    model.base_model.register_forward_pre_hook(eval_mode)


def load_root_classifier(path, device="cpu"):
    """Load a root-classification checkpoint with the readout its config records (linear or ``"mlp"``), eval mode."""
    from hf_treelang.models import TreeLangConfig, TreeLangForSequenceClassification

    folder = Path(path)
    config = json.loads((folder / "config.json").read_text()) if (folder / "config.json").is_file() else {}
    if config.get("readout", "linear") != "mlp":
        return TreeLangForSequenceClassification.from_pretrained(folder).to(device).eval()
    from safetensors.torch import load_file

    model = TreeLangForSequenceClassification(TreeLangConfig.from_pretrained(folder))
    set_readout(model, "mlp", int(config["readout_hidden_size"]))
    model.load_state_dict(load_file(str(folder / "model.safetensors")), strict=True)
    return model.to(device).eval()


__all__ = ["READOUTS", "MLPReadout", "check_readout", "keep_frozen_in_eval_mode", "load_root_classifier",
           "set_readout"]
