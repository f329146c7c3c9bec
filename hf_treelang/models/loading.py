"""Loading the package's own checkpoints: ``from_pretrained`` with the keys checked here, in plain words, instead of
transformers' LOAD REPORT (a coloured table on every load, which fills logs that are not a terminal) and its
"Loading weights" progress bar.

A fine-tuning run starts a root classifier from an MLM checkpoint: its new readout is *expected* to be missing
(``expected_missing``). Any other missing, unexpected or mismatched key is an error naming the keys, so quieting the
report never hides a checkpoint that does not fit.
"""

from __future__ import annotations

import contextlib

from transformers.utils import logging as transformers_logging


@contextlib.contextmanager
def quiet_transformers():
    """transformers' warnings and progress bars off for the duration (errors still show); restored afterwards."""
    verbosity = transformers_logging.get_verbosity()
    bars = transformers_logging.is_progress_bar_enabled()
    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        transformers_logging.set_verbosity(verbosity)
        if bars:
            transformers_logging.enable_progress_bar()


def load_pretrained(model_class, path, *, expected_missing: tuple = (), **kwargs):
    """``model_class.from_pretrained(path, **kwargs)``, quietly; raises a ValueError naming the keys when a weight
    is missing (other than those starting with a prefix in ``expected_missing``), unexpected or of another shape."""
    with quiet_transformers():
        model, info = model_class.from_pretrained(path, output_loading_info=True, **kwargs)
    problems = {
        "missing": sorted(key for key in info.get("missing_keys", ()) if not key.startswith(tuple(expected_missing))),
        "unexpected": sorted(info.get("unexpected_keys", ())),
        "of another shape": sorted(str(key) for key in info.get("mismatched_keys", ())),
    }
    problems = {kind: keys for kind, keys in problems.items() if keys}
    if problems:
        listed = "; ".join(f"{kind}: {', '.join(keys[:4])}{' ...' if len(keys) > 4 else ''}"
                           for kind, keys in problems.items())
        raise ValueError(f"checkpoint {str(path)!r} does not fit {model_class.__name__} ({listed})")
    return model


__all__ = ["load_pretrained", "quiet_transformers"]
