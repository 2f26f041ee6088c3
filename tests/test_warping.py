"""Output warping (``--output-warp``): the transforms against scipy and numpy, their invariances, and the wiring."""

import json

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from helpers import small_config
from pacd_jax import cli, client, experiment, intercept, warping
from pacd_jax.config import OUTPUT_WARPS, RunConfig
from pacd_jax.gp import standardise

SMALL_ARGS = ["--particles", "3", "--hidden", "8,8", "--svgd-steps", "5", "--svgd-steps-init", "20",
              "--candidates", "64", "--refine", "2", "--refine-steps", "5", "--gp-fit-steps", "10"]


def _skewed(rng, n):
    """Branin-like observations: most small, a long upper tail."""
    return rng.gamma(0.7, size=n) * 40.0 + 0.4


def _padded(y, extra=4):
    ypad = np.concatenate([y, np.full(extra, 123.0)])
    mask = np.concatenate([np.ones(len(y), bool), np.zeros(extra, bool)])
    return ypad, mask


@pytest.mark.parametrize("lam", [-1.3, 0.0, 0.7, 1.0, 2.0, 2.6])
def test_yeo_johnson_equals_scipy(lam):
    z = np.random.default_rng(0).normal(size=40) * 2.0
    z[:3] = [0.0, -1e-9, 1e-9]
    with jax.enable_x64(True):
        ours = np.asarray(warping.yeo_johnson(jnp.asarray(z), lam))
    np.testing.assert_allclose(ours, stats.yeojohnson(z, lam), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("lam", [-0.8, 0.0, 0.5, 1.7])
def test_yeo_johnson_llf_equals_scipy_and_ignores_padding(lam):
    z = np.random.default_rng(1).normal(size=25) + 0.3
    zpad, mask = _padded(z)
    with jax.enable_x64(True):
        ours = float(warping.yeo_johnson_llf(jnp.asarray(zpad), jnp.asarray(mask), lam))
    assert ours == pytest.approx(float(stats.yeojohnson_llf(lam, z)), rel=1e-12, abs=1e-10)


@pytest.mark.parametrize("x64", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fitted_exponent_is_scipys_to_the_grid_step(seed, x64):
    y = _skewed(np.random.default_rng(seed), 30)
    z = (y - y.mean()) / y.std()
    lam_scipy = stats.yeojohnson_normmax(z)
    assert -2.0 < lam_scipy < 2.0  # the grid's range
    ypad, mask = _padded(z)
    with jax.enable_x64(x64):
        lam = float(warping.fit_yeo_johnson(jnp.asarray(ypad), jnp.asarray(mask)))
    assert abs(lam - lam_scipy) <= 0.025 + 1e-6
    # the grid's best point by scipy's own likelihood
    best = max(warping.YJ_GRID, key=lambda g: stats.yeojohnson_llf(g, z))
    assert lam == pytest.approx(best, abs=1e-6)


def test_log_warp_equals_numpy_and_keeps_padding_zero():
    y = _skewed(np.random.default_rng(3), 20)
    ypad, mask = _padded(y)
    with jax.enable_x64(True):
        ours = np.asarray(warping.log_warp(jnp.asarray(ypad), jnp.asarray(mask)))
    expected = np.log(y - y.min() + warping.LOG_OFFSET * (y.max() - y.min()))
    np.testing.assert_allclose(ours[:20], expected, rtol=1e-12)
    assert np.all(ours[20:] == 0.0)
    constant = warping.log_warp(jnp.full((5,), 3.0), jnp.ones(5, bool))
    assert np.allclose(constant, np.log(warping.LOG_OFFSET))


@pytest.mark.parametrize("kind", OUTPUT_WARPS)
def test_model_data_keeps_order_and_ignores_affine_rescaling(kind):
    """The warp is monotone, and the GP's targets do not depend on the objective's units."""
    rng = np.random.default_rng(4)
    y = _skewed(rng, 15)
    X = rng.uniform(size=(19, 2))
    ypad, _ = _padded(y)
    with jax.enable_x64(True):
        buf = client.ClientBuffer(jnp.asarray(X), jnp.asarray(ypad), jnp.asarray(15))
        data = client.model_data(buf, kind)
        rescaled = client.model_data(buf._replace(y=buf.y * 7.5 - 30.0), kind)
        target = np.asarray(data.y)
    assert np.all(target[15:] == 0.0) and np.all(np.asarray(data.mask) == (np.arange(19) < 15))
    np.testing.assert_array_equal(np.argsort(target[:15], kind="stable"), np.argsort(y, kind="stable"))
    np.testing.assert_allclose(np.asarray(rescaled.y), target, atol=1e-10)
    assert target[:15].mean() == pytest.approx(0.0, abs=1e-12) and target[:15].std() == pytest.approx(1.0, rel=1e-10)
    if kind == "yeo-johnson":  # the standardised transform at the fitted exponent, as scipy computes it
        z = (y - y.mean()) / y.std()
        lam = max(warping.YJ_GRID, key=lambda g: stats.yeojohnson_llf(g, z))
        t = stats.yeojohnson(z, lam)
        np.testing.assert_allclose(target[:15], (t - t.mean()) / t.std(), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("kind", OUTPUT_WARPS)
def test_degenerate_buffers_stay_finite(kind):
    for y, count in (([2.0, 2.0, 2.0, 0.0], 3), ([5.0, 0.0, 0.0, 0.0], 1)):
        buf = client.ClientBuffer(jnp.zeros((4, 1)), jnp.asarray(y), jnp.asarray(count))
        out = np.asarray(client.model_data(buf, kind).y)
        assert np.all(np.isfinite(out)) and np.all(out == 0.0)


def test_jitted_warp_compiles_once_as_data_grows():
    rng = np.random.default_rng(5)
    X, y = jnp.asarray(rng.uniform(size=(12, 2))), jnp.asarray(_skewed(rng, 12))

    @jax.jit
    @chex.assert_max_traces(n=1)
    def targets(buf):
        return client.model_data(buf, "yeo-johnson").y

    for count in range(3, 12):
        out = targets(client.ClientBuffer(X, y, jnp.asarray(count)))
        assert np.all(np.isfinite(out))


def test_unknown_warp_is_refused():
    with pytest.raises(ValueError, match="unknown output warp 'cube'"):
        warping.warp_outputs(jnp.ones(3), jnp.ones(3, bool), "cube")
    from pacd_jax import standard_gp
    from pacd_jax.gp import MetaGPConfig

    with pytest.raises(ValueError, match="unknown output_warp"):
        MetaGPConfig(dim=1, output_warp="cube")
    with pytest.raises(ValueError, match="unknown output_warp"):
        standard_gp.StandardGPConfig(dim=1, output_warp="cube")


@pytest.mark.heavy  # a run of every method
def test_every_method_models_the_warped_outputs(monkeypatch):
    """Every method's GP sees the warped outputs (the warp traced is the configured one, never ``none``); runs stay finite."""
    from pacd_jax import methods

    traced = []
    original = warping.warp_outputs
    monkeypatch.setattr(warping, "warp_outputs", lambda y, mask, kind="none": traced.append(kind) or original(y, mask, kind))
    for method in ("pacd", "pacoh", "independent", "cboc-u"):
        traced.clear()
        doc = experiment.run(small_config(benchmark="branin", method=method, num_clients=2, iters=2, output_warp="yeo-johnson"))
        assert np.isfinite(doc["summary"]["final_regret_mean"])
        assert traced and set(traced) == {"yeo-johnson"}, (method, traced)
    assert methods.meta_gp(small_config(output_warp="log"), 2).config.output_warp == "log"


def test_cli_flag_is_recorded_and_identity_keeps_old_cells(tmp_path, capsys):
    code = cli.main(["run", "--benchmark", "sinusoid", "--clients", "2", "--iters", "2", "--output-warp", "log",
                     "--quiet", "--out", str(tmp_path), *SMALL_ARGS])
    _, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads((tmp_path / "run.json").read_text())
    assert doc["config"]["output_warp"] == "log"
    assert "output_warp" not in RunConfig().identity()
    assert RunConfig(output_warp="log").identity()["output_warp"] == "log"


def test_interception_refuses_a_warp():
    spec = intercept.InterceptSpec(client=0, rounds=(1,))
    with pytest.raises(ValueError, match="needs output_warp none"):
        spec.check(small_config(output_warp="log"))
