"""pacd-jax: privacy-aware collaborative and distributed Bayesian optimisation."""

__version__ = "0.1.0"
