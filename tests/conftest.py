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
