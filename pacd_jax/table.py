"""``pacd-bo table``: the Table I / Figure 2 grid (paper section IV, DESIGN.md sections 6 and 9).

Runs every (benchmark, method) cell over the same seeds (each cell is one
:func:`pacd_jax.experiment.run`, vectorised over seeds and clients) and
writes, under ``--out DIR``:

* ``cells/BENCHMARK/METHOD/run.json``: each cell's full run document;
* ``table.json``: ``{benchmark: {method: {final_regret_mean, final_regret_std,
  auc_mean, auc_std, seeds, per_seed: [{seed, final_regret, auc}]}}, "meta": {...}}``;
* ``table.md``: Table I's layout (normalised regret on top, AUC over the first
  10% of rounds below, mean ± std over seeds, best per column in bold), then
  each method's final regret against PACD-BO's on the same seeds (paired:
  on how many seeds each is lower, and a Wilcoxon signed-rank p-value; also in
  ``table.json`` as ``vs_pacd`` of each method);
* ``convergence.png``: Figure 2, mean normalised regret vs round with a ±1 std
  band over seeds, one panel per benchmark, one line per method.

Resumable: a cell whose ``run.json`` exists and was made with the same
configuration is not run again, so an interrupted grid continues where it
stopped. Cells run in ``--jobs`` worker processes (one fresh process per cell), each single-threaded
(:data:`WORKER_XLA_FLAGS`, set before JAX is imported; recorded in the meta,
because the thread count changes float32 round-off), so the table does not
depend on ``--jobs``.

This module imports no JAX at import time: workers set their flags first.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

#: XLA flags of every worker process: one thread per cell.
WORKER_XLA_FLAGS = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
#: Table I's column and row order.
DEFAULT_BENCHMARKS = ("sinusoid", "branin", "hartmann6", "wingweight")
DEFAULT_METHODS = ("independent", "pacoh", "pacd", "cboc-u", "cboc-l")
LABELS = {"independent": "Independent", "pacoh": "PACOH-BO", "pacd": "PACD-BO", "cboc-u": "CBOC-U", "cboc-l": "CBOC-L"}
BENCH_LABELS = {"sinusoid": "Sinusoid", "branin": "Branin", "hartmann6": "Hartmann-6", "wingweight": "Wing Weight"}
#: The method the paired comparison of ``table.md`` holds every other method against.
REFERENCE = "pacd"
#: ``accept(benchmark, method, run_doc) -> bool``: whether a cell's ``run.json`` counts.
CellFilter = Callable[[str, str, dict], bool]


def config_dict(config) -> dict:
    """The options that define a cell (``RunConfig.identity``)."""
    return config.identity()


def config_hash(options: dict) -> str:
    """SHA-256 of the canonical JSON of a cell's options."""
    return hashlib.sha256(json.dumps(options, sort_keys=True).encode()).hexdigest()


def cell_path(out: Path, benchmark: str, method: str) -> Path:
    return Path(out) / "cells" / benchmark / method / "run.json"


def made_with(doc, options: dict) -> bool:
    """Whether a cell's ``run.json`` document was made with exactly ``options`` (its recorded config hash)."""
    return isinstance(doc, dict) and doc.get("table_cell", {}).get("config_hash") == config_hash(options)


def cell_done(path: Path, options: dict) -> bool:
    """A finished cell: ``run.json`` readable and made with exactly ``options``."""
    from pacd_jax import io

    try:
        doc = io.read_json(path)
    except (OSError, ValueError):
        return False
    return made_with(doc, options)


