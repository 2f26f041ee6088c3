"""Progress bars of the long commands (``run``, ``table``, ``attack``, ``gradnorms``).

One rule for every command: a tqdm bar on stderr with what is done, the
elapsed time and the time left, shown only when stderr is a terminal, the
user did not pass ``--quiet``, and the process is the one that reports (rank
0 of an MPI job). A bar that is off costs nothing and prints nothing, so
output piped to a file or a CI log stays clean.
"""

from __future__ import annotations

import sys

#: tqdm's layout: count, total, elapsed and time left (``<`` reads "left").
BAR_FORMAT = "{desc}: {n_fmt}/{total_fmt} {unit}s [{elapsed} elapsed, {remaining} left]{postfix}"


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def enabled(quiet: bool, root: bool = True, stream=None) -> bool:
    """Whether to show a bar: not ``quiet``, on the reporting process, and ``stream`` (stderr) a terminal."""
    return not quiet and root and _isatty(sys.stderr if stream is None else stream)


def bar(total: int, unit: str, desc: str, quiet: bool, root: bool = True):
    """A tqdm bar over ``total`` units (disabled per :func:`enabled`); close it when done."""
    from tqdm.auto import tqdm

    # every update is drawn (no rate limit): updates come once per round or attack, seconds apart
    return tqdm(total=total, unit=unit, desc=desc, disable=not enabled(quiet, root), leave=False,
                bar_format=BAR_FORMAT, file=sys.stderr, mininterval=0, miniters=1)


def round_callback(progress_bar):
    """``on_round(done, total)`` for the backends' round hooks: moves ``progress_bar`` to ``done`` of ``total``."""

    def on_round(done, total):
        if progress_bar.total != total:
            progress_bar.total = total
        progress_bar.update(done - progress_bar.n)

    return on_round
