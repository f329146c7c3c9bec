"""Speed and memory of the sampler, of BP_k and of the next-leaf oracle (σ=1, grammar seed 0). Prints four tables.

    python benchmarks/bench_core.py               # the tables of the foundation issue, of issue 12 and of next_leaf
    python benchmarks/bench_core.py --quick       # smaller batches, for a smoke run
    python benchmarks/bench_core.py --next-leaf   # only the next-leaf table
    python benchmarks/bench_core.py --tree-grammars   # only the table of s-ary and RHM grammars beside the binary one

Targets (2-core machine): sampler >= 1e6 samples/s at ℓ=4; BP >= 3e5 sequences/s (root) and >= 1.5e5 sequences/s
(all leaf marginals, one mask per sequence) at ℓ=4 (q=4). Peak memory is the growth of the process's resident set
during the call (Linux VmHWM, reset before each measurement); BP's should grow linearly in n * 2**ℓ * q.

The last table runs BP with its default batch at q = 4, 16, 64, 128 (ℓ=6, all marginals): the working set of a pass
(q² numbers per node) stays under ``WORKING_SET_BYTES`` (256 MiB), so the peak is that plus the output, whatever q
(before issue 12, q=64 with n=2000 peaked at 3.9 GB for 125 MiB of output).

The next-leaf table times ``next_leaf_distributions`` (every prefix's P_k(x_i | x_<i) and the chain-rule likelihood)
with the matched BP_k on sequences drawn at level k, for every k: targets (2-core machine, q=4) all k at ℓ=4 for
1e4 sequences (16 prefixes each) in <= 2 s, all k at ℓ=8 for 1e3 sequences (256 prefixes each) in <= 30 s.

The tree-grammar table times the sampler, BP (root; all marginals with one mask) and the next-leaf oracle on the paper's
binary grammar (q=4, ℓ=4) beside Random Hierarchy Models (``Grammar.random_hierarchy``) of arity 2 and 3. Rows of a
family that the imported hf_treelang lacks are skipped, so the same command run on an older checkout
(``PYTHONPATH=<checkout>``) gives the binary rows of the kernels before s-ary trees, side by side.
"""

from __future__ import annotations

import argparse
import multiprocessing
import time

import numpy as np
import torch

from hf_treelang import BeliefPropagation, Grammar, sample_trees
from hf_treelang.core import next_leaf_distributions


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


def _next_leaf_case(depth: int, n: int, repeats: int, threads: int) -> list:
    """[(k, best seconds per call)] for k = 0 .. depth: the next-leaf distributions of n sequences drawn at level k,
    by the matched BP_k (every prefix of every sequence)."""
    torch.set_num_threads(threads)
    grammar = Grammar.random(num_symbols=4, sigma=1.0, grammar_seed=0)
    rows = []
    for k in range(depth + 1):
        ids = torch.from_numpy(sample_trees(grammar, n, depth, k, sampling_seed=2).leaves)
        bp = BeliefPropagation(grammar, depth, k)
        next_leaf_distributions(bp, ids[:64])  # warm-up: grammar tensors, allocator
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            result = next_leaf_distributions(bp, ids)
            best = min(best, time.perf_counter() - start)
            del result
        rows.append((k, best))
    return rows


TREE_GRAMMARS = [  # (name, constructor keyword arguments or None for the paper's q = 4, depth, sequences per call)
    ("paper q=4 s=2", None, 4, 1 << 17),
    ("rhm v=8 n=8 m=4 s=2", dict(num_symbols=8, num_classes=8, num_rules=4, arity=2, depth=3), 3, 1 << 17),
    ("rhm v=16 n=16 m=4 s=2", dict(num_symbols=16, num_classes=16, num_rules=4, arity=2, depth=4), 4, 1 << 15),
    ("rhm v=8 n=8 m=4 s=3", dict(num_symbols=8, num_classes=8, num_rules=4, arity=3, depth=3), 3, 1 << 14),
]


def _tree_case(spec, depth: int, k: int, n: int, repeats: int, threads: int, cpu_time: bool = False) -> dict | None:
    """{what: best seconds per call} of the sampler, BP root, BP all marginals (one mask) and the next-leaf oracle
    on one grammar; ``None`` where this hf_treelang cannot build it. Runs in a fresh process. ``cpu_time``: the
    process's CPU seconds (``time.process_time``) instead of wall-clock ones, which other processes on a shared
    machine do not inflate (with one thread)."""
    clock = time.process_time if cpu_time else time.perf_counter
    torch.set_num_threads(threads)
    if spec is None:
        grammar = Grammar.random(num_symbols=4, sigma=1.0, grammar_seed=0)
    elif not hasattr(Grammar, "random_hierarchy"):
        return None
    else:
        grammar = Grammar.random_hierarchy(**spec, grammar_seed=0)
    leaves = sample_trees(grammar, n, depth, k, sampling_seed=2).leaves
    masked = leaves.copy()
    masked[np.arange(n), np.random.default_rng(0).integers(0, masked.shape[1], n)] = grammar.num_symbols
    ids, masked_ids = torch.from_numpy(leaves), torch.from_numpy(masked)
    bp = BeliefPropagation(grammar, depth, k)
    calls = {
        "sampler": lambda: sample_trees(grammar, n, depth, k, sampling_seed=1),
        "bp_root": lambda: bp.infer(ids, downward=False),
        "bp_all": lambda: bp.infer(masked_ids),
        "next_leaf": lambda: next_leaf_distributions(bp, ids),
    }
    seconds = {}
    for what, fn in calls.items():
        fn()  # warm-up: caches, allocator
        best = float("inf")
        for _ in range(repeats):
            start = clock()
            result = fn()
            best = min(best, clock() - start)
            del result
        seconds[what] = best
    return seconds


