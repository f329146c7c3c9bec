"""Fine-tuning's root readout (paper Fig. 1f): the head is the model's, the frozen encoder runs in eval mode.

The paper's text (Sec. 3.2) reads the root out of the concatenated final tokens with one linear layer. The authors'
fine-tuning code (``replace_decoder_with_classification_head`` in ``modules/models.py``, used by
``scripts/root_inference_fine_tuning.py`` with ``head_hidden_dim=[64]``) puts a two-layer head there instead::

    logits = W2 relu(W1 x + b1) + b2        x: (b, d * 2**ℓ) -> hidden (b, H) -> logits (b, q),  H = 64

Both are :class:`~hf_treelang.models.TreeLangForSequenceClassification`'s, chosen by
``TreeLangConfig.classifier_hidden_size`` (0: linear, H >= 1: the two-layer head), so a fine-tuned checkpoint loads
with ``from_pretrained`` / ``AutoModelForSequenceClassification.from_pretrained`` with the head it was trained with.
``run_finetune.py --classifier_hidden_size 64`` loads the MLM checkpoint with that value in its config
(:func:`hf_treelang.train.loop.build_model`).

The authors' ``freeze_encoder_weights`` also puts every frozen module in eval mode (no dropout), so that the frozen
encoder is a fixed feature map; ``Trainer`` calls ``model.train()`` at every step, so
:func:`keep_frozen_in_eval_mode` re-applies eval mode to the encoder right before each forward pass.
"""

from __future__ import annotations


def keep_frozen_in_eval_mode(model) -> None:
    """Run the (frozen) encoder ``model.base_model`` in eval mode at every forward pass, whatever ``model.train()`` set.

    Dropout stays on in the trainable head only. The hook is not saved with the model.
    """

    def eval_mode(module, args) -> None:  # a pre-hook that returned the module would replace the forward's inputs
        module.train(False)

    model.base_model.register_forward_pre_hook(eval_mode)


__all__ = ["keep_frozen_in_eval_mode"]
