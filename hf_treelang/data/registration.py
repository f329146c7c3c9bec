"""``datasets.load_dataset("treelang", "k2")``: the registration of the treelang builder.

:func:`register_dataset_builder` (run on ``import hf_treelang``) makes the name resolve to
:class:`hf_treelang.dataset_builder.TreeLang`, offline and from any working directory.

How the name is resolved: datasets 5 has no loading scripts; ``load_dataset`` / ``load_dataset_builder`` (and
``get_dataset_config_names``) call the module-level ``dataset_module_factory(path, ...)``, which maps a name to a
``DatasetModule(module_path, hash, builder_kwargs)`` and then imports the builder class from ``module_path``. We wrap
that function so that the exact name ``"treelang"`` is answered first, before the packaged builders, the local
directories and the Hub are looked at: a folder named ``treelang`` or stray data files in the working directory are
never read (use ``"./treelang"`` to load such a folder). The wrapper checks the internals it relies on when it is
installed, rather than silently falling through to the Hub. If a ``datasets`` release changed them, the hook is not
installed and ``import hf_treelang`` warns once, naming the datasets version and the route that needs no hook
(``hf-treelang publish-dataset OUT`` then ``load_dataset(OUT, "k2")``); the rest of the package keeps working.
"""

from __future__ import annotations

import functools
import inspect
import warnings

DATASET_NAME = "treelang"
BUILDER_MODULE = "hf_treelang.dataset_builder.treelang"
_HOOK_FLAG = "_hf_treelang_hook"
_warned_unavailable = False  # the warning of an unsupported datasets release is given once per process


def _check_internals(load_module) -> None:
    """Raise if the datasets internals that the hook patches are not the ones it was written for (datasets 5.2)."""
    problems = []
    factory = getattr(load_module, "dataset_module_factory", None)
    if not callable(factory):
        problems.append("datasets.load.dataset_module_factory is missing")
    else:
        params = list(inspect.signature(factory).parameters)
        if not params or params[0] != "path":
            problems.append(f"dataset_module_factory's first parameter is {params[:1]}, expected 'path'")
    builder_fn = getattr(load_module, "load_dataset_builder", None)
    if builder_fn is None or "dataset_module_factory" not in builder_fn.__code__.co_names:
        problems.append("datasets.load.load_dataset_builder no longer calls dataset_module_factory")
    module_cls = getattr(load_module, "DatasetModule", None)
    fields = set(getattr(module_cls, "__dataclass_fields__", {}))
    if not {"module_path", "hash", "builder_kwargs"} <= fields:
        problems.append(f"datasets.load.DatasetModule fields are {sorted(fields)}")
    if problems:
        import datasets

        raise RuntimeError(
            f"hf_treelang cannot register load_dataset('{DATASET_NAME}') with datasets {datasets.__version__}: "
            + "; ".join(problems)
            + ". hf-treelang supports datasets>=5.2,<6."
        )


def _treelang_module(load_module, data_dir=None, data_files=None):
    if data_dir is not None or data_files is not None:
        raise ValueError(f"'{DATASET_NAME}' generates its data: data_dir and data_files must not be given")
    from hf_treelang.dataset_builder.treelang import source_hash  # lazy: imports datasets, not needed till a load

    return load_module.DatasetModule(
        module_path=BUILDER_MODULE, hash=source_hash(), builder_kwargs={"dataset_name": DATASET_NAME}
    )


def register_dataset_builder() -> bool:
    """Make ``datasets.load_dataset("treelang", ...)`` build the treelang data (idempotent).

    Returns True once the hook is installed. With a ``datasets`` release whose internals changed, installs nothing,
    warns once (a UserWarning naming the version and the route that still works) and returns False.
    """
    try:
        import datasets.inspect
        import datasets.load

        load_module = datasets.load
        original = getattr(load_module, "dataset_module_factory", None)
        if getattr(original, _HOOK_FLAG, False):
            return True
        _check_internals(load_module)
    except Exception as error:  # noqa: BLE001 -- whatever changed, the grammar, BP and the model must still import
        _warn_unavailable(error)
        return False

    @functools.wraps(original)
    def dataset_module_factory(path, *args, **kwargs):
        if path == DATASET_NAME:
            return _treelang_module(load_module, kwargs.get("data_dir"), kwargs.get("data_files"))
        return original(path, *args, **kwargs)

    setattr(dataset_module_factory, _HOOK_FLAG, True)
    load_module.dataset_module_factory = dataset_module_factory
    if getattr(datasets.inspect, "dataset_module_factory", None) is original:
        datasets.inspect.dataset_module_factory = dataset_module_factory
    return True


def _warn_unavailable(error: Exception) -> None:
    """The one warning of a datasets release the hook does not support."""
    global _warned_unavailable
    if _warned_unavailable:
        return
    _warned_unavailable = True
    try:
        import datasets

        version = f"datasets {datasets.__version__}"
    except Exception:  # noqa: BLE001
        version = "this datasets installation"
    detail = str(error).split(": ", 1)[-1] if isinstance(error, RuntimeError) else f"{type(error).__name__}: {error}"
    warnings.warn(
        f"hf_treelang: load_dataset('{DATASET_NAME}', ...) is unavailable with {version} ({detail}). Everything "
        f"else works; to load the data, write it with `hf-treelang publish-dataset OUT --configs k2` and load the "
        f"folder: load_dataset(OUT, 'k2').",
        UserWarning,
        stacklevel=2,
    )