def _run_cells(todo: list, jobs: int, xla_flags: str | None):
    """Run cells in up to ``jobs`` worker processes; yield ``(benchmark, method, error)`` as they finish.

    Each cell is a fresh ``python`` subprocess (its own XLA flags, no shared
    state, nothing to deadlock on); on an interrupt every running worker is
    killed and the interrupt re-raised. Finished cells are on disk (atomic writes).
    """
    import subprocess
    import tempfile

    env = dict(os.environ)
    if xla_flags is not None:  # after the caller's own flags, so the worker's win where both set one
        env["XLA_FLAGS"] = " ".join(f for f in (os.environ.get("XLA_FLAGS", "").strip(), xla_flags) if f)
        env.setdefault("OMP_NUM_THREADS", "1")
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    pending, running = list(todo), {}
    try:
        while pending or running:
            while pending and len(running) < jobs:
                options, path = pending.pop(0)
                log = tempfile.TemporaryFile(mode="w+")
                proc = subprocess.Popen(
                    [sys.executable, "-c", "import sys, json; from pacd_jax.table import _worker_main; _worker_main()",
                     json.dumps([options, path])],
                    env=env, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True,
                )
                running[proc] = (options, log)
            time.sleep(0.2)
            for proc in [p for p in running if p.poll() is not None]:
                options, log = running.pop(proc)
                error = None
                if proc.returncode != 0:
                    log.seek(0)
                    lines = [ln for ln in log.read().strip().splitlines() if ln.strip()]
                    error = lines[-1] if lines else f"worker exited with code {proc.returncode}"
                log.close()
                yield options["benchmark"], options["method"], error
    finally:
        for proc, (_, log) in running.items():  # interrupted: stop our own workers
            proc.kill()
            proc.wait()
            log.close()


def _worker_main() -> None:
    """Entry point of a cell worker process: ``[options, path]`` as JSON in argv[1]."""
    options, path = json.loads(sys.argv[1])
    _, _, error = _run_cell((options, path))
    if error is not None:
        print(error, file=sys.stderr)
        sys.exit(1)


def _run_cell(job: tuple[dict, str]) -> tuple[str, str, str | None]:
    """Worker: run one cell from its options and write its ``run.json`` atomically.

    Returns ``(benchmark, method, error)``, ``error`` None on success."""
    options, path = job
    from pacd_jax import experiment, io
    from pacd_jax.config import RunConfig

    try:
        doc = experiment.run(RunConfig.from_dict(options))
    except Exception as exc:  # one failing cell must not stop the grid; it is reported and left missing
        return options["benchmark"], options["method"], f"{type(exc).__name__}: {exc}"
    # what the cell was asked to run (run.json's config also resolves defaults such as init_points)
    doc["table_cell"] = {"config_hash": config_hash(options), "xla_flags": os.environ.get("XLA_FLAGS"), **_provenance()}
    io.write_json(path, doc)
    return options["benchmark"], options["method"], None


def run_grid(
    base,
    benchmarks: Sequence[str],
    methods: Sequence[str],
    out: str | os.PathLike,
    jobs: int = 1,
    progress: bool = True,
    command: str = "",
    xla_flags: str | None = WORKER_XLA_FLAGS,
    on_cell: Callable[[str, str], None] | None = None,
    run_first: Sequence[str] = (),
    fmt: str = "png",
) -> dict:
    """Run (or resume) the grid and write ``table.json``, ``table.md`` and ``convergence.png``.

    Args:
        base: a :class:`~pacd_jax.config.RunConfig` with everything but
            benchmark and method (seeds, iters, clients, settings).
        benchmarks, methods: the grid's columns and rows.
        out: output folder.
        jobs: worker processes (each runs one cell at a time, single-threaded).
        progress: show a progress bar over cells with the time left.
        command: the command line to record in the meta.
        xla_flags: XLA flags of the workers (None: inherit the environment).
        on_cell: called with ``(benchmark, method)`` after each cell finishes.
        run_first: benchmarks whose cells are scheduled first (the table keeps
            the order of ``benchmarks``).
        fmt: format of the figure (``png`` or ``pdf``).

    Returns:
        The ``table.json`` document.
    """
    from tqdm.auto import tqdm

    out = Path(out)
    start = time.perf_counter()
    todo, skipped, failed = [], 0, []
    schedule = [b for b in run_first if b in benchmarks] + [b for b in benchmarks if b not in run_first]
    for bench in schedule:
        for method in methods:
            options = config_dict(base.replace(benchmark=bench, method=method))
            path = cell_path(out, bench, method)
            if cell_done(path, options):
                skipped += 1
            else:
                todo.append((options, str(path)))
    bar = tqdm(total=len(todo), unit="cell", disable=not progress, desc=f"table ({skipped} cell(s) already done)",
               bar_format="{desc}: {n}/{total} cells [{elapsed} elapsed, {remaining} left]")
    if todo:
        previous_term = signal.signal(signal.SIGTERM, _raise_interrupt) if _main_thread() else None
        try:
            for bench, method, error in _run_cells(todo, jobs, xla_flags):
                bar.update(1)
                bar.set_postfix_str(f"{bench}/{method}")
                if error is not None:
                    failed.append(f"{bench}/{method}: {error}")
                    print(f"pacd-bo table: cell {bench}/{method} failed: {error}", file=sys.stderr)
                if on_cell is not None:
                    on_cell(bench, method)
        finally:
            bar.close()
            if previous_term is not None:
                signal.signal(signal.SIGTERM, previous_term)
    else:
        bar.close()
    # only cells made with this grid's settings: a cell whose rerun failed keeps the
    # run.json of other settings on disk, and that must not fill the table
    def current(bench: str, method: str, doc: dict) -> bool:
        return made_with(doc, config_dict(base.replace(benchmark=bench, method=method)))

    return summarise_grid(base, benchmarks, methods, out, command, xla_flags,
                          {"elapsed_s": time.perf_counter() - start, "cells_run": len(todo) - len(failed),
                           "cells_reused": skipped, "failed_cells": failed}, fmt=fmt, accept=current)


