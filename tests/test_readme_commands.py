"""README.md's commands, checked verbatim so the README cannot drift from the CLI.

Every code block of README.md (fenced or indented) that holds a command line
(``pacd-bo``, ``mpiexec``, ``make``, ``python``, ``source``) must be preceded
by a marker comment saying how it is checked:

* ``<!-- test:run -->``: every command line is parsed (below) and then run
  verbatim with bash in a temporary folder, ``pacd-bo`` being the entry point
  of this environment (its ``bin`` first on PATH); it must exit 0. A comment
  line ``# ...`` right after a command is its expected output: every number in
  it must appear in what the command printed.
* ``<!-- test:parse -->``: every line is parsed only (too slow for CI).
* ``<!-- test:skip REASON -->``: not checked (say why).

Parsing: a complete ``pacd-bo`` line (optionally after ``mpiexec -n N``) goes
through the CLI's own parser (``pacd_jax.cli.build_parser``) and, for ``run``,
through the option checks of ``RunConfig``; with ``mpiexec`` the rank count
must be ``--clients + 1``. A template line (``...``, ``[..]``, ``{a,b}``,
``<..>``, ``A | B``) is checked for its option names only: each ``--flag`` must
be an option of that subcommand. ``python SCRIPT`` lines name an existing
script whose source defines each ``--flag``; ``make T`` lines name a Makefile
target. Inline code spans that start with ``pacd-bo`` or ``python X.py`` are checked the same way
(a bare ``pacd-bo SUB`` mention: the subcommand must exist). The ``make run``
recipe in the Makefile is parsed too.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from pacd_jax import cli

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MARKER = re.compile(r"^<!--\s*test:(run|parse|skip)\b(.*?)-->\s*$")
COMMAND_WORDS = ("pacd-bo", "mpiexec", "make", "python", "source")
TEMPLATE = re.compile(r"\.\.\.|[\[\]{}<>|]")
RUN_TIMEOUT_S = 180


@dataclass
class Command:
    line: int  # README line number (1-based) of the command's first line
    text: str  # continuation lines joined
    expected: list[str]  # expected-output comment lines after it
    mode: str  # run | parse | skip


@dataclass
class Block:
    line: int
    lines: list[str]
    mode: str | None
    fenced_info: str | None


def readme_blocks(text: str) -> list[Block]:
    """Fenced and indented code blocks of a markdown text, with the marker before each."""
    lines = text.splitlines()
    blocks, i = [], 0

    def marker_before(j):
        k = j - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        m = MARKER.match(lines[k].strip()) if k >= 0 else None
        return m.group(1) if m else None

    while i < len(lines):
        ln = lines[i]
        if ln.startswith("```"):
            info = ln[3:].strip()
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            blocks.append(Block(i + 2, lines[i + 1 : j], marker_before(i), info))
            i = j + 1
            continue
        if ln.startswith("    ") and ln.strip() and (i == 0 or not lines[i - 1].strip()):
            j = i
            while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
                j += 1
            while j > i and not lines[j - 1].strip():
                j -= 1
            blocks.append(Block(i + 1, [b[4:] for b in lines[i:j]], marker_before(i), None))
            i = j
            continue
        i += 1
    return blocks


def is_command(line: str) -> bool:
    words = line.strip().split()
    return bool(words) and words[0] in COMMAND_WORDS


def block_commands(block: Block) -> list[Command]:
    """Command lines of a block, continuation lines joined; ``# ...`` lines after one are its output."""
    out: list[Command] = []
    i = 0
    while i < len(block.lines):
        raw = block.lines[i]
        if is_command(raw):
            start, text = i, raw.rstrip()
            while text.endswith("\\") and i + 1 < len(block.lines):
                i += 1
                text = text[:-1].rstrip() + " " + block.lines[i].strip()
            out.append(Command(block.line + start, text.strip(), [], block.mode or "unmarked"))
        elif raw.strip().startswith("#") and out:
            out[-1].expected.append(raw.strip().lstrip("#").strip())
        i += 1
    return out


def inline_commands(text: str) -> list[Command]:
    """Inline code spans that start with ``pacd-bo`` or ``python X.py`` (outside code blocks), whitespace normalised."""
    prose = text
    for m in re.finditer(r"^```.*?^```", text, flags=re.S | re.M):
        prose = prose.replace(m.group(0), "\n" * m.group(0).count("\n"))
    found = []
    for m in re.finditer(r"(?<!`)`((?:pacd-bo\b|python \S+\.py\b)[^`]*)`(?!`)", prose, flags=re.S):
        text = " ".join(m.group(1).split())
        if re.match(r"pacd-bo [a-z]|python", text):  # not the bare name or a message such as `pacd-bo [rank r]: error: ...`
            found.append(Command(prose.count("\n", 0, m.start()) + 1, text, [], "inline"))
    return found


