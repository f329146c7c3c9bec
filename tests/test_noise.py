"""When two measured numbers are told apart (hf_treelang.core.noise): the package's one rule, its errors of a
difference, the z of a claim tried at several evaluations, and the same rule in the learning dynamics' levels within
noise of the closest BP_k and in the reproduction's Fig. 1c/d tie sets."""

import json
import math

import pytest

from hf_treelang.analysis import dynamics
from hf_treelang.analysis.io import write_json
from hf_treelang.core import noise
from hf_treelang.reproduce import findings


def test_a_difference_is_told_apart_only_beyond_z_standard_errors_whichever_its_sign():
    assert noise.Z == 2.0
    assert noise.told_apart(0.021, 0.01) and noise.told_apart(-0.021, 0.01)
    assert not noise.told_apart(0.02, 0.01) and not noise.told_apart(-0.001, 0.01)
    assert not noise.told_apart(math.nan, 0.01)  # an unknown difference is never told apart
    assert noise.told_apart(0.03, 0.01, z=2.9) and not noise.told_apart(0.03, 0.01, z=3.0)


@pytest.mark.parametrize("error", [math.nan, math.inf, -0.01, "0.01", None, True])
def test_an_error_that_is_not_a_standard_error_is_refused_naming_it(error):
    with pytest.raises(ValueError, match=r"`error` must be a standard error \(a finite number >= 0\), got "):
        noise.told_apart(0.5, error)
    assert noise.invalid_error(error) is not None and noise.invalid_error(0.0) is None


def test_the_error_of_a_difference_is_the_sum_on_the_same_inputs_and_the_root_sum_of_squares_on_independent_ones():
    assert noise.difference_error(0.03, 0.04, same_inputs=True) == pytest.approx(0.07)
    assert noise.difference_error(0.03, 0.04, same_inputs=False) == pytest.approx(0.05)
    # the sum bounds √(Var a + Var b − 2 Cov) for every correlation, −1 included
    assert math.sqrt(0.03**2 + 0.04**2 + 2 * 0.03 * 0.04) == pytest.approx(0.07)


def test_fractions_and_bounded_means_have_their_standard_errors():
    assert noise.fraction_error(0.5, 100) == pytest.approx(0.05)
    assert noise.fraction_error(1.0, 100) == 0.0
    assert noise.bounded_mean_error(-1.0, 1.0, 400) == pytest.approx(0.05)
    with pytest.raises(ValueError, match=r"`count` must be an integer >= 1, got 0"):
        noise.fraction_error(0.5, 0)
    with pytest.raises(ValueError, match=r"`fraction` must be a number in \[0, 1\], got 1.5"):
        noise.fraction_error(1.5, 10)


def test_a_claim_tried_at_m_evaluations_is_tested_at_the_tail_of_z_shared_among_them():
    from statistics import NormalDist

    assert noise.family_z(1) == pytest.approx(noise.Z)
    tail = 1 - NormalDist().cdf(noise.Z)
    for m in (2, 10, 100):
        assert 1 - NormalDist().cdf(noise.family_z(m)) == pytest.approx(tail / m)
    assert noise.family_z(2) < noise.family_z(10) < noise.family_z(100)


ROWS = [{"step": 1, "eval_kl_bp_k0": 0.20, "eval_kl_bp_k1": 0.10, "eval_kl_bp_k2": 0.104,
         "eval_kl_gap_se_bp_k0": 0.01, "eval_kl_gap_se_bp_k1": 0.0, "eval_kl_gap_se_bp_k2": 0.001},
        {"step": 2, "eval_kl_bp_k0": 0.100, "eval_kl_bp_k1": 0.105, "eval_kl_bp_k2": 0.3,
         "eval_kl_gap_se_bp_k0": 0.0, "eval_kl_gap_se_bp_k1": 0.004, "eval_kl_gap_se_bp_k2": 0.01},
        {"step": 3, "eval_kl_bp_k0": 0.100, "eval_kl_bp_k1": 0.130, "eval_kl_bp_k2": 0.3,
         "eval_kl_gap_se_bp_k0": 0.0, "eval_kl_gap_se_bp_k1": 0.004, "eval_kl_gap_se_bp_k2": 0.01}]


def _history(tmp_path, rows):
    (tmp_path / "run").mkdir(exist_ok=True)
    (tmp_path / "run" / "eval_history.json").write_text(json.dumps(rows))
    return dynamics.learning_dynamics(tmp_path / "run" / "eval_history.json")


def test_the_dynamics_and_the_reproduction_tell_the_same_levels_apart(tmp_path):
    result = _history(tmp_path, ROWS)
    within = result.within_noise_of_closest()
    assert within == [[1], [0, 1], [0]]  # 0.005 within 2 × 0.004; 0.030 beyond it; 0.004 beyond 2 × 0.001
    assert result.within_noise_of_closest() == result.within_noise_of_closest(z=noise.Z)
    written = json.loads(write_json(tmp_path / "root.json", result.to_dict()).read_text())  # as the step writes it
    assert findings._tie_sets(written) == within


@pytest.mark.parametrize("bad", [-0.004, math.inf])
def test_a_paired_error_that_is_not_a_standard_error_tells_no_level_apart(bad, tmp_path):
    rows = [dict(row) for row in ROWS]
    rows[1]["eval_kl_gap_se_bp_k1"] = bad
    assert _history(tmp_path, rows).within_noise_of_closest()[1] is None


def test_the_error_of_a_mean_is_the_sample_deviation_over_root_n_in_every_container():
    import numpy as np
    import torch

    values = [0.5, 1.5, 2.0, 4.0]
    expected = math.sqrt(sum((v - 2.0) ** 2 for v in values) / 3) / 2  # s (n - 1 in its denominator) / √n, n = 4
    for container in (values, np.array(values), torch.tensor(values, dtype=torch.float64)):
        assert noise.mean_error(container) == pytest.approx(expected, rel=1e-15, abs=0)
    for too_few in ([], [1.0], np.array([1.0]), torch.tensor([1.0])):
        assert math.isnan(noise.mean_error(too_few))  # no spread is measured from fewer than two values