def _child(conn, function, *args):
    conn.send(function(*args))
    conn.close()


def _in_fresh_process(function, *args):
    """``function(*args)`` in a fresh (spawned) process, so that one case's freed memory does not hide the next one's
    peak."""
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=_child, args=(child, function, *args))
    process.start()
    result = parent.recv()
    process.join()
    return result


def measure(
    what: str, depth: int, k: int, n: int, repeats: int, threads: int, batch_size: int | None = None,
    num_symbols: int = 4, warm_up: bool = True,
):
    """Run one case in a fresh process, so that one case's freed memory does not hide the next one's peak."""
    return _in_fresh_process(_case, what, depth, k, n, repeats, batch_size, threads, num_symbols, warm_up)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller batches and fewer repeats")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch threads")
    parser.add_argument("--memory-vs-q", action="store_true", help="only the table of BP's peak memory vs q")
    parser.add_argument("--next-leaf", action="store_true", help="only the table of the next-leaf oracle")
    parser.add_argument("--tree-grammars", action="store_true",
                        help="only the table of s-ary and Random Hierarchy grammars beside the paper's binary one")
    parser.add_argument("--cpu-time", action="store_true",
                        help="tree-grammar table: time by the process's CPU seconds, not wall-clock seconds (for a "
                             "shared machine; use with --threads 1)")
    args = parser.parse_args()
    scale = 16 if args.quick else 1
    if args.tree_grammars:
        tree_grammar_table(args, scale)
        return
    if args.next_leaf:
        next_leaf_table(args, scale)
        return
    if not args.memory_vs_q:
        speed_and_memory_tables(args, scale)
    memory_vs_q_table(args, scale)
    if not args.memory_vs_q:
        next_leaf_table(args, scale)


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


def next_leaf_table(args, scale: int) -> None:
    print()
    print(f"Next-leaf distributions P_k(x_i | x_<i), every prefix (q=4, sigma=1, matched BP_k, float64, "
          f"threads {args.threads}, best of {args.repeats})")
    header = f"{'depth':>6}{'k':>4}{'n':>8}{'seconds':>10}{'sequences/s':>14}{'prefixes/s':>14}"
    print(header)
    print("-" * len(header))
    for depth, n, target in ((4, 10**4, 2.0), (8, 10**3, 30.0)):
        n = max(64, n // scale)
        rows = _in_fresh_process(_next_leaf_case, depth, n, args.repeats, args.threads)
        for k, seconds in rows:
            rates = f"{n / seconds:>14,.0f}{n * 2**depth / seconds:>14,.0f}"  # sequences/s, prefixes/s
            print(f"{depth:>6}{k:>4}{n:>8}{seconds:>10.3f}{rates}", flush=True)
        total = sum(seconds for _, seconds in rows)
        print(f"{depth:>6}{'all':>4}{n:>8}{total:>10.3f}   (target <= {target:g} s for n = {n:,})", flush=True)


def tree_grammar_table(args, scale: int) -> None:
    print()
    clock = "CPU" if args.cpu_time else "wall-clock"
    print(f"Tree grammars (threads {args.threads}, float64, best of {args.repeats}, {clock} time); sequences per second")
    header = (f"{'grammar':<24}{'s**l':>5}{'k':>3}{'n':>8}{'sampler':>11}{'BP root':>11}{'BP all':>11}"
              f"{'next-leaf':>11}")
    print(header)
    print("-" * len(header))
    for name, spec, depth, n in TREE_GRAMMARS:
        n = max(256, n // scale)
        arity = 2 if spec is None else spec["arity"]
        for k in (0, depth // 2):
            seconds = _in_fresh_process(_tree_case, spec, depth, k, n, args.repeats, args.threads, args.cpu_time)
            if seconds is None:
                print(f"{name:<24}  (not in this version of hf_treelang)")
                break
            rates = "".join(f"{n / seconds[what]:>11,.0f}" for what in ("sampler", "bp_root", "bp_all", "next_leaf"))
            print(f"{name:<24}{arity**depth:>5}{k:>3}{n:>8}{rates}", flush=True)


if __name__ == "__main__":
    main()