# -- the checker -------------------------------------------------------------------------


def _subparsers(parser):
    (action,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    return action.choices


def _flag_names(tokens: list[str]) -> list[str]:
    flags = []
    for tok in tokens:
        for part in re.split(r"[\[\]{}|]", tok):
            if part.startswith("--"):
                flags.append(part.split("=")[0])
    return flags


def check_pacd_bo(tokens: list[str], ranks: int | None = None, fragment: bool = False) -> None:
    """Raise AssertionError (with the reason) if ``pacd-bo`` argv ``tokens[1:]`` does not parse.

    ``fragment``: an inline mention that may leave out required options (``--out``); they are filled in.
    """
    assert tokens[0] == "pacd-bo", tokens
    parser = cli.build_parser()
    subs = _subparsers(parser)
    text = " ".join(tokens)
    if len(tokens) < 2 or tokens[1] not in subs:
        raise AssertionError(f"unknown subcommand in {text!r} (known: {', '.join(subs)})")
    sub = subs[tokens[1]]
    if len(tokens) == 2 and sub._actions and any(a.required for a in sub._actions):
        return  # a mention of the subcommand, not a command line
    if TEMPLATE.search(" ".join(tokens[2:])) or "--help" in tokens:
        unknown = [f for f in _flag_names(tokens[2:]) if f not in sub._option_string_actions]
        assert not unknown, f"{text!r}: no such option(s) of `pacd-bo {tokens[1]}`: {unknown}"
        return
    argv = tokens[1:]
    if fragment:
        required = [a.option_strings[0] for a in sub._actions if a.required and a.option_strings]
        argv += [x for flag in required if flag not in argv for x in (flag, "_")]
    try:
        args = parser.parse_args(argv)
        if args.command == "run":
            config = cli._config_from_args(args)
            if ranks is not None:
                assert config.backend == "mpi", f"{text!r}: mpiexec without --backend mpi"
                assert ranks == config.num_clients + 1, f"{text!r}: mpiexec -n {ranks} but {config.num_clients} clients need {config.num_clients + 1}"
        elif args.command == "table":
            from pacd_jax import table

            table.base_config(args)
    except cli.UsageError as exc:
        raise AssertionError(f"{text!r}: {exc}") from None
    except (ValueError, TypeError) as exc:
        raise AssertionError(f"{text!r}: {exc}") from None


def check_line(text: str, fragment: bool = False) -> None:
    """Check one command line (see the module docstring); ``fragment``: an inline mention."""
    tokens = shlex.split(text, comments=True)
    word = tokens[0]
    if word == "pacd-bo":
        check_pacd_bo(tokens, fragment=fragment)
    elif word == "mpiexec":
        rest = tokens[1:]
        ranks = None
        if rest[:1] == ["-n"]:
            ranks = None if TEMPLATE.search(rest[1]) else int(rest[1])
            rest = rest[2:]
        assert rest and rest[0] == "pacd-bo", f"{text!r}: mpiexec of something other than pacd-bo"
        check_pacd_bo(rest, ranks)
    elif word == "python":
        script = ROOT / tokens[1]
        assert script.is_file(), f"{text!r}: no script {tokens[1]}"
        source = script.read_text()
        missing = [f for f in _flag_names(tokens[2:]) if f'"{f}"' not in source]
        assert not missing, f"{text!r}: {tokens[1]} defines no option(s) {missing}"
    elif word == "make":
        makefile = (ROOT / "Makefile").read_text()
        for target in tokens[1:]:
            assert re.search(rf"^{re.escape(target)}:", makefile, flags=re.M), f"{text!r}: no Makefile target {target}"
    elif word == "source":
        pass  # activating the environment: nothing to parse
    else:  # pragma: no cover - is_command filters
        raise AssertionError(f"unexpected command {text!r}")


README_TEXT = README.read_text()
BLOCKS = readme_blocks(README_TEXT)
COMMANDS = [c for b in BLOCKS for c in block_commands(b)]
RUN = [c for c in COMMANDS if c.mode == "run" and c.text.split()[0] != "source"]


def test_every_block_with_commands_is_marked():
    unmarked = [f"README.md:{c.line}: {c.text}" for c in COMMANDS if c.mode == "unmarked"]
    assert not unmarked, "mark these blocks with <!-- test:run|parse|skip ... -->:\n" + "\n".join(unmarked)
    assert len([c for c in COMMANDS if c.mode in ("run", "parse")]) >= 10
    assert len(RUN) >= 3


def test_every_pacd_bo_line_in_the_readme_parses():
    failures = []
    checked = 0
    for c in COMMANDS + inline_commands(README_TEXT):
        if c.mode == "skip":
            assert "pacd-bo" not in c.text, f"README.md:{c.line}: a pacd-bo line cannot be skipped: {c.text}"
            continue
        try:
            check_line(c.text, fragment=c.mode == "inline")
            checked += 1
        except AssertionError as exc:
            failures.append(f"README.md:{c.line}: {exc}")
    assert not failures, "\n".join(failures)
    assert checked >= 20


def test_notebook_commands_parse():
    """Command lines in the notebooks' markdown cells (and notebooks/README.md) parse too."""
    import json

    texts = [(p.name, "\n\n".join("".join(c["source"]) for c in json.loads(p.read_text())["cells"] if c["cell_type"] == "markdown"))
             for p in sorted((ROOT / "notebooks").glob("*.ipynb"))]
    texts.append(("notebooks/README.md", (ROOT / "notebooks" / "README.md").read_text()))
    failures, checked = [], 0
    for name, text in texts:
        for block in readme_blocks(text):
            for c in block_commands(block):
                if c.text.split()[0] in ("pacd-bo", "mpiexec"):
                    try:
                        check_line(c.text)
                        checked += 1
                    except AssertionError as exc:
                        failures.append(f"{name}: {exc}")
    assert not failures, "\n".join(failures)
    assert checked >= 3


def test_the_makefile_run_recipe_parses():
    makefile = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    (recipe,) = re.findall(r"^\t\$\(BIN\)/(pacd-bo run .*)$", makefile, flags=re.M)
    values = dict(re.findall(r"^(\w+) \?= (.*)$", makefile, flags=re.M))
    recipe = re.sub(r"\$\((\w+)\)", lambda m: values[m.group(1)], recipe)
    check_pacd_bo(shlex.split(recipe))


def test_the_checker_can_fail():
    """A renamed flag, a wrong rank count, a bad value and an unknown script option are all caught."""
    bad = [
        "pacd-bo run --benchmrk branin --out x",
        "pacd-bo run --clients 0 --out x",
        "pacd-bo run --method pacd --kappa nan --out x",
        "mpiexec -n 5 pacd-bo run --backend mpi --out x",
        "pacd-bo table ... --sett svgd_steps=20",
        "pacd-bo attack --rounds 1 [--dp-sigmas S] --out DIR",
        "pacd-bo nosuch --out x",
        "python benchmarks/table1.py --no-such-flag",
        "make nosuchtarget",
    ]
    for text in bad:
        with pytest.raises(AssertionError):
            check_line(text)
    for text in ["pacd-bo run --out x", "mpiexec -n 6 pacd-bo run --backend mpi --out x", "pacd-bo table ... --set kappa=1.0"]:
        check_line(text)
    blocks = readme_blocks("text\n\n<!-- test:run -->\n```bash\npacd-bo a \\\n  --b 1\n# 3.5\n```\n\n    make run\n")
    assert [b.mode for b in blocks] == ["run", None]
    (cmd,) = block_commands(blocks[0])
    assert cmd.text == "pacd-bo a --b 1" and cmd.expected == ["3.5"] and cmd.line == 5


def _numbers(text: str) -> list[str]:
    return re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?:e-?\d+)?", text)


@pytest.mark.parametrize("command", RUN, ids=[f"L{c.line}-{c.text.split()[1]}" for c in RUN])
def test_readme_command_runs_verbatim(command, tmp_path):
    check_line(command.text)
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["XLA_FLAGS"] = env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    proc = subprocess.run(["bash", "-c", command.text], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S)
    assert proc.returncode == 0, f"README.md:{command.line}: {command.text}\n{proc.stderr[-2000:]}"
    for expected in command.expected:
        missing = [n for n in _numbers(expected) if n not in _numbers(proc.stdout)]
        assert not missing, f"README.md:{command.line}: output lacks {missing} of {expected!r}:\n{proc.stdout}"
