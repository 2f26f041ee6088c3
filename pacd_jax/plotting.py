"""Figures. One colour per method across every figure; axes labelled; paper-sized."""

from __future__ import annotations

import os

import numpy as np

from pacd_jax.io import atomic_path

#: Fixed method colours (colour-blind-safe Okabe-Ito palette) used by all figures.
METHOD_COLOURS = {
    "independent": "#7f7f7f",
    "pacoh": "#0072B2",
    "pacd": "#D55E00",
    "cboc-u": "#009E73",
    "cboc-l": "#CC79A7",
}
METHOD_LABELS = {
    "independent": "Independent GPs",
    "pacoh": "PACOH-BO",
    "pacd": "PACD-BO",
    "cboc-u": "CBOC-U",
    "cboc-l": "CBOC-L",
}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_convergence(doc: dict, path: str | os.PathLike, title: str | None = None) -> None:
    """Per-client and mean normalised regret vs BO round of one ``run.json`` document.

    Thin lines: each client (averaged over seeds); thick line: mean over clients
    and seeds with a +-1 std band over seeds. Log-scaled regret axis.
    """
    from pacd_jax.experiment import regret_curves

    plt = _pyplot()
    curves = regret_curves(doc)  # (S, N, T+1)
    rounds = np.arange(curves.shape[-1])
    per_seed = curves.mean(axis=1)
    mean, std = per_seed.mean(axis=0), per_seed.std(axis=0)
    colour = METHOD_COLOURS.get(doc["method"], "#000000")
    floor = 1e-6  # a log axis cannot show regret 0

    fig, ax = plt.subplots(figsize=(4.5, 3.2), dpi=150)
    for i in range(curves.shape[1]):
        ax.plot(rounds, np.maximum(curves[:, i].mean(axis=0), floor), color=colour, alpha=0.3, lw=0.8,
                label="clients" if i == 0 else None)
    ax.plot(rounds, np.maximum(mean, floor), color=colour, lw=2.0,
            label=f"{METHOD_LABELS.get(doc['method'], doc['method'])} (mean)")
    ax.fill_between(rounds, np.maximum(mean - std, floor), np.maximum(mean + std, floor), color=colour, alpha=0.2)
    ax.set_yscale("log")
    ax.set_xlabel("BO round t (queries per client)")
    ax.set_ylabel("normalised regret (dimensionless)")
    ax.set_title(title or f"{doc['benchmark']}: {doc['num_clients']} clients, {len(doc['results'])} seed(s)", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fmt = os.path.splitext(str(path))[1].lstrip(".") or "png"
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=fmt)
    plt.close(fig)
