"""Model card templates, shipped with the package as ``hf_treelang.model_cards`` (read with importlib.resources)."""
