"""The version of hf-treelang, in a module of its own.

``hf-treelang --version`` and the build (``pyproject.toml`` reads it statically) need the version without running
the package's registration, which imports torch and transformers.
"""

__version__ = "0.2.0"
