"""Time to generate and write a treelang training split through ``load_dataset("treelang", ...)``, and peak memory.

Targets (issue 4): 2**18 examples at ℓ = 4 in <= 15 s; 2**16 examples at ℓ = 10 in <= 60 s. Each case runs in a fresh
process (so that its peak RSS is its own) with a temporary cache; the time covers generation + Arrow writing of the
train split only (validation and test set to 0), not the import of the package.

    python benchmarks/bench_dataset.py            # both cases
    python benchmarks/bench_dataset.py --case 4 262144
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

CASES = [(4, 2**18, 15.0), (10, 2**16, 60.0)]  # (depth ℓ, num_train, target seconds)


def run_case(depth: int, num_train: int) -> dict:
    import datasets

    import hf_treelang  # noqa: F401  (registers "treelang")

    with tempfile.TemporaryDirectory() as cache:
        builder = datasets.load_dataset_builder(
            "treelang", "k0", cache_dir=cache, depth=depth, num_train=num_train, num_validation=0, num_test=0
        )
        datasets.disable_progress_bars()
        start = time.perf_counter()
        builder.download_and_prepare()
        seconds = time.perf_counter() - start
        size = builder.info.dataset_size
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"depth": depth, "num_train": num_train, "seconds": seconds, "peak_rss_mib": peak_mib, "bytes": size}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", nargs=2, type=int, metavar=("DEPTH", "NUM_TRAIN"), help="run one case in-process")
    args = parser.parse_args()
    if args.case:
        sys.stdout.write(json.dumps(run_case(*args.case)) + "\n")
        return 0
    rows = []
    for depth, num_train, target in CASES:
        out = subprocess.run(
            [sys.executable, __file__, "--case", str(depth), str(num_train)],
            check=True, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"},
        ).stdout
        rows.append({**json.loads(out.strip().splitlines()[-1]), "target": target})
    header = ("depth", "examples", "seconds", "target", "ok", "peak RSS MiB", "MiB written")
    widths = (5, 9, 8, 7, 3, 13, 12)
    sys.stdout.write(" ".join(f"{h:>{w}}" for h, w in zip(header, widths)) + "\n")
    for r in rows:
        ok = "yes" if r["seconds"] <= r["target"] else "NO"
        sys.stdout.write(
            f"{r['depth']:>5} {r['num_train']:>9} {r['seconds']:>8.2f} {r['target']:>7.0f} {ok:>3} "
            f"{r['peak_rss_mib']:>13.0f} {r['bytes'] / 2**20:>12.1f}\n"
        )
    return 0 if all(r["seconds"] <= r["target"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
