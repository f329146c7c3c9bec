"""The architecture comparison (hf_treelang.sweep.comparison): each architecture's learning rate chosen by the
validation KL to BP_{k_train} at a quarter of the budget, then three seeds at the full laptop budgets, two one-thread
runs at a time, resumable (rerun the same command after a stop).

    python training/compare_architectures.py OUT                   # the rate searches, then the main runs
    python training/compare_architectures.py OUT --stage tune      # only the rate searches
    python training/compare_architectures.py OUT --stage main      # the main runs of the cells already searched
    python training/compare_architectures.py OUT --only paper-root # the cells whose name starts so
    hf-treelang compare OUT/runs/main/* --out OUT/compare           # the table and figures
    hf-treelang prune OUT/runs/main/<finished run>                  # before committing or sharing a finished run

A rerun needs only OUT/rates.json and the finished main runs: a cell whose rate search is recorded there for the same
runs is not searched again. A damaged rates.json, a record whose chosen rate is not its search's best, --stage main
before any search, and an empty --only are refused in one line before any work.
"""

import argparse
import sys

from hf_treelang.sweep.comparison import run_protocol


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="the comparison's folder (OUT/runs/tune, OUT/runs/main, OUT/rates.json)")
    parser.add_argument("--stage", choices=("tune", "main", "all"), default="all")
    parser.add_argument("--workers", type=int, default=2, help="runs at a time, one CPU thread each (default 2)")
    parser.add_argument("--only", nargs="+", default=None, help="cell names or their prefixes (default: every cell)")
    args = parser.parse_args(argv)
    try:
        run_protocol(args.out, stage=args.stage, workers=args.workers, only=args.only)
    except ValueError as error:
        print(f"compare_architectures.py: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
