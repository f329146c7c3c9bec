import atexit
import os
import shutil
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
if "HF_TREELANG_CACHE" not in os.environ:  # a cache of the suite's own, not the user's, removed when the suite ends
    os.environ["HF_TREELANG_CACHE"] = tempfile.mkdtemp(prefix="hf-treelang-test-cache-")
    atexit.register(shutil.rmtree, os.environ["HF_TREELANG_CACHE"], ignore_errors=True)
if "HF_DATASETS_CACHE" not in os.environ:  # datasets keys a local folder's cache by its files' names and mtimes: a
    # shared cache handed a later suite an earlier suite's table on CI
    os.environ["HF_DATASETS_CACHE"] = tempfile.mkdtemp(prefix="hf-treelang-test-datasets-")
    atexit.register(shutil.rmtree, os.environ["HF_DATASETS_CACHE"], ignore_errors=True)

# The suite's longest files, longest first: the two workers (`-n 2 --dist loadfile`) take files in collection order,
# so these start first and the short ones fill the gaps, rather than a long file starting last on one worker.
LONGEST_FILES = ("test_sweep.py", "test_faults.py", "test_reliability.py", "test_reproduce.py", "test_laptop_full.py",
                 "test_architectures.py", "test_readme.py", "test_training.py", "test_ecosystem_edges.py",
                 "test_learner_sample_complexity.py", "test_mlm_options.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: position for position, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST_FILES)))  # stable: each file keeps its order
