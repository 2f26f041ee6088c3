"""``pacd-bo epsilon``, ``pacd-bo gradnorms`` and ``pacd-bo privacy``: the privacy commands' parsers and logic.

``privacy`` (the sigma sweep) lives in :mod:`pacd_jax.privacy_sweep`.

``cli.py`` only registers them (:func:`add_parsers`, :data:`COMMANDS`).
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path


def _delta(text: str) -> float:
    from pacd_jax.cli import _float

    value = _float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1), got {text!r}")
    return value


def _positive_float(text: str) -> float:
    from pacd_jax.cli import _float

    value = _float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value


def add_parsers(sub) -> None:
    from pacd_jax.cli import _int_list, _nonneg_int, _positive_int
    from pacd_jax.config import RunConfig

    d = RunConfig()
    eps = sub.add_parser(
        "epsilon",
        help="epsilon at delta of one client over a DP run (PLD and RDP), or the sigma for a target epsilon",
        description=(
            "Privacy accounting (DESIGN.md section 7): every SVGD step a client releases K Gaussian mechanisms "
            "with noise multiplier sigma (noise std sigma * 2C); a run composes K * total_steps of them. "
            "Prints epsilon at delta by PLD (tight) and RDP, or with --target-epsilon the smallest sigma reaching it."
        ),
    )
    eps.add_argument("--sigma", type=_positive_float, help="noise multiplier sigma (> 0)")
    eps.add_argument("--target-epsilon", type=_positive_float, metavar="E", help="solve for the sigma whose epsilon is E")
    eps.add_argument("--clip", type=_positive_float, default=d.dp_clip, help="clip norm C (reported; epsilon does not depend on it) (default %(default)s)")
    eps.add_argument("--particles", type=_positive_int, default=d.num_particles, help="particles K (default %(default)s)")
    eps.add_argument("--steps-per-round", type=_positive_int, default=d.svgd_steps, help="SVGD steps per round S (default %(default)s)")
    eps.add_argument("--steps-init", type=_nonneg_int, default=d.svgd_steps_init,
                     help="SVGD steps in round 0 (default %(default)s, as pacd-bo run)")
    eps.add_argument("--rounds", type=_positive_int, default=100, help="BO rounds T (default %(default)s)")
    eps.add_argument("--delta", type=_delta, default=1e-5, help="delta (default %(default)s)")

    gn = sub.add_parser(
        "gradnorms",
        help="distribution of unclipped per-particle gradient norms (to choose the clip norm C)",
        description=(
            "Runs PACD-BO without DP and records the L2 norm of every client's per-particle gradient A_{i,k} "
            "at every SVGD step of the chosen rounds; writes DIR/gradnorms.json and DIR/gradnorms.png (--format)."
        ),
    )
    gn.add_argument("--benchmark", default=d.benchmark, help="default %(default)s")
    gn.add_argument("--clients", type=_positive_int, default=d.num_clients, help="default %(default)s")
    gn.add_argument("--seeds", type=_positive_int, default=1, help="seeds 0..S-1 (default %(default)s)")
    gn.add_argument("--rounds", type=_int_list, default=[0, 5, 20], help="rounds to record, comma-separated; round 0, whose norms give the suggested C, always is (default 0,5,20)")
    gn.add_argument("--particles", type=_positive_int, default=d.num_particles, help="default %(default)s")
    gn.add_argument("--hidden", type=_int_list, default=list(d.hidden), help="default 32,32")
    gn.add_argument("--svgd-steps", type=_nonneg_int, default=d.svgd_steps, help="default %(default)s")
    gn.add_argument("--svgd-steps-init", type=_nonneg_int, default=d.svgd_steps_init, help="default %(default)s")
    gn.add_argument("--candidates", type=_positive_int, default=d.num_candidates, help="default %(default)s")
    gn.add_argument("--quantile", type=float, default=0.5, help="the clip rule's quantile of the round-0 norms (default %(default)s: the median)")
    gn.add_argument("--x64", action="store_true")
    gn.add_argument("--out", required=True, metavar="DIR")
    gn.add_argument("--format", choices=("png", "pdf"), default="png", help="figure format (default %(default)s)")
    gn.add_argument("--quiet", action="store_true", help="no progress bar")

    from pacd_jax import privacy_sweep

    privacy_sweep.add_parser(sub)


def cmd_epsilon(args) -> int:
    from pacd_jax import accounting
    from pacd_jax.cli import UsageError

    if (args.sigma is None) == (args.target_epsilon is None):
        raise UsageError("give exactly one of --sigma and --target-epsilon", "pacd-bo epsilon")
    steps = accounting.total_steps(args.steps_per_round, args.rounds, args.steps_init)
    n = args.particles * steps
    if n == 0:
        raise UsageError("the run releases nothing (0 SVGD steps)", "pacd-bo epsilon")
    where = (
        f"K={args.particles} particles x {steps} SVGD steps "
        f"({'' if args.steps_init is None else f'{args.steps_init} + '}{args.steps_per_round} x "
        f"{args.rounds if args.steps_init is None else args.rounds - 1} rounds) = {n} Gaussian releases, delta={args.delta:g}"
    )
    if args.target_epsilon is not None:
        sigma = accounting.sigma_for_epsilon(args.target_epsilon, n, args.delta, "pld")
        print(f"sigma = {sigma:.6g} reaches epsilon <= {args.target_epsilon:g} (PLD) for {where}")
        if sigma < 2 * accounting.SIGMA_RANGE[0]:  # the search stopped at its floor, not at the boundary
            print(f"  this is the smallest sigma accounted for ({accounting.SIGMA_RANGE[0]:g}); "
                  "every sigma above it reaches the target too")
        print(f"  noise std per coordinate = 2 sigma C = {2 * sigma * args.clip:.4g} (C = {args.clip:g})")
        at_sigma, name = accounting.pld_or_exact(sigma, n, args.delta)
        print(f"  at this sigma: epsilon {'PLD' if name == 'pld' else 'exact mu-GDP'} = {at_sigma:.4f}, "
              f"RDP = {accounting.epsilon(sigma, n, args.delta, 'rdp'):.4f}")
        return 0
    pld, name = accounting.pld_or_exact(args.sigma, n, args.delta)
    rdp = accounting.epsilon(args.sigma, n, args.delta, "rdp")
    print(f"sigma = {args.sigma:g}, C = {args.clip:g} (noise std {2 * args.sigma * args.clip:.4g}); {where}")
    print(f"epsilon (PLD) = {pld:.4f}" if name == "pld" else f"epsilon (exact mu-GDP; PLD grid too coarse here) = {pld:.6g}")
    print(f"epsilon (RDP) = {rdp:.4f}")
    return 0


def cmd_gradnorms(args) -> int:
    from pacd_jax import gradnorms, io
    from pacd_jax.cli import UsageError
    from pacd_jax.config import RunConfig, seeds_from_options
    from pacd_jax import tasks

    if args.benchmark not in tasks.known_families():
        raise UsageError(f"unknown benchmark {args.benchmark!r}; choose one of {', '.join(tasks.known_families())}")
    if any(r < 0 for r in args.rounds):
        raise UsageError("--rounds must be >= 0")
    if not 0 < args.quantile < 1:
        raise UsageError("--quantile must be in (0, 1)")
    config = RunConfig(
        benchmark=args.benchmark,
        num_clients=args.clients,
        iters=max(args.rounds) + 1,
        seeds=seeds_from_options(args.seeds),
        num_particles=args.particles,
        hidden=tuple(args.hidden),
        svgd_steps=args.svgd_steps,
        svgd_steps_init=args.svgd_steps_init,
        num_candidates=args.candidates,
        x64=args.x64,
    )
    out = Path(args.out)
    from pacd_jax import io

    io.check_output_folder(out)
    start = time.perf_counter()
    from pacd_jax import progress

    bar = progress.bar(config.iters * len(config.seeds), "round", "pacd-bo gradnorms", args.quiet)
    try:
        doc = gradnorms.record(config, sorted(set(args.rounds)), quantile=args.quantile, on_round=progress.round_callback(bar))
    finally:
        bar.close()
    doc["wall_time_s"] = time.perf_counter() - start
    from pacd_jax import provenance

    import sys

    doc["meta"] = {"command": "pacd-bo " + " ".join(sys.argv[1:]), "commit": provenance.commit(), "machine": provenance.machine()}
    io.write_json(out / "gradnorms.json", doc)
    figure = out / f"gradnorms.{args.format}"
    gradnorms.plot(doc, figure)
    s = doc["summary"]
    print(f"per-particle gradient norms, round {doc['rounds'][0]}: median {s['round0_median']:.4g}, "
          f"q10 {s['round0_q10']:.4g}, q90 {s['round0_q90']:.4g}; suggested C (q={args.quantile:g}) = {s['suggested_clip']:.4g}")
    print(f"wrote {out / 'gradnorms.json'} and {figure}")
    return 0


def cmd_privacy(args) -> int:
    from pacd_jax import privacy_sweep

    return privacy_sweep.cmd_privacy(args)


COMMANDS = {"epsilon": cmd_epsilon, "gradnorms": cmd_gradnorms, "privacy": cmd_privacy}
