"""What a short laptop run pays besides its steps: the wall time of a 1-step ``run_root.py`` (laptop preset, data
through the dataset builder, cached); the package's import with :func:`hf_treelang.lazy.heavy_imports` against the
same import with the cyclic collector left running, and ``transformers.trainer`` alone (the floor of any Trainer run);
the read of its 2**17 training sequences, column-wise from Arrow against datasets' lazy column (one row at a time).

    python benchmarks/bench_startup.py [--repeats 3]

Prints one table; each figure is the best of ``--repeats`` fresh processes (or reads), side by side in one run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def one_step_run_seconds(output_dir: str) -> float:
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    start = time.perf_counter()
    subprocess.run([sys.executable, str(ROOT / "training" / "run_root.py"), "--max_steps", "1", "--output_dir",
                    output_dir, "--overwrite_output_dir", "true", "--report_to", "none"], check=True, env=environment,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


# the import as it would be without heavy_imports: the collector is never paused nor frozen
COLLECTOR_ON = "import gc; gc.disable = gc.freeze = lambda: None; import hf_treelang"


def python_seconds(code: str) -> float:
    """Wall time of a fresh ``python -c code`` process, exit included."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return time.perf_counter() - start


def split_read_seconds(repeats: int) -> tuple:
    import datasets

    import hf_treelang  # noqa: F401  (registers the builder)
    from hf_treelang.train.data import read_columns

    split = datasets.load_dataset("treelang", "k0", num_train=2**17, num_validation=1000, num_test=1000)["train"]
    arrow, lazy = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        leaves, _ = read_columns(split, 16)
        arrow.append(time.perf_counter() - start)
        start = time.perf_counter()
        rows = np.asarray(split.with_format("numpy", columns=["input_ids"])["input_ids"], dtype=np.int64)
        lazy.append(time.perf_counter() - start)
        assert np.array_equal(rows, leaves)
    return min(arrow), min(lazy)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        one_step_run_seconds(folder)  # builds and caches the laptop data once
        wall = min(one_step_run_seconds(folder) for _ in range(args.repeats))
    imports = {code: min(python_seconds(code) for _ in range(args.repeats))
               for code in ("import hf_treelang", COLLECTOR_ON, "import transformers.trainer")}
    arrow, lazy = split_read_seconds(args.repeats)
    print("| what | seconds |\n|---|---|")
    print(f"| `run_root.py --max_steps 1` (laptop preset, cached data), wall | {wall:.2f} |")
    print(f"| `python -c 'import hf_treelang'` (heavy_imports: collector paused, then frozen), wall | "
          f"{imports['import hf_treelang']:.2f} |")
    print(f"| the same with the collector left running, wall | {imports[COLLECTOR_ON]:.2f} |")
    print(f"| `python -c 'import transformers.trainer'` alone, wall | {imports['import transformers.trainer']:.2f} |")
    print(f"| read 2**17 training sequences column-wise from Arrow (the run's path) | {arrow:.3f} |")
    print(f"| the same through datasets' lazy column (row by row) | {lazy:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
