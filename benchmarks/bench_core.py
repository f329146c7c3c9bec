"""Speed and memory of the sampler and of BP_k (σ=1, grammar seed 0). Prints three tables.

    python benchmarks/bench_core.py            # the tables of the foundation issue and of issue 12
    python benchmarks/bench_core.py --quick    # smaller batches, for a smoke run

Targets (2-core machine): sampler >= 1e6 samples/s at ℓ=4; BP >= 3e5 sequences/s (root) and >= 1.5e5 sequences/s
(all leaf marginals, one mask per sequence) at ℓ=4 (q=4). Peak memory is the growth of the process's resident set
during the call (Linux VmHWM, reset before each measurement); BP's should grow linearly in n * 2**ℓ * q.

The last table runs BP with its default batch at q = 4, 16, 64, 128 (ℓ=6, all marginals): the working set of a pass
(q² numbers per node) stays under ``WORKING_SET_BYTES`` (256 MiB), so the peak is that plus the output, whatever q
(before issue 12, q=64 with n=2000 peaked at 3.9 GB for 125 MiB of output).
"""

from __future__ import annotations

import argparse
import multiprocessing
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


def _case(
    what: str, depth: int, k: int, n: int, repeats: int, batch_size: int | None, threads: int, num_symbols: int = 4,
    warm_up: bool = True,
):
    """(best seconds per call, peak resident growth in MiB) of one measurement; runs in a fresh process."""
    torch.set_num_threads(threads)
    grammar = Grammar.random(num_symbols=num_symbols, sigma=1.0, grammar_seed=0)
    if what == "sampler":
        fn = lambda: sample_trees(grammar, n, depth, k, sampling_seed=1)  # noqa: E731
    else:
        leaves = sample_trees(grammar, n, depth, k, sampling_seed=2).leaves
        if what == "bp_all":
            leaves[np.arange(n), np.random.default_rng(0).integers(0, 2**depth, n)] = grammar.num_symbols
        ids = torch.from_numpy(leaves)
        bp = BeliefPropagation(grammar, depth, k)
        fn = lambda: bp.infer(ids, downward=what == "bp_all", batch_size=batch_size)  # noqa: E731
    if warm_up:
        fn()  # caches, allocator
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak resident set size to the current one
    except OSError:
        pass
    base = _rss_kib("VmRSS:")
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
        del result
    return best, (_rss_kib("VmHWM:") - base) / 1024


def _child(conn, *args):
    conn.send(_case(*args))
    conn.close()


def measure(
    what: str, depth: int, k: int, n: int, repeats: int, threads: int, batch_size: int | None = None,
    num_symbols: int = 4, warm_up: bool = True,
):
    """Run one case in a fresh process, so that one case's freed memory does not hide the next one's peak."""
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    args = (child, what, depth, k, n, repeats, batch_size, threads, num_symbols, warm_up)
    process = context.Process(target=_child, args=args)
    process.start()
    result = parent.recv()
    process.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller batches and fewer repeats")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch threads")
    parser.add_argument("--memory-vs-q", action="store_true", help="only the table of BP's peak memory vs q")
    args = parser.parse_args()
    scale = 16 if args.quick else 1
    if not args.memory_vs_q:
        speed_and_memory_tables(args, scale)
    memory_vs_q_table(args, scale)


def speed_and_memory_tables(args, scale: int) -> None:
    cases = [(4, 0, 1 << 20), (4, 2, 1 << 20), (8, 0, 1 << 16), (12, 0, 1 << 12)]
    print(f"torch {torch.__version__}, threads {args.threads}, numpy {np.__version__}; q=4, sigma=1, grammar seed 0")
    header = f"{'what':<26}{'depth':>6}{'k':>4}{'batch':>10}{'per second':>14}{'peak MiB':>10}"
    print(header)
    print("-" * len(header))
    names = {"sampler": "sampler (trees)", "bp_root": "BP root marginals", "bp_all": "BP all marginals, 1 mask"}
    for depth, k, n in cases:
        n = max(256, n // scale)
        for what, name in names.items():
            seconds, mib = measure(what, depth, k, n, args.repeats, args.threads)
            print(f"{name:<26}{depth:>6}{k:>4}{n:>10}{n / seconds:>14,.0f}{mib:>10.1f}", flush=True)
    print()
    print("BP memory vs n (depth 8, k 0, all marginals, one pass: batch_size = n)")
    for n in (1 << 12, 1 << 14, 1 << 16):
        n = max(256, n // scale)
        _, mib = measure("bp_all", 8, 0, n, 1, args.threads, batch_size=n)
        print(f"  n={n:>7}: peak {mib:8.1f} MiB = {mib / (n * 256 * 4 / 1e6):6.2f} MiB per 1e6 leaf-symbols (n * 2**l * q)")


def memory_vs_q_table(args, scale: int) -> None:
    print()
    depth = 6
    print(f"BP peak memory vs q (depth {depth}, k 0, all marginals, one mask per sequence, default batch, no warm-up)")
    header = f"{'q':>5}{'n':>7}{'batch':>7}{'output MiB':>12}{'peak MiB':>10}{'seconds':>9}"
    print(header)
    print("-" * len(header))
    # n shrinks with q to keep the run short (a sequence costs ~2**l q³); every n spans several default passes.
    for q, n in ((4, 2000), (16, 2000), (64, 500), (128, 125)):
        n = max(16, n // scale)
        batch = BeliefPropagation(Grammar.random(q, 1.0, 0), depth, 0).default_batch_size()
        output = n * (2 ** (depth + 1) - 1) * q * 8 / 2**20  # every level's marginals, float64
        seconds, mib = measure("bp_all", depth, 0, n, 1, args.threads, num_symbols=q, warm_up=False)
        print(f"{q:>5}{n:>7}{batch:>7}{output:>12.1f}{mib:>10.1f}{seconds:>9.1f}", flush=True)


if __name__ == "__main__":
    main()
