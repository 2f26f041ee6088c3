"""``pacd-bo attack``: run PACD-BO, intercept a client, attack it with DLG (paper section V).

Writes ``DIR/attack.json`` (DESIGN.md section 9), ``DIR/leakage.png`` (Figure 3;
with ``--dp-sigma`` a second row with DP) and ``DIR/dispersion_vs_round.png``
(Figure 4 left); ``--format pdf`` writes the figures as PDF.
"""

from __future__ import annotations

import sys
from pathlib import Path


def add_parser(sub, helpers) -> None:
    """Register the subcommand; ``helpers`` are cli.py's argument types."""
    from pacd_jax.config import RunConfig
    from pacd_jax.leakage import PAPER_ROUNDS
    from pacd_jax.pursuit import PursuitConfig

    d, pdef = RunConfig(), PursuitConfig()
    p = sub.add_parser(
        "attack",
        help="gradient-leakage (DLG) attack by the coordinator on one client",
        description="Run PACD-BO, record the target client's gradients at chosen rounds, reconstruct its queries "
        "by gradient matching (paper eq. 11), and score the reconstruction against the truth and a no-information guess.",
    )
    p.add_argument("--benchmark", default="branin", help="task family (default %(default)s)")
    p.add_argument("--clients", type=helpers["positive_int"], default=d.num_clients, help="number of clients N (default %(default)s)")
    p.add_argument("--iters", type=helpers["positive_int"], default=100, help="BO rounds T (default %(default)s)")
    p.add_argument("--seed", type=helpers["nonneg_int"], default=0, help="seed (default %(default)s)")
    p.add_argument("--target-client", type=helpers["nonneg_int"], default=0, help="client to attack (default %(default)s)")
    p.add_argument("--rounds", type=helpers["int_list"], default=list(PAPER_ROUNDS), help="0-based rounds to attack (default 1,5,20,40,60,80,99)")
    a = p.add_argument_group("attack")
    a.add_argument("--restarts", type=helpers["positive_int"], default=5, help="random restarts R (default %(default)s)")
    a.add_argument("--steps", type=helpers["positive_int"], default=500, help="L-BFGS iterations per restart (default %(default)s)")
    a.add_argument("--attack-init", choices=("normal", "uniform"), default="normal", help="dummy X ~ N(0,I) (paper) or uniform on the box (default %(default)s)")
    a.add_argument("--known-y", action="store_true", help="the attacker knows the client's (standardised) y; only X is optimised")
    a.add_argument("--cosine", action="store_true", help="cosine gradient-matching loss instead of eq. 11's squared distance")
    a.add_argument("--normalise", action="store_true", help="divide eq. 11 by the squared norm of the message")
    a.add_argument("--box", action="store_true", help="keep the dummy points in the unit box (X = sigmoid(u))")
    a.add_argument("--attack-particles", type=helpers["positive_int"], help="attack with the first k particles only (default all K)")
    g = p.add_argument_group(
        "progressive attacker",
        "--attack-mode progressive: the coordinator follows the target every round from min(--rounds) to max(--rounds): "
        "it reconstructs the first round from scratch (--first-restarts starts, uniform on the box, --steps L-BFGS steps), "
        "then keeps its reconstruction and searches only each round's new point (--new-candidates starts, half near earlier points, "
        "--search-steps steps on --search-particles particles), refines all points jointly (--joint-steps), and retries with fresh "
        "candidates (--tries) while the loss is above 1e-8 of the message's squared norm. The listed rounds are scored.",
    )
    g.add_argument(
        "--attack-mode",
        choices=("paper", "progressive", "pursuit", "pursuit-follow"),
        default="paper",
        help="paper: eq. 11 on each listed round from random starts (default); progressive: warm-started round after round; "
        "pursuit: each listed round from its message's atoms (pacd_jax.pursuit); pursuit-follow: the pursuit attack on "
        "min(--rounds), then round after round it keeps its points and adds each round's new one (pacd_jax.pursuit.pursuit_follow)",
    )
    g.add_argument("--first-restarts", type=helpers["positive_int"], default=64, help="restarts of the progressive attack's first round (default %(default)s)")
    g.add_argument("--new-candidates", type=helpers["positive_int"], default=16, help="starts per new point (default %(default)s)")
    g.add_argument("--search-steps", type=helpers["positive_int"], default=40, help="L-BFGS steps of the new-point search (default %(default)s)")
    g.add_argument("--search-particles", type=helpers["positive_int"], default=2, help="particles used by the new-point search (default %(default)s)")
    g.add_argument("--joint-steps", type=helpers["nonneg_int"], default=30, help="joint L-BFGS steps on all points after the search (default %(default)s)")
    g.add_argument("--tries", type=helpers["positive_int"], default=3, help="candidate batches per round at most (default %(default)s)")
    pu = p.add_argument_group(
        "pursuit attacker",
        "--attack-mode pursuit: the message is a sum of one Jacobian atom group per point with coefficients that enter linearly; "
        "the attack adds the point that explains most of the residual m times (scored on --pursuit-candidates Sobol points and "
        "next to the points found), moving all points after each addition, then exchanges points (add the best candidate and drop "
        "the point that costs least, or drop one and search again) while that helps.",
    )
    pu.add_argument("--pursuit-candidates", type=helpers["positive_int"], default=pdef.candidates, help="Sobol candidates per addition (default %(default)s)")
    pu.add_argument("--pursuit-grow-steps", type=helpers["positive_int"], default=pdef.grow_steps, help="L-BFGS steps after each addition (default %(default)s)")
    pu.add_argument("--pursuit-final-steps", type=helpers["positive_int"], default=pdef.final_steps, help="L-BFGS steps once all points are in (default %(default)s)")
    pu.add_argument("--pursuit-swaps", type=helpers["nonneg_int"], default=pdef.swaps, help="exchange passes at most (default %(default)s)")
    pu.add_argument("--pursuit-exchange-steps", type=helpers["positive_int"], default=pdef.exchange_steps,
                    help="L-BFGS steps after each exchange try (default %(default)s)")
    pu.add_argument("--pursuit-search-particles", type=helpers["nonneg_int"], default=pdef.search_particles,
                    help="grow, refine and exchange on the particles with the largest messages only, this many, then polish on all; 0: all (default %(default)s)")
    pu.add_argument("--pursuit-converged-rtol", type=helpers["float"], default=None, metavar="R",
                    help="stop each L-BFGS run once an iteration lowers the residual by less than R of itself "
                         "(default: 1e-6 with pursuit-follow, off (fixed step counts) with pursuit)")
    pu.add_argument("--pursuit-shortlist", type=helpers["nonneg_int"], default=0, metavar="N",
                    help="score orthogonally only the N box candidates whose own atoms fit the residual best; 0: all (default 0)")
    pu.add_argument("--pursuit-faces", type=helpers["nonneg_int"], default=pdef.faces,
                    help="candidates on each face of the box (and its corners; 0: none) (default %(default)s)")
    pu.add_argument("--pursuit-no-widen", dest="pursuit_widen", action="store_false",
                    help="when exchanges stall on the search particles, polish instead of continuing on twice as many (default: widen)")
    dp = p.add_argument_group("defense")
    dp.add_argument("--dp-sigma", type=helpers["float"], default=0.0, help="DP noise multiplier sigma (paper eq. 13); > 0 also runs and plots the DP case (default off)")
    dp.add_argument("--dp-clip", type=helpers["float"], default=d.dp_clip, help="DP clip norm C (paper eq. 12; default %(default)s)")
    m = p.add_argument_group("run (defaults as pacd-bo run)")
    m.add_argument("--particles", type=helpers["positive_int"], default=d.num_particles)
    m.add_argument("--hidden", type=helpers["int_list"], default=list(d.hidden))
    m.add_argument("--svgd-steps", type=helpers["nonneg_int"], default=d.svgd_steps)
    m.add_argument("--svgd-steps-init", type=helpers["nonneg_int"], default=d.svgd_steps_init)
    m.add_argument("--candidates", type=helpers["positive_int"], default=d.num_candidates)
    m.add_argument("--local-candidates", type=helpers["nonneg_int"], default=d.num_local)
    m.add_argument("--refine", type=helpers["positive_int"], default=d.num_refine)
    m.add_argument("--refine-steps", type=helpers["nonneg_int"], default=d.refine_steps)
    m.add_argument("--x64", action="store_true", help="run BO in float64 (the attack always is)")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder")
    p.add_argument("--format", choices=("png", "pdf"), default="png", help="figure format (default %(default)s)")
    p.add_argument("--quiet", action="store_true", help="no progress bars or per-round lines")