def summarise_grid(base, benchmarks, methods, out, command: str, xla_flags: str | None, extra: dict | None = None,
                   more: Sequence[str | os.PathLike] = (), fmt: str = "png", accept: CellFilter | None = None) -> dict:
    """Write ``table.json``, ``table.md`` and ``convergence.png`` into ``out`` from the cells
    present in ``out`` (and in the folders ``more``, whose seeds are added; see :func:`collect`).

    ``accept(benchmark, method, run_doc)``: which cells count (default all); the others are missing.
    """
    out = Path(out)
    sources = [out, *map(Path, more)]
    cells = [c for d in sources for c in _cells(d, benchmarks, methods, accept)]
    doc = collect(sources, benchmarks, methods, accept)
    doc["meta"] = {
        "command": command,
        **_provenance(),
        "wall_time_s": float(sum(c["wall_time_s"] for c in cells)),
        "missing_cells": [f"{b}/{m}" for b in benchmarks for m in methods if m not in doc.get(b, {})],
        "cell_commits": sorted({c.get("table_cell", {}).get("commit", "unknown") for c in cells}),
        "xla_flags": xla_flags,
        "config": {k: v for k, v in config_dict(base).items() if k not in ("benchmark", "method")},
        **(extra or {}),
    }
    if more:
        doc["meta"]["seed_sources"] = [str(d) for d in sources]
    write_outputs(doc, out, benchmarks, methods, sources, fmt, accept)
    return doc


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def _provenance() -> dict:
    from pacd_jax import provenance

    return {"commit": provenance.commit(), "machine": provenance.machine()}


def _cells(out: Path, benchmarks, methods, accept: CellFilter | None = None):
    for bench in benchmarks:
        for method in methods:
            yield from _cell_runs(out, bench, method, accept)


def _dirs(out) -> list[Path]:
    return [Path(o) for o in (out if isinstance(out, (list, tuple)) else [out])]


def _cell_runs(out, bench: str, method: str, accept: CellFilter | None = None) -> list[dict]:
    from pacd_jax import io

    runs = [io.read_json(cell_path(d, bench, method)) for d in _dirs(out) if cell_path(d, bench, method).exists()]
    return [r for r in runs if accept is None or accept(bench, method, r)]


def collect(out, benchmarks: Sequence[str], methods: Sequence[str], accept: CellFilter | None = None) -> dict:
    """``table.json`` body from the cells' ``run.json`` (client-averaged, then over seeds).

    ``out`` is a grid folder or a list of them: a cell's seeds are then the
    union over the folders (the first folder wins for a repeated seed), e.g.
    to add seeds to a finished grid. Cells without a ``run.json`` are left out
    (a partial grid), as are cells ``accept(benchmark, method, run_doc)`` refuses.
    """
    from pacd_jax import metrics

    doc: dict = {}
    for bench in benchmarks:
        doc[bench] = {}
        for method in methods:
            per_seed = {}
            for run in _cell_runs(out, bench, method, accept):
                for r in run["results"]:
                    per_seed.setdefault(r["seed"], {
                        "seed": r["seed"],
                        "final_regret": float(np.mean([c["final_regret"] for c in r["clients"]])),
                        "auc": float(np.mean([c["auc"] for c in r["clients"]])),
                    })
            if not per_seed:
                continue  # a partial grid (see meta.missing_cells)
            rows = [per_seed[s] for s in sorted(per_seed)]
            stats = metrics.summarise(np.array([p["final_regret"] for p in rows]), np.array([p["auc"] for p in rows]))
            doc[bench][method] = {**stats, "seeds": [p["seed"] for p in rows], "per_seed": rows}
        if REFERENCE in doc[bench]:
            for method, entry in doc[bench].items():
                if method != REFERENCE:
                    entry[f"vs_{REFERENCE}"] = paired_comparison(doc[bench][REFERENCE]["per_seed"], entry["per_seed"])
    return doc


