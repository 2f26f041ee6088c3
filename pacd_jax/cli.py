"""The ``pacd-bo`` command line.

Bad input ends with one line on stderr (``pacd-bo: error: ...``) and exit
code 2, never a traceback; outputs are written atomically, so a failed run
leaves no partial files.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path
from typing import Sequence

from pacd_jax.io import error_line

EXIT_USAGE = 2


class UsageError(Exception):
    """Bad input from the command line; printed as one line, exit code 2."""

    def __init__(self, message: str, prog: str = "pacd-bo"):
        super().__init__(message)
        self.prog = prog


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error message instead of usage + message."""

    def error(self, message):  # noqa: D401 - argparse API
        raise UsageError(message, self.prog)


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip() != ""]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError(f"expected at least one integer, got {text!r}")
    return values


def _int_at_least(low: int):
    """argparse type: an integer >= ``low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value

    return parse


_positive_int = _int_at_least(1)
_nonneg_int = _int_at_least(0)


def _float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"must be finite, got {text!r}")
    return value


def _float_pair(text: str) -> list[float]:
    parts = text.split(",")
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"expected MEAN,STD, got {text!r}")
    return [_float(p) for p in parts]


def build_parser() -> argparse.ArgumentParser:
    from pacd_jax.config import BACKENDS, FEATURE_KERNELS, METHODS, OUTPUT_WARPS, TRANSPORTS, RunConfig

    defaults = RunConfig()
    parser = _Parser(prog="pacd-bo", description="Privacy-aware collaborative and distributed Bayesian optimisation.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser(
        "run",
        help="run BO on a benchmark or a custom task family",
        description="Run one method over N clients and S seeds; writes DIR/run.json and DIR/convergence.png.",
    )
    prob = run.add_argument_group("problem")
    prob.add_argument("--benchmark", default=defaults.benchmark, help="task family: sinusoid, branin, hartmann6, wingweight (default %(default)s)")
    prob.add_argument("--task", metavar="MODULE:FACTORY", help="custom task family: FACTORY(num_clients, seed) in MODULE returns a pacd_jax.tasks.TaskFamily (overrides --benchmark)")
    prob.add_argument("--method", choices=METHODS, default=defaults.method, help="default %(default)s")
    prob.add_argument("--clients", type=_positive_int, default=defaults.num_clients, help="number of clients N (default %(default)s)")
    prob.add_argument("--iters", type=_positive_int, default=defaults.iters, help="BO rounds T (default %(default)s)")
    seeds = prob.add_mutually_exclusive_group()
    seeds.add_argument("--seeds", type=_positive_int, default=1, help="run seeds 0..S-1 (default %(default)s)")
    seeds.add_argument("--seed-list", type=_int_list, help="comma-separated seeds, e.g. 3,7")
    prob.add_argument("--init-points", type=_positive_int, help="initial design size per client (default 5 for d<=2, else 10)")
    prob.add_argument("--noise-std", type=_float, help="observation noise std in original units (default: the family's)")
    prob.add_argument("--output-warp", choices=OUTPUT_WARPS, default=defaults.output_warp,
                      help="monotone transform each client applies to its observations before its GP, every method alike "
                           "(default %(default)s; log or a fitted yeo-johnson suit skewed objectives such as Branin)")

    meta = run.add_argument_group("meta-learner (pacd, pacoh)")
    meta.add_argument("--particles", type=_positive_int, default=defaults.num_particles, help="SVGD particles K (default %(default)s)")
    meta.add_argument("--hidden", type=_int_list, default=list(defaults.hidden), help="hidden widths of the mean and feature MLPs (default 32,32)")
    meta.add_argument("--features", type=_positive_int, default=defaults.features, help="kernel feature dimension F (default %(default)s)")
    meta.add_argument("--kernel-variance", type=_float, default=defaults.kernel_variance, help="kernel output scale s (default %(default)s, paper eq. 5)")
    meta.add_argument("--noise-prior", type=_float_pair, default=list(defaults.noise_prior), metavar="MEAN,STD",
                      help="Gaussian hyper-prior of the raw noise, softplus(raw) + floor = noise variance "
                           "(default -4,1; write --noise-prior=-6,1 for a negative mean)")
    meta.add_argument("--noise-floor", type=_float, default=defaults.noise_floor, help="noise variance floor (default %(default)s)")
    meta.add_argument("--input-kernel", action="store_true",
                      help="multiply the feature kernel by an ARD SE kernel on the inputs (learned lengthscales; default off, eq. 5)")
    meta.add_argument("--feature-kernel", choices=FEATURE_KERNELS, default=defaults.feature_kernel,
                      help="stationary kernel on the scaled feature distance (default %(default)s, eq. 5)")
    meta.add_argument("--learn-outputscale", action="store_true",
                      help="learn the kernel output scale per particle, prior log-normal around --kernel-variance (default off, eq. 5)")
    meta.add_argument("--svgd-steps", type=_nonneg_int, default=defaults.svgd_steps, help="SVGD steps per round (default %(default)s)")
    meta.add_argument("--svgd-steps-init", type=_nonneg_int, default=defaults.svgd_steps_init, help="SVGD steps in round 0 (default %(default)s)")
    meta.add_argument("--lr", type=_float, default=defaults.learning_rate, help="Adam learning rate (default %(default)s)")
    meta.add_argument("--prior-factor", type=_float, default=defaults.prior_factor, help="weight of ln P in the score (default %(default)s)")
    meta.add_argument("--meta-lambda", type=_float, help="lambda of eq. 3 (default: N)")

    acq = run.add_argument_group("acquisition")
    acq.add_argument("--kappa", type=_float, default=defaults.kappa, help="UCB exploration weight (default %(default)s)")
    acq.add_argument("--candidates", type=_positive_int, default=defaults.num_candidates, help="random candidates (default %(default)s)")
    acq.add_argument("--local-candidates", type=_nonneg_int, default=defaults.num_local, help="candidates drawn around the best observed point (default %(default)s)")
    acq.add_argument("--refine", type=_positive_int, default=defaults.num_refine, help="candidates refined by gradient (default %(default)s)")
    acq.add_argument("--refine-steps", type=_nonneg_int, default=defaults.refine_steps, help="refinement steps (default %(default)s)")

    ind = run.add_argument_group("independent and CBOC baselines")
    ind.add_argument("--gp-kernel", choices=("matern52", "rbf"), default=defaults.gp_kernel, help="default %(default)s")
    ind.add_argument("--gp-fit-steps", type=_positive_int, default=defaults.gp_fit_steps, help="at most this many L-BFGS steps per GP fit and round; a fit stops earlier once its objective stops decreasing (default %(default)s)")
    ind.add_argument("--consensus-steps", type=_positive_int, help="cboc-u/cboc-l: rounds n_c of the consensus schedule (default: T)")

    priv = run.add_argument_group("differential privacy (pacd, pacoh; paper section VI)")
    priv.add_argument("--dp-sigma", type=_float, default=defaults.dp_sigma,
                      help="noise multiplier sigma: each client clips every per-particle gradient to norm C and adds N(0, sigma^2 (2C)^2 I) before sending; 0 = off (default %(default)s)")
    priv.add_argument("--dp-clip", type=_float, default=defaults.dp_clip, help="clip norm C (default %(default)s; see `pacd-bo gradnorms`)")

    out = run.add_argument_group("execution and output")
    out.add_argument("--backend", choices=BACKENDS, default=defaults.backend,
                     help="vmap: all clients in one process; mpi: under `mpiexec -n N+1`, rank 0 coordinates, ranks 1..N are the clients (default %(default)s)")
    out.add_argument("--transport", choices=TRANSPORTS, default=defaults.transport,
                     help="mpi: how gradients reach rank 0: gather (MPI_Gather, the paper's) or p2p (one direct message per client) (default %(default)s)")
    out.add_argument("--share-results", action="store_true",
                     help="mpi: clients also send their queried points and values to rank 0 at the end (a privacy choice; off: only regret curves and best values)")
    out.add_argument("--comm-log", metavar="FILE", help="mpi: log every message (round, step, sender, receiver, shape, dtype, bytes) as JSON lines")
    out.add_argument("--x64", action="store_true", help="compute in float64")
    out.add_argument("--devices", type=_positive_int, default=defaults.devices,
                     help="vmap, pacd: split the particles of the clients' gradient computation over this many local devices "
                          "(CPU cores or GPUs; K must be a multiple; on a CPU this sets XLA_FLAGS=--xla_force_host_platform_device_count) "
                          "(default %(default)s)")
    spy = run.add_argument_group("interception (paper section V: what an honest-but-curious coordinator records)")
    spy.add_argument("--intercept-client", type=_nonneg_int, help="target client id: the coordinator records its last-step message of each --intercept-rounds round")
    spy.add_argument("--intercept-rounds", type=_int_list, help="comma-separated 0-based rounds to record (needs --intercept-client)")
    spy.add_argument("--intercept-out", metavar="FILE", help="where the records go (.npz; default DIR/intercept.npz)")
    out.add_argument("--out", required=True, metavar="DIR", help="output folder for run.json and the plot")
    out.add_argument("--format", choices=("png", "pdf"), default="png", help="figure format (default %(default)s)")
    out.add_argument("--quiet", action="store_true", help="no progress bar or summary table")
    _add_reliability_arguments(run)

    info = sub.add_parser("info", help="versions, MPI library, devices and precision of this installation",
                          description="Print the versions of pacd-jax and its dependencies, the MPI library, JAX devices and whether float64 is on.")
    info.add_argument("--json", action="store_true", help="print one JSON object instead of aligned lines")

    from pacd_jax import privacy_cli

    privacy_cli.add_parsers(sub)

    from pacd_jax import table

    table.add_parser(sub)

    from pacd_jax import attack_cli

    attack_cli.add_parser(sub, {"positive_int": _positive_int, "nonneg_int": _nonneg_int, "int_list": _int_list, "float": _float})
    return parser


def load_task_factory(spec: str):
    """``'module:factory'`` -> the callable; raises UsageError with the reason."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"--task must look like MODULE:FACTORY, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # let users name a module in the current folder
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # an import error of the user's module is bad input
        raise UsageError(f"cannot import task module {module_name!r}: {exc}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise UsageError(f"{module_name!r} has no callable {attr!r}")
    return factory


def _checked_factory(factory):
    """Report a failing user factory as bad input (the run checks the family it returns)."""

    def wrapped(num_clients, seed):
        try:
            return factory(num_clients, seed)
        except (ValueError, TypeError):
            raise
        except Exception as exc:
            raise ValueError(f"task factory failed: {type(exc).__name__}: {exc}") from None

    return wrapped


def _config_from_args(args):
    from pacd_jax import tasks
    from pacd_jax.config import RunConfig

    if args.task is None and args.benchmark not in tasks.known_families():
        raise UsageError(f"unknown benchmark {args.benchmark!r}; choose one of {', '.join(tasks.known_families())}")
    from pacd_jax.config import seeds_from_options

    seeds = seeds_from_options(args.seeds, args.seed_list)
    return RunConfig(
        benchmark=args.benchmark if args.task is None else args.task,
        method=args.method,
        num_clients=args.clients,
        iters=args.iters,
        seeds=seeds,
        init_points=args.init_points,
        noise_std=args.noise_std,
        output_warp=args.output_warp,
        backend=args.backend,
        transport=args.transport,
        share_results=args.share_results,
        x64=args.x64,
        devices=args.devices,
        num_particles=args.particles,
        hidden=tuple(args.hidden),
        features=args.features,
        kernel_variance=args.kernel_variance,
        noise_prior=tuple(args.noise_prior),
        noise_floor=args.noise_floor,
        input_kernel=args.input_kernel,
        feature_kernel=args.feature_kernel,
        learn_outputscale=args.learn_outputscale,
        svgd_steps=args.svgd_steps,
        svgd_steps_init=args.svgd_steps_init,
        learning_rate=args.lr,
        prior_factor=args.prior_factor,
        meta_lambda=args.meta_lambda,
        kappa=args.kappa,
        num_candidates=args.candidates,
        num_local=args.local_candidates,
        num_refine=args.refine,
        refine_steps=args.refine_steps,
        gp_kernel=args.gp_kernel,
        gp_fit_steps=args.gp_fit_steps,
        dp_sigma=args.dp_sigma,
        dp_clip=args.dp_clip,
        consensus_steps=args.consensus_steps,
        on_bad_value=args.on_bad_value,
    )


def _progress(total_hint: int, quiet: bool):
    """A tqdm bar over rounds (:mod:`pacd_jax.progress`: off when quiet or stderr is not a terminal)."""
    from pacd_jax import progress

    bar = progress.bar(total_hint, "round", "pacd-bo run", quiet)
    return bar, progress.round_callback(bar)


def _print_summary(doc: dict) -> None:
    results = doc["results"]
    n = doc["num_clients"]
    header = "seed  " + "  ".join(f"client{i:<3d}" for i in range(n)) + "  mean"
    print(f"{doc['method']} on {doc['benchmark']}: final normalised regret after {doc['iters']} rounds")
    print(header)
    for r in results:
        vals = [c["final_regret"] for c in r["clients"]]
        print(f"{r['seed']:<5d} " + "  ".join(f"{v:<9.4f}" for v in vals) + f"  {sum(vals) / len(vals):.4f}")
    s = doc["summary"]
    print(
        f"final regret {s['final_regret_mean']:.4f} +- {s['final_regret_std']:.4f}   "
        f"AUC(first 10%) {s['auc_mean']:.4f} +- {s['auc_std']:.4f}   wall {doc['wall_time_s']:.1f} s"
    )


def cmd_run(args) -> int:
    from pacd_jax import experiment, io, plotting

    config = _config_from_args(args)
    factory = _checked_factory(load_task_factory(args.task)) if args.task else None
    out = Path(args.out)
    io.check_output_folder(out)
    if args.checkpoint is not None:
        io.check_output_folder(args.checkpoint, "--checkpoint")
    if args.intercept_out:
        io.check_output_folder(Path(args.intercept_out).parent, "--intercept-out's folder")
    if args.comm_log is not None:
        io.check_output_folder(Path(args.comm_log).parent, "--comm-log's folder")
    if args.comm_log is not None and config.backend != "mpi":
        raise UsageError("--comm-log needs --backend mpi")
    spy = None
    if args.intercept_client is not None or args.intercept_rounds is not None:
        from pacd_jax.intercept import InterceptSpec

        if args.intercept_client is None or args.intercept_rounds is None:
            raise UsageError("interception needs both --intercept-client and --intercept-rounds")
        spy = InterceptSpec(args.intercept_client, tuple(args.intercept_rounds))
        spy.check(config)
        spy = (spy, Path(args.intercept_out) if args.intercept_out else out / "intercept.npz")
    if spy is not None and args.checkpoint is not None:
        raise UsageError("--checkpoint cannot be combined with --intercept-client (an interception run is an experiment, not a campaign)")
    root = config.backend != "mpi" or _world_rank() == 0
    bar, on_round = _progress(config.iters * len(config.seeds), args.quiet or not root)
    try:
        if spy is None:
            doc = experiment.run(config, factory, on_round, args.comm_log, **_checkpoint_kwargs(args))
        elif config.backend == "mpi":
            from pacd_jax.distributed.backend import run as run_mpi

            doc = run_mpi(config, factory, on_round, args.comm_log, intercept=spy)
        else:
            from pacd_jax import intercept

            with jax_x64(config.x64):
                doc = intercept.run_document(config, spy[0], spy[1], factory, on_round)
    finally:
        bar.close()
    if doc is None:  # an MPI client rank: rank 0 writes the outputs
        return 0
    io.write_json(out / "run.json", doc)
    plotting.plot_convergence(doc, out / f"convergence.{args.format}")
    if not args.quiet:
        _print_summary(doc)
        print(f"wrote {out / 'run.json'} and {out / f'convergence.{args.format}'}")
    return 0


def jax_x64(on: bool):
    import contextlib

    import jax

    return jax.enable_x64(True) if on else contextlib.nullcontext()


def _add_reliability_arguments(run) -> None:
    from pacd_jax.config import BAD_VALUE_POLICIES

    rel = run.add_argument_group("reliability (README: Reliability)")
    rel.add_argument("--checkpoint", metavar="DIR", help="save the complete state after every round in DIR (atomically)")
    rel.add_argument("--resume", action="store_true", help="continue from the last complete round saved in --checkpoint DIR")
    rel.add_argument("--on-bad-value", choices=BAD_VALUE_POLICIES, default="stop",
                     help="a NaN/inf objective value: stop (naming client and round) or skip (drop it, record it in run.json) (default %(default)s)")


def _checkpoint_kwargs(args) -> dict:
    if args.resume and args.checkpoint is None:
        raise UsageError("--resume needs --checkpoint DIR")
    if args.checkpoint is None:
        return {}
    return {"checkpoint": args.checkpoint, "resume": args.resume}


def _world_rank() -> int:
    from pacd_jax.distributed.process import world_rank

    return world_rank()


def _prepare_mpi_process(argv) -> None:
    """Before JAX starts: one core per rank (see :mod:`pacd_jax.distributed.process`)."""
    from pacd_jax.distributed.process import pin_one_core_per_rank

    pin_one_core_per_rank(_world_rank())


def cmd_attack(args) -> int:
    from pacd_jax import attack_cli

    return attack_cli.cmd_attack(args, UsageError)


def cmd_table(args) -> int:
    from pacd_jax import table

    return table.cmd_table(args)


def cmd_info(args) -> int:
    import json

    from pacd_jax.info import collect, format_info

    data = collect()
    print(json.dumps(data, indent=2) if args.json else format_info(data))
    return 0


def _privacy_command(name):
    def dispatch(args):
        from pacd_jax import privacy_cli

        return privacy_cli.COMMANDS[name](args)

    return dispatch


COMMANDS = {
    "run": cmd_run,
    "info": cmd_info,
    "epsilon": _privacy_command("epsilon"),
    "gradnorms": _privacy_command("gradnorms"),
    "privacy": _privacy_command("privacy"),
    "table": cmd_table,
    "attack": cmd_attack,
}


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        args.argv = list(sys.argv[1:] if argv is None else argv)
        if getattr(args, "backend", None) == "mpi":
            _prepare_mpi_process(argv)
        if getattr(args, "devices", 1) > 1:  # before JAX starts its CPU backend
            from pacd_jax.sharding import request_host_devices

            request_host_devices(args.devices)
        return COMMANDS[args.command](args)
    except UsageError as exc:
        error_line(f"{exc.prog}: error: {exc}")
        return EXIT_USAGE
    except (ValueError, TypeError) as exc:
        error_line(f"pacd-bo: error: {exc}")
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("pacd-bo: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `pacd-bo info | head`: the reader left, nothing is lost
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # a file or folder that could not be read or written, after the up-front checks
        error_line(f"pacd-bo: error: {exc}")
        return EXIT_USAGE


if __name__ == "__main__":  # pragma: no cover
    # `python -m pacd_jax.cli` runs this file as __main__; the subcommands raise
    # pacd_jax.cli.UsageError, a different class from __main__.UsageError, so
    # dispatch through the imported module or their one-line errors become tracebacks.
    from pacd_jax import cli as _cli

    sys.exit(_cli.main())
