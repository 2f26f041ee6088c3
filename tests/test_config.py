"""RunConfig validation: every bad value is a ValueError naming the option and the value."""

import dataclasses

import pytest

from pacd_jax.config import RunConfig
from pacd_jax.coordinator import MetaObjective


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"method": "magic"}, "unknown method 'magic'"),
        ({"backend": "spark"}, "unknown backend 'spark'"),
        ({"num_clients": 0}, "num_clients must be in"),
        ({"num_clients": 2.5}, "num_clients must be an integer"),
        ({"iters": 0}, "iters must be in"),
        ({"seeds": ()}, "seeds must not be empty"),
        ({"seeds": (1, 1)}, "seeds must be distinct"),
        ({"seeds": (-1,)}, "seed must be in"),
        ({"init_points": 0}, "init_points must be in"),
        ({"noise_std": -0.1}, "noise_std must be >= 0"),
        ({"noise_std": float("nan")}, "noise_std must be finite"),
        ({"num_particles": 0}, "num_particles must be in"),
        ({"hidden": ()}, "hidden must name at least one"),
        ({"hidden": (32, 0)}, "hidden width must be in"),
        ({"learning_rate": 0.0}, "learning_rate must be > 0"),
        ({"kernel_variance": float("inf")}, "kernel_variance must be finite"),
        ({"noise_prior": (0.0,)}, "noise_prior must be (mean, std)"),
        ({"noise_prior": (0.0, -1.0)}, "noise_prior std must be > 0"),
        ({"prior_factor": -1.0}, "prior_factor must be >= 0"),
        ({"meta_lambda": 0.0}, "meta_lambda must be > 0"),
        ({"num_refine": 5000}, "num_refine must be in"),
        ({"gp_kernel": "periodic"}, "unknown gp_kernel"),
        ({"x64": "yes"}, "x64 must be a bool"),
        ({"input_kernel": 1}, "input_kernel must be a bool"),
        ({"learn_outputscale": "yes"}, "learn_outputscale must be a bool"),
        ({"feature_kernel": "laplace"}, "unknown feature_kernel 'laplace'"),
        ({"output_warp": "sqrt"}, "unknown output_warp 'sqrt'"),
        ({"svgd_steps": True}, "svgd_steps must be an integer"),
        ({"dp_sigma": 1e-9}, "dp_sigma must be 0 (no DP) or at least 1e-6"),
        ({"dp_clip": 1e9}, "dp_clip must be > 0.0 and <= 1000000.0"),
        ({"learning_rate": 1e3}, "learning_rate must be > 0.0 and <= 100.0"),
        ({"seeds": tuple(range(100_001))}, "at most 100000 seeds"),
    ],
)
def test_bad_values_raise_value_error(changes, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        RunConfig(**changes)


def test_defaults_are_valid_frozen_and_serialisable():
    config = RunConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.iters = 3
    doc = config.to_dict()
    assert doc["seeds"] == [0] and doc["hidden"] == [32, 32] and doc["noise_prior"] == [-4.0, 1.0]
    assert RunConfig(seeds=[3, 1]).seeds == (3, 1)
    assert config.replace(iters=7).iters == 7


def test_meta_objective_weights():
    obj = MetaObjective(num_clients=5)
    # lambda = N by default: lambda / (N beta + lambda) = 1 / (beta + 1)
    assert obj.lam == 5.0 and float(obj.data_weight(9.0)) == pytest.approx(0.1)
    assert float(MetaObjective(num_clients=4, meta_lambda=2.0).data_weight(3.0)) == pytest.approx(2.0 / 14.0)
    with pytest.raises(ValueError, match="prior_factor"):
        MetaObjective(num_clients=5, prior_factor=-1.0)


def test_seeds_from_options():
    from pacd_jax.config import MAX_SEEDS, seeds_from_options

    assert seeds_from_options(3) == (0, 1, 2)
    assert seeds_from_options(3, [7, 2]) == (7, 2)  # a seed list wins over the count
    assert seeds_from_options(MAX_SEEDS) == tuple(range(MAX_SEEDS))
    with pytest.raises(ValueError, match="--seeds must be at most"):
        seeds_from_options(MAX_SEEDS + 1)