def paired_comparison(reference: Sequence[dict], other: Sequence[dict], key: str = "final_regret") -> dict:
    """One method against the reference on the seeds both ran (each seed is a pair).

    The seeds' runs share their tasks and initial designs (DESIGN.md section 4),
    so a paired test is the fair one: how many seeds the reference ends lower /
    higher / level (equal to 1e-12), the median of ``other - reference``, and the
    two-sided Wilcoxon signed-rank p-value over the non-level seeds (exact for
    fewer than 50 pairs without tied magnitudes; 1.0 when every seed is level).
    """
    from scipy import stats

    ref = {r["seed"]: r[key] for r in reference}
    pairs = [(ref[r["seed"]], r[key], r["seed"]) for r in other if r["seed"] in ref]
    diff = np.array([o - a for a, o, _ in pairs], dtype=float)
    level = np.abs(diff) <= 1e-12
    moved = diff[~level]
    p_value = float(stats.wilcoxon(moved).pvalue) if moved.size else 1.0
    return {
        "key": key,
        "seeds": [s for _, _, s in pairs],
        "reference_lower": int(np.sum(moved > 0)),
        "reference_higher": int(np.sum(moved < 0)),
        "level": int(np.sum(level)),
        "median_difference": float(np.median(diff)) if diff.size else float("nan"),
        "p_value": p_value,
    }


def _fmt(mean: float, std: float, bold: bool) -> str:
    text = f"{mean:.4f} ± {std:.4f}"
    return f"**{text}**" if bold else text