def cmd_attack(args, usage_error) -> int:
    from tqdm.auto import tqdm

    from pacd_jax import attack, io, leakage, progress, pursuit, tasks
    from pacd_jax.config import RunConfig

    if args.benchmark not in tasks.known_families():
        raise usage_error(f"unknown benchmark {args.benchmark!r}; choose one of {', '.join(tasks.known_families())}")
    out = Path(args.out)
    from pacd_jax import io

    try:
        io.check_output_folder(out)
    except ValueError as exc:
        raise usage_error(str(exc)) from None
    if args.target_client >= args.clients:
        raise usage_error(f"--target-client must be in [0, {args.clients - 1}], got {args.target_client}")
    bad = [t for t in args.rounds if t >= args.iters]
    if bad:
        raise usage_error(f"--rounds must be in [0, {args.iters - 1}] (--iters {args.iters}), got {bad}")
    if args.attack_particles is not None and args.attack_particles > args.particles:
        raise usage_error(f"--attack-particles must be at most --particles ({args.particles}), got {args.attack_particles}")
    base = RunConfig(
        benchmark=args.benchmark, method="pacd", num_clients=args.clients, iters=args.iters, seeds=(args.seed,),
        x64=args.x64, num_particles=args.particles, hidden=tuple(args.hidden), svgd_steps=args.svgd_steps,
        svgd_steps_init=args.svgd_steps_init, num_candidates=args.candidates, num_local=args.local_candidates,
        num_refine=min(args.refine, args.candidates), refine_steps=args.refine_steps, dp_clip=args.dp_clip,
    )
    if args.dp_sigma < 0:
        raise usage_error(f"--dp-sigma must be >= 0, got {args.dp_sigma}")
    cfg = attack.AttackConfig(
        restarts=args.restarts, steps=args.steps, learn_y=not args.known_y, init=args.attack_init,
        cosine=args.cosine, normalise=args.normalise, particles=args.attack_particles, bounded=args.box,
    )

    if args.attack_mode in ("pursuit", "pursuit-follow"):
        cfg = pursuit.PursuitConfig(
            candidates=args.pursuit_candidates, grow_steps=args.pursuit_grow_steps, final_steps=args.pursuit_final_steps,
            swaps=args.pursuit_swaps, exchange_steps=args.pursuit_exchange_steps,
            search_particles=args.pursuit_search_particles or None, widen=args.pursuit_widen,
            converged_rtol=args.pursuit_converged_rtol if args.pursuit_converged_rtol is not None
            else (1e-6 if args.attack_mode == "pursuit-follow" else None),
            shortlist=args.pursuit_shortlist or None,
            faces=args.pursuit_faces,
        )
    prog = None
    if args.attack_mode == "progressive":
        prog = attack.ProgressiveConfig(
            first=attack.AttackConfig(restarts=args.first_restarts, steps=args.steps, init="uniform", bounded=True),
            candidates=args.new_candidates, search_steps=args.search_steps, search_particles=args.search_particles,
            refine_steps=args.joint_steps, tries=args.tries,
        )

    def show(entry):
        if not args.quiet and entry.get("error"):
            tqdm.write(f"round {entry['round']:3d}  m={entry['m']:3d}  {entry['error']}", file=sys.stdout)
        elif not args.quiet:
            tqdm.write(
                f"round {entry['round']:3d}  m={entry['m']:3d}  loss {entry['loss']:.3g}  matched RMSE "
                f"{entry['matched_rmse']:.3f} (uniform guess {entry['baseline']['matched_rmse']:.3f})  "
                f"recall@r {entry['recall_at_r']:.2f}  dispersion {entry['dispersion']:.3f}  {entry['time_s']:.1f} s",
                file=sys.stdout,
            )
        sys.stdout.flush()

    def run_with_progress(config, label):
        """One run + its attacks, with a bar over BO rounds, then one over the attacked rounds."""
        bars = {"bo": progress.bar(args.iters, "round", f"PACD-BO run ({label})", args.quiet)}
        on_bo = progress.round_callback(bars["bo"])

        def on_bo_round(done, total):
            on_bo(done, total)
            if done == total:
                bars["bo"].close()
                bars["attack"] = progress.bar(len(args.rounds), "attack", f"DLG attacks ({label})", args.quiet)

        def on_attack(entry):
            show(entry)
            if "attack" in bars:
                bars["attack"].update(1)

        try:
            return leakage.run_leakage(config, args.target_client, args.rounds, cfg, on_round=on_attack, on_bo_round=on_bo_round,
                                         progressive=prog, follow=args.attack_mode == "pursuit-follow")
        finally:
            for b in bars.values():
                b.close()

    docs = [run_with_progress(base, "no DP")]
    if args.dp_sigma > 0:
        if not args.quiet:
            print(f"with DP (sigma={args.dp_sigma:g}, C={args.dp_clip:g}):", flush=True)
        dp_doc = run_with_progress(base.replace(dp_sigma=args.dp_sigma), f"DP sigma={args.dp_sigma:g}")
        doc = {**dp_doc, "no_dp": docs[0]}
        docs.append(dp_doc)
    else:
        doc = docs[0]
    io.write_json(out / "attack.json", doc)
    figures = out / f"leakage.{args.format}", out / f"dispersion_vs_round.{args.format}"
    leakage.plot_leakage(docs, figures[0])
    leakage.plot_dispersion(docs, figures[1])
    if not args.quiet:
        print(f"wrote {out / 'attack.json'}, {figures[0]} and {figures[1]}")
    return 0
