"""``python -m shearbatch run|extract|stats ...``: the three console scripts without them.

Where the package is on ``PYTHONPATH`` but not installed (a GPU node reached with carried
wheels, ``PYTHONPATH=src``), ``bias-run`` / ``bias-extract`` / ``bias-stats`` are not on
the ``PATH``; ``python -m shearbatch run --config ...`` is ``bias-run --config ...``, with
the same options, messages and exit status (the command reports itself as ``bias-run``).
``bias-run``, ``bias-extract`` and ``bias-stats`` are also accepted as subcommands.
"""

from __future__ import annotations

import sys

import click

USAGE = "usage: python -m shearbatch {run,extract,stats} [OPTIONS]  (--help after one: its options)"
HELP = f"""{USAGE}

  run      bias-run: simulate and infer a campaign (stage 1)
  extract  bias-extract: the summary table of a campaign (stage 2)
  stats    bias-stats: m and c, coverage and the verdict (stage 3)
"""

#: subcommand -> (the click command's name in shearbatch.cli, its console-script name)
COMMANDS = {
    "run": ("bias_run", "bias-run"),
    "extract": ("bias_extract", "bias-extract"),
    "stats": ("bias_stats", "bias-stats"),
}


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``argv`` (default ``sys.argv[1:]``) to its command; returns the exit status
    where the command does not exit itself (``--help``, usage errors)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        click.echo(HELP, nl=False, err=not args)
        return 0 if args else 2
    name = args[0].removeprefix("bias-")
    if name not in COMMANDS:
        click.echo(f"Error: no command {args[0]!r}: python -m shearbatch run|extract|stats "
                   "[OPTIONS]", err=True)  # fmt: skip
        return 2
    from . import cli

    attr, prog = COMMANDS[name]
    command = getattr(cli, attr)
    return command.main(args=args[1:], prog_name=prog)  # exits with the command's status


if __name__ == "__main__":
    sys.exit(main())
