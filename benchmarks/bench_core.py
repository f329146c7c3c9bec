"""Speed and memory of the sampler and of BP_k (q=4, σ=1, grammar seed 0). Prints a table.

    python benchmarks/bench_core.py            # the table of the foundation issue
    python benchmarks/bench_core.py --quick    # smaller batches, for a smoke run

Targets (2-core machine): sampler >= 1e6 samples/s at ℓ=4; BP >= 3e5 sequences/s (root) and >= 1.5e5 sequences/s
(all leaf marginals, one mask per sequence) at ℓ=4. Peak memory is the growth of the process's resident set
during the call (Linux VmHWM, reset before each measurement); BP's should grow linearly in n * 2**ℓ * q.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from hf_treelang import BeliefPropagation, Grammar, sample_trees


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    return 0


def measure(fn, repeats: int):
    """(best seconds per call, peak resident growth in MiB) of fn()."""
    fn()  # warm-up: caches, allocator
    best = float("inf")
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak resident set size
    except OSError:
        pass
    base = _rss_kib("VmRSS:")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best, (_rss_kib("VmHWM:") - base) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller batches and fewer repeats")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    grammar = Grammar.random(vocab_size=4, sigma=1.0, seed=0)
    scale = 16 if args.quick else 1
    cases = [(4, 0, 1 << 20), (4, 2, 1 << 20), (8, 0, 1 << 16), (12, 0, 1 << 12)]
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, numpy {np.__version__}")
    header = f"{'what':<26}{'depth':>6}{'k':>4}{'batch':>10}{'per second':>14}{'peak MiB':>10}"
    print(header)
    print("-" * len(header))
    for depth, k, n in cases:
        n = max(256, n // scale)
        seconds, mib = measure(lambda: sample_trees(grammar, n, depth, k, seed=1), args.repeats)
        print(f"{'sampler (trees)':<26}{depth:>6}{k:>4}{n:>10}{n / seconds:>14,.0f}{mib:>10.1f}")
        leaves = sample_trees(grammar, n, depth, k, seed=2).leaves
        masked = leaves.copy()
        masked[np.arange(n), np.random.default_rng(0).integers(0, 2**depth, n)] = grammar.vocab_size
        bp = BeliefPropagation(grammar, depth, k)
        ids = torch.from_numpy(leaves)
        seconds, mib = measure(lambda: bp.infer(ids, downward=False), args.repeats)
        print(f"{'BP root marginals':<26}{depth:>6}{k:>4}{n:>10}{n / seconds:>14,.0f}{mib:>10.1f}")
        ids = torch.from_numpy(masked)
        seconds, mib = measure(lambda: bp.infer(ids), args.repeats)
        print(f"{'BP all marginals, 1 mask':<26}{depth:>6}{k:>4}{n:>10}{n / seconds:>14,.0f}{mib:>10.1f}")
    print()
    print("BP memory vs n (depth 8, k 0, all marginals): MiB per 1e6 leaf-symbols")
    for n in (1 << 12, 1 << 14, 1 << 16):
        n = max(256, n // scale)
        ids = torch.from_numpy(sample_trees(grammar, n, 8, 0, seed=3).leaves)
        bp = BeliefPropagation(grammar, 8, 0)
        _, mib = measure(lambda: bp.infer(ids, batch_size=n), 1)
        print(f"  n={n:>7}: peak {mib:8.1f} MiB = {mib / (n * 256 * 4 / 1e6):6.2f} MiB per 1e6 (n * 2**l * q)")


if __name__ == "__main__":
    main()
