"""Golden hashes: the bytes a seed means. A change here changes every published dataset and every paper figure.

The hashes were taken from the code before the layered redesign (commit 7da0030); the sampler's seed contract
(``BLOCK_DRAWS``, the Philox stream keys, the alias tables) is "fixed forever", and these tests hold it to that.
"""

import hashlib

import numpy as np
import pytest

from hf_treelang import Grammar, sample_trees, uniform_sequences


def exp_kernel() -> str:
    """The SIMD kernel numpy dispatches for float64 ``exp`` on this CPU (``np.lib.introspect``): ``"X86_V4"``
    (AVX-512) or ``"X86_V3"`` (AVX2 + FMA) on x86-64 with numpy 2.4, older releases naming the same ones
    ``"AVX512F"`` / ``"AVX512_SKX"`` and ``"AVX2"`` / ``"FMA3"``."""
    info = np.lib.introspect.opt_func_info(func_name="^exp$", signature="float64")
    return info.get("exp", {}).get("dd", {}).get("current", "unknown")


# The grammar's weights are np.exp of the logits, and numpy's AVX-512 exp and its AVX2 one (libm's values) differ in
# the last bit of some weights, as the paper's own script does on those CPUs: one pinned hash per kernel. The trees
# sampled from either grammar are the same bytes (the tests below pass on both).
GRAMMAR_HASHES = {
    "avx512": {(4, 1.0, 0): "e8cefd4a1ec939178dc9bc1751b932c8115f8ab67d2b953aa0ddd411423cdd8f",
               (8, 0.5, 15): "5ae5192073ea9fec2992c1634ae6698a56e4503f41483e076948c2b8b1ee00b6"},
    "avx2": {(4, 1.0, 0): "ccf41ea6b5ca3504f3bab7bfac6cc4a8f9ef1fa69fe7ace28e0dc6ce44817503",
             (8, 0.5, 15): "e9a3798c37dd98e6ace105a60e0d66265e7c20d68f7a85587a0a1b81fccfa130"},
}
KERNEL_FAMILIES = {"X86_V4": "avx512", "AVX512F": "avx512", "AVX512_SKX": "avx512",
                   "X86_V3": "avx2", "AVX2": "avx2", "FMA3": "avx2"}


@pytest.mark.parametrize("num_symbols, sigma, grammar_seed", [(4, 1.0, 0), (8, 0.5, 15)])
def test_grammar_random_bytes_are_pinned(num_symbols, sigma, grammar_seed):
    family = KERNEL_FAMILIES.get(exp_kernel())
    if family is None:
        pytest.skip(f"no pinned grammar bytes for numpy's float64 exp kernel {exp_kernel()!r} on this CPU")
    grammar = Grammar.random(num_symbols, sigma, grammar_seed)
    assert hashlib.sha256(grammar.M.tobytes()).hexdigest() == GRAMMAR_HASHES[family][num_symbols, sigma, grammar_seed]


@pytest.mark.parametrize(
    "filter_level, expected",
    [
        (0, "9a3cf82425cb3716c92b2fc424d092cae6eb6cd1d8c2e18972e5165b0665c96b"),
        (2, "5e2a3f18fabbbfe317aece7b71cc82fd2adcdff772b912cfe3c1dee2dff9561e"),
        (4, "bcf27b0752bbd82cdaf21f56f39582d4ebef3a2487585ad15104533866e80570"),
    ],
)
def test_sample_trees_bytes_are_pinned(filter_level, expected):
    trees = sample_trees(Grammar.random(4, 1.0, 0), 3000, 4, filter_level, 7)
    payload = np.ascontiguousarray(trees.leaves).tobytes() + trees.roots.tobytes()
    assert hashlib.sha256(payload).hexdigest() == expected


def test_sample_trees_bytes_across_stream_blocks_are_pinned():
    # 70 000 trees of depth 6 span several Philox blocks (block_rows(6) = 1024), started at an offset
    trees = sample_trees(Grammar.random(8, 0.5, 15), 70000, 6, 1, 3, start=5)
    assert hashlib.sha256(trees.leaves.tobytes()).hexdigest() == (
        "d7e26bb247f7fe3b2b909b781dbcb0d22c201fe57225f636948b3ac01e50d89f"
    )


def test_uniform_sequences_bytes_are_pinned():
    sequences = uniform_sequences(4, 5000, 4, 11)
    assert hashlib.sha256(sequences.tobytes()).hexdigest() == (
        "2a4949a8c04fe895f925d70556139a389555116c0d7218fd2c157e9d18dde72d"
    )


def test_load_dataset_k2_train_split_bytes_are_pinned(tmp_path):
    import datasets

    dataset = datasets.load_dataset(
        "treelang", "k2", num_train=5000, num_validation=100, num_test=100, cache_dir=str(tmp_path)
    )
    train = dataset["train"].with_format("numpy")
    payload = np.asarray(train["input_ids"]).astype(np.int64).tobytes() + np.asarray(train["root"]).astype(
        np.int64
    ).tobytes()
    assert hashlib.sha256(payload).hexdigest() == "96ad343138cc855157bb603e97aa6073b759522216810b67010172372b1eaf98"