def markdown(doc: dict, benchmarks: Sequence[str], methods: Sequence[str]) -> str:
    """Table I: methods as rows, benchmarks as columns; regret block then AUC block.

    Bold: the lowest mean per column (every method that ties it at the 4 shown decimals).
    """
    header = "| Method | " + " | ".join(BENCH_LABELS.get(b, b) for b in benchmarks) + " |"
    rule = "|---|" + "---|" * len(benchmarks)
    lines = []
    for title, key in (("Normalised regret (final)", "final_regret"), ("AUC (first 10% of rounds)", "auc")):
        lines += [f"**{title}**, mean ± std over seeds", "", header, rule]
        best = {b: min((round(doc[b][m][f"{key}_mean"], 4) for m in methods if m in doc.get(b, {})), default=None)
                for b in benchmarks}
        for m in methods:
            cells = [
                _fmt(doc[b][m][f"{key}_mean"], doc[b][m][f"{key}_std"], round(doc[b][m][f"{key}_mean"], 4) == best[b])
                if m in doc.get(b, {}) else "not run"
                for b in benchmarks
            ]
            lines.append(f"| {LABELS.get(m, m)} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += _paired_markdown(doc, benchmarks, methods)
    meta = doc.get("meta")
    if meta:
        cfg = meta.get("config", {})
        counts = {(b, m): len(doc[b][m]["seeds"]) for b in benchmarks for m in methods if m in doc.get(b, {})}
        if len(set(counts.values())) > 1:
            by_method = {m: sorted({tuple(doc[b][m]["seeds"]) for b in benchmarks if m in doc.get(b, {})}) for m in methods}
            lines.append("Seeds per cell differ: " + "; ".join(
                f"{LABELS.get(m, m)} {', '.join(str(list(s)) for s in seeds)}" for m, seeds in by_method.items()) + ".")
            lines.append("")
        if meta.get("missing_cells"):
            lines.append(f"Partial grid: not run yet: {', '.join(meta['missing_cells'])}.")
            lines.append("")
        lines.append(
            f"{len(cfg.get('seeds', []))} seed(s) {cfg.get('seeds')}, {cfg.get('iters')} rounds, "
            f"{cfg.get('num_clients')} clients. Generated by `{meta['command']}`; cells run at commit(s) "
            f"`{', '.join(meta.get('cell_commits', [])) or meta['commit']}`, tables written at `{meta['commit']}` "
            f"on {meta['machine']}; {meta['wall_time_s']:.0f} s of cell compute"
            + (f", {meta['elapsed_s']:.0f} s wall" if "elapsed_s" in meta else "")
            + f" (XLA_FLAGS `{meta['xla_flags']}`)."
        )
    return "\n".join(lines) + "\n"


def _paired_markdown(doc: dict, benchmarks: Sequence[str], methods: Sequence[str]) -> list[str]:
    """The paired block: per method and benchmark, seeds where PACD-BO ends lower / higher, and p."""
    key = f"vs_{REFERENCE}"
    others = [m for m in methods if m != REFERENCE and any(key in doc.get(b, {}).get(m, {}) for b in benchmarks)]
    if not others:
        return []
    ref = LABELS.get(REFERENCE, REFERENCE)
    lines = [
        f"**Paired with {ref}** (final regret on the same seeds): seeds where {ref} ends lower / higher "
        f"(/ level), and the two-sided Wilcoxon signed-rank p-value",
        "",
        "| Method | " + " | ".join(BENCH_LABELS.get(b, b) for b in benchmarks) + " |",
        "|---|" + "---|" * len(benchmarks),
    ]
    for m in others:
        cells = []
        for b in benchmarks:
            c = doc.get(b, {}).get(m, {}).get(key)
            if c is None:
                cells.append("—")
                continue
            level = f" / {c['level']}" if c["level"] else ""
            cells.append(f"{c['reference_lower']} / {c['reference_higher']}{level}, p = {c['p_value']:.2g}")
        lines.append(f"| {LABELS.get(m, m)} | " + " | ".join(cells) + " |")
    return lines + [""]


def plot_grid(out, benchmarks: Sequence[str], methods: Sequence[str], path: str | os.PathLike,
              accept: CellFilter | None = None) -> None:
    """Figure 2: mean client-averaged normalised regret vs round, ±1 std band over seeds."""
    from pacd_jax import io
    from pacd_jax.experiment import regret_curves
    from pacd_jax.plotting import METHOD_COLOURS, METHOD_LABELS, _pyplot

    plt = _pyplot()
    floor = 1e-6  # a log axis cannot show regret 0
    fig, axes = plt.subplots(1, len(benchmarks), figsize=(3.4 * len(benchmarks), 3.0), dpi=150, squeeze=False)
    for ax, bench in zip(axes[0], benchmarks):
        for method in methods:
            runs = _cell_runs(out, bench, method, accept)
            if not runs:
                continue
            curves, seen = [], set()
            for run in runs:  # the union of seeds over folders, as in collect
                keep = [j for j, r in enumerate(run["results"]) if r["seed"] not in seen]
                seen.update(run["results"][j]["seed"] for j in keep)
                curves.append(regret_curves(run)[keep].mean(axis=1))
            per_seed = np.concatenate(curves)  # (S, T+1)
            mean, std = per_seed.mean(axis=0), per_seed.std(axis=0)
            rounds = np.arange(mean.shape[0])
            colour = METHOD_COLOURS.get(method, None)
            ax.plot(rounds, np.maximum(mean, floor), color=colour, lw=1.6, label=METHOD_LABELS.get(method, method))
            ax.fill_between(rounds, np.maximum(mean - std, floor), np.maximum(mean + std, floor), color=colour, alpha=0.15)
        ax.set_yscale("log")
        ax.set_title(BENCH_LABELS.get(bench, bench), fontsize=9)
        ax.set_xlabel("BO round t")
        ax.grid(alpha=0.3, which="both")
    axes[0][0].set_ylabel("normalised regret")
    if any(ax.get_legend_handles_labels()[0] for ax in axes[0]):  # a grid with no finished cell has no lines
        axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fmt = os.path.splitext(str(path))[1].lstrip(".") or "png"
    with io.atomic_path(path) as tmp:
        fig.savefig(tmp, format=fmt)
    plt.close(fig)


def write_outputs(doc: dict, out: Path, benchmarks: Sequence[str], methods: Sequence[str], sources=None, fmt: str = "png",
                  accept: CellFilter | None = None) -> None:
    from pacd_jax import io

    io.write_json(out / "table.json", doc)
    with io.atomic_path(out / "table.md") as tmp:
        tmp.write_text(markdown(doc, benchmarks, methods))
    plot_grid(sources or out, benchmarks, methods, out / f"convergence.{fmt}", accept)


# -- command line ---------------------------------------------------------------------


def _csv(choices: Sequence[str]):
    import argparse

    def parse(text: str) -> list[str]:
        values = [v.strip() for v in text.split(",") if v.strip()]
        if not values:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
        bad = [v for v in values if v not in choices]
        if bad:
            raise argparse.ArgumentTypeError(f"unknown {bad[0]!r}; choose from {', '.join(choices)}")
        if len(set(values)) != len(values):
            raise argparse.ArgumentTypeError(f"repeated entry in {text!r}")
        return values

    return parse


def parse_setting(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` of ``--set`` -> ``(key, value)``: KEY a run option, VALUE parsed as JSON (lists become tuples) or kept as text."""
    import argparse
    import dataclasses

    from pacd_jax.config import RunConfig

    key, sep, value = text.partition("=")
    names = {f.name for f in dataclasses.fields(RunConfig)} - {"benchmark", "method", "seeds", "iters", "num_clients", "backend"}
    if not sep or key not in names:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE with KEY a run option ({', '.join(sorted(names))}), got {text!r}")
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = value
    if isinstance(parsed, list):
        parsed = tuple(parsed)
    return key, parsed


def add_parser(sub) -> None:
    """Register ``pacd-bo table`` on the CLI's subparsers."""
    from pacd_jax.cli import _int_list, _positive_int

    p = sub.add_parser(
        "table",
        help="run the Table I / Figure 2 grid (benchmarks x methods x seeds)",
        description="Run every (benchmark, method) cell over the same seeds; resumable; writes DIR/table.md, "
        "DIR/table.json, DIR/convergence.png and DIR/cells/BENCH/METHOD/run.json.",
    )
    p.add_argument("--benchmarks", type=_csv(DEFAULT_BENCHMARKS), default=list(DEFAULT_BENCHMARKS),
                   help="comma-separated (default: all four)")
    p.add_argument("--methods", type=_csv(DEFAULT_METHODS), default=list(DEFAULT_METHODS),
                   help="comma-separated (default: independent,pacoh,pacd,cboc-u,cboc-l)")
    seeds = p.add_mutually_exclusive_group()
    seeds.add_argument("--seeds", type=_positive_int, default=10, help="run seeds 0..S-1 (default %(default)s)")
    seeds.add_argument("--seed-list", type=_int_list, help="comma-separated seeds")
    p.add_argument("--iters", type=_positive_int, default=100, help="BO rounds T (default %(default)s)")
    p.add_argument("--clients", type=_positive_int, default=5, help="clients N (default %(default)s)")
    p.add_argument("--set", dest="settings", type=parse_setting, action="append", default=[], metavar="KEY=VALUE",
                   help="override a run option of every cell, e.g. --set svgd_steps=20 (repeatable; names as in run.json's config)")
    p.add_argument("--jobs", type=_positive_int, default=1, help="worker processes, one single-threaded cell each (default %(default)s)")
    p.add_argument("--x64", action="store_true", help="compute in float64")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder")
    p.add_argument("--format", choices=("png", "pdf"), default="png", help="figure format (default %(default)s)")
    p.add_argument("--quiet", action="store_true", help="no progress bar or table printout")


def base_config(args):
    from pacd_jax.config import RunConfig, seeds_from_options

    seeds = seeds_from_options(args.seeds, args.seed_list)
    own = {"seeds": "--seeds/--seed-list", "iters": "--iters", "num_clients": "--clients", "x64": "--x64"}
    twice = [f"--set {k} (use {own[k]})" for k in dict(args.settings) if k in own]
    if twice:
        raise ValueError(f"{', '.join(twice)}: these have their own options")
    return RunConfig(seeds=seeds, iters=args.iters, num_clients=args.clients, x64=args.x64, **dict(args.settings))


def cmd_table(args) -> int:
    import shlex

    from pacd_jax import progress
    from pacd_jax.cli import UsageError

    from pacd_jax import io

    out = Path(args.out)
    try:
        io.check_output_folder(out)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    base = base_config(args)
    argv = getattr(args, "argv", None) or []
    command = "pacd-bo " + " ".join(map(shlex.quote, argv))
    doc = run_grid(base, args.benchmarks, args.methods, out, args.jobs,
                   progress=progress.enabled(args.quiet), command=command, fmt=args.format)
    if not args.quiet:
        print(markdown(doc, args.benchmarks, args.methods))
        print(f"wrote {out / 'table.md'}, {out / 'table.json'} and {out / f'convergence.{args.format}'}")
    return 0
