"""Privacy accounting: closed-form Gaussian-mechanism values, the library's numbers, DESIGN.md checks."""

import math

import numpy as np
import pytest
from scipy import optimize, stats

from pacd_jax import accounting

CASES = [(4.0, 100, 1e-5), (8.0, 1000, 1e-5), (1.0, 1, 1e-5), (2.0, 50, 1e-6), (0.8, 3, 1e-3), (16.0, 54500, 1e-5)]


def test_gdp_delta_formula_against_direct_scipy():
    # the log-space implementation equals the textbook expression where the latter is accurate
    for eps, mu in [(0.5, 1.0), (3.0, 2.5), (10.0, 4.0)]:
        direct = stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)
        assert accounting.gdp_delta(eps, mu) == pytest.approx(direct, rel=1e-9, abs=1e-300)


@pytest.mark.parametrize("sigma,n,delta", CASES)
def test_pld_equals_closed_form_within_discretisation(sigma, n, delta):
    exact = accounting.gdp_epsilon(sigma, n, delta)
    pld = accounting.epsilon(sigma, n, delta, "pld")
    # PLD is pessimistic (never below the exact value) and off by less than its grid step
    assert exact - 1e-6 <= pld <= exact + accounting.pld_discretisation(sigma, n), (pld, exact)
    # RDP is a valid but looser upper bound
    rdp = accounting.epsilon(sigma, n, delta, "rdp")
    assert exact <= rdp <= 1.15 * exact + 0.5, (rdp, exact)
    # the closed form's delta at the exact epsilon is delta
    assert accounting.gdp_delta(exact, math.sqrt(n) / sigma) == pytest.approx(delta, rel=1e-6)


def test_equals_library_own_pld_and_rdp_numbers():
    from dp_accounting import rdp
    from dp_accounting.pld import privacy_loss_distribution as pldlib

    sigma, n, delta = 3.0, 200, 1e-5
    interval = accounting.pld_discretisation(sigma, n)
    lib = pldlib.from_gaussian_mechanism(sigma, value_discretization_interval=interval).self_compose(n)
    # the accountant composes the PLD its own way; it agrees with explicit self-composition to the grid step
    assert accounting.epsilon(sigma, n, delta, "pld") == pytest.approx(lib.get_epsilon_for_delta(delta), abs=interval)
    # RDP of the Gaussian mechanism is alpha / (2 sigma^2) per release (Mironov 2017); n releases add up;
    # the library converts the curve to (epsilon, delta)
    orders = np.asarray(rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS, np.float64)
    lib_rdp, _ = rdp.rdp_privacy_accountant.compute_epsilon(orders, n * orders / (2 * sigma**2), delta)
    assert accounting.epsilon(sigma, n, delta, "rdp") == pytest.approx(lib_rdp, rel=1e-9)


def test_design_checked_values():
    assert accounting.epsilon(4.0, 100, 1e-5, "pld") == pytest.approx(13.2, abs=0.05)
    assert accounting.epsilon(4.0, 100, 1e-5, "rdp") == pytest.approx(14.1, abs=0.05)
    assert accounting.epsilon(8.0, 1000, 1e-5, "pld") == pytest.approx(24.0, abs=0.05)


def test_k_particles_compose_like_sigma_over_sqrt_k():
    # K mechanisms with sigma each = one with sigma / sqrt(K) (exact for Gaussians): the
    # accountants compose 300 releases at sigma = 8 and 30 at 8 / sqrt(10) by different routes
    for name, rel in (("pld", 2e-3), ("rdp", 2e-2)):
        a = accounting.epsilon(8.0, 10 * 30, 1e-5, name)
        b = accounting.epsilon(8.0 / math.sqrt(10), 30, 1e-5, name)
        assert a == pytest.approx(b, rel=rel), name
    privacy = accounting.RunPrivacy(8.0, 10, accounting.total_steps(50, 100, steps_init=500))
    assert privacy.total_steps == 5450 and privacy.compositions == 54500


@pytest.mark.parametrize("target, n", [(100.0, 100), (100.0, 60), (5e3, 20), (0.5, 1000)])
def test_sigma_for_target_epsilon_brackets_large_and_small_targets(target, n):
    # targets that sigma = 1 already meets (short runs): the boundary lies below 1, where the
    # PLD grid of tiny sigmas would be too coarse; the closed form is the oracle
    delta = 1e-5
    sigma = accounting.sigma_for_epsilon(target, n, delta)
    exact = optimize.brentq(lambda s: accounting.gdp_epsilon(s, n, delta) - target, 1e-4, 1e4, rtol=1e-12)
    assert sigma == pytest.approx(exact, rel=3e-3)
    assert accounting.pld_or_exact(sigma, n, delta)[0] <= target


def test_sigma_for_target_epsilon_inverts_epsilon():
    n, delta = 100, 1e-5
    sigma = accounting.sigma_for_epsilon(13.2067, n, delta)
    assert sigma == pytest.approx(4.0, rel=2e-3)
    assert accounting.epsilon(sigma, n, delta) <= 13.2067
    assert accounting.epsilon(sigma * (1 - 5e-3), n, delta) > 13.2067


def test_monotone_in_sigma_and_steps():
    eps = [accounting.epsilon(s, 100, 1e-5) for s in (1, 2, 4, 8)]
    assert all(a > b for a, b in zip(eps, eps[1:]))
    assert accounting.epsilon(4, 200, 1e-5) > accounting.epsilon(4, 100, 1e-5)


def test_tiny_sigma_falls_back_to_exact_value_instead_of_overflowing():
    # sigma = 0.01 over 24500 releases: the PLD grid step would be 2.45e7 (the library overflows)
    eps, name = accounting.pld_or_exact(0.01, 24500, 1e-5)
    assert name == "gdp" and eps == pytest.approx(accounting.gdp_epsilon(0.01, 24500, 1e-5))
    mu = math.sqrt(24500) / 0.01
    assert mu**2 / 2 < eps < mu**2  # epsilon ~ mu^2/2 + O(mu) for large mu
    with pytest.raises(ValueError, match="too coarse"):
        accounting.epsilon(0.01, 24500, 1e-5, "pld")
    rec = accounting.run_record(0.01, 1.0, 10, 2450)
    assert rec["accountant"] == "gdp" and rec["epsilon"] == pytest.approx(eps)
    # where the grid is fine, the record is PLD
    assert accounting.pld_or_exact(8.0, 54500, 1e-5)[1] == "pld"


@pytest.mark.parametrize("args", [(0.0, 10, 1e-5), (1.0, 0, 1e-5), (1.0, 10, 0.0), (1.0, 10, 1.0)])
def test_bad_inputs(args):
    with pytest.raises(ValueError):
        accounting.epsilon(*args)


@pytest.mark.parametrize("sigma", [1e-300, 1e300])
def test_sigma_outside_the_accounted_range_is_a_value_error(sigma):
    for call in (lambda: accounting.epsilon(sigma, 100, 1e-5), lambda: accounting.pld_or_exact(sigma, 100, 1e-5)):
        with pytest.raises(ValueError, match="sigma must be in"):
            call()
