"""What every command shares: one-line errors (exit 2), option help ending in its default,
logging set-up and the command line as given."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

__all__ = ["_Command", "_check_out_path", "_example", "_fail", "_given", "_given_args", "_help",
           "_setup_logging", "_write_failed"]  # fmt: skip

logger = logging.getLogger("shearbatch")


# --------------------------------------------------------------------------- click plumbing


def _is_number(tok: str) -> bool:
    try:
        float(tok)
    except ValueError:
        return False
    return True


class _Command(click.Command):
    """A click command with one-line errors (exit 2) and space-separated list options.

    ``variadic`` options (``--shear-grid 0.01 0.02 0.05``) take every following
    token that parses as a number (negative ones too) or a comma-separated list.
    """

    variadic: tuple[str, ...] = ()

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        out: list[str] = []
        i = 0
        while i < len(args):
            tok = args[i]
            name, eq, val = tok.partition("=")
            if name in self.variadic:
                vals = [val] if eq else []
                i += 1
                while not eq and i < len(args) and _is_number(args[i].split(",")[0] or "x"):
                    vals.append(args[i])
                    i += 1
                for v in vals or [""]:
                    for part in v.split(",") if v else [""]:
                        out += [name, part]
                continue
            out.append(tok)
            i += 1
        return super().parse_args(ctx, out)

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, **extra: Any):
        standalone = extra.pop("standalone_mode", True)
        try:
            rv = super().main(args, prog_name, standalone_mode=False, **extra)
        except click.UsageError as err:
            click.echo(f"Error: {err.format_message()}", err=True)
            rv = 2
        except click.ClickException as err:
            click.echo(f"Error: {err.format_message()}", err=True)
            rv = err.exit_code
        except click.Abort:
            click.echo("Aborted.", err=True)
            rv = 1
        if not standalone:
            return rv
        sys.exit(rv or 0)


def _fail(msg: str) -> click.UsageError:
    return click.UsageError(msg)


#: the exit status of a stage whose output could not be written (as bias-run's)
EXIT_WRITE = 4


def _write_failed(err: OSError) -> int:
    """One line on stderr for an output that could not be written (a full disk, a
    read-only directory; the file it would have replaced is kept whole): exit 4."""
    name = err.filename2 or err.filename  # a rename's or link's target, else the file
    where = f"{name}: " if name else "an output: "
    click.echo(f"Error: cannot write {where}{err.strerror or err}", err=True)
    return EXIT_WRITE


def _check_out_path(flag: str, path: Path, *, is_dir: bool = True, write: bool = True) -> None:
    """One line (exit 2) when ``path`` cannot be created/written
    (:func:`shearbatch.app.check_out_path`)."""
    from ..app import PlanError, check_out_path

    try:
        check_out_path(flag, path, is_dir=is_dir, write=write)
    except PlanError as err:
        raise _fail(str(err)) from None


def _setup_logging(verbose: bool = False) -> None:
    level = logging.DEBUG if verbose else logging.INFO
    root = logging.getLogger("shearbatch")
    if not root.handlers:
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(h)
    root.setLevel(level)


def _given(sources: tuple[str, ...] = ("COMMANDLINE",)) -> dict[str, list[str]]:
    """Option name -> its tokens, for the options of this command set from ``sources``
    (click's ``ParameterSource`` names), read from click's context, so it is also right
    when the command runs in-process."""
    from click.core import ParameterSource

    ctx = click.get_current_context()
    out: dict[str, list[str]] = {}
    for p in ctx.command.params:
        if not isinstance(p, click.Option) or p.name is None:
            continue
        if ctx.get_parameter_source(p.name) not in [ParameterSource[s] for s in sources]:
            continue
        val = ctx.params.get(p.name)
        if p.is_flag:
            if val or p.secondary_opts:
                out[p.name] = [p.opts[0] if val or not p.secondary_opts else p.secondary_opts[0]]
        elif p.multiple and p.opts[0] in getattr(ctx.command, "variadic", ()):
            if val:
                out[p.name] = [p.opts[0], *map(str, val)]
        elif p.multiple:  # repeated: --set a=1 --set b=2
            if val:
                out[p.name] = [t for v in val for t in (p.opts[0], str(v))]
        elif val is not None:
            out[p.name] = [p.opts[0], str(val)]
    return out


def _given_args() -> list[str]:
    """This command's line as the user gave it (the options set on the command line)."""
    ctx = click.get_current_context()
    args = [ctx.info_name or ctx.command.name or ""]
    for tokens in _given().values():
        args += tokens
    return args


# --------------------------------------------------------------------------- help texts


def _config_default(key: str) -> Any:
    """The schema's default of a dotted config key (``campaign.batch_size`` -> 16)."""
    from pydantic import BaseModel

    from ..schema import current_config

    model: Any = current_config()  # the inference section with the registered methods
    *parents, last = key.split(".")
    for part in parents:
        model = type(model.model_fields[part].default)
    value = model.model_fields[last].default
    return value.model_dump() if isinstance(value, BaseModel) else value


def _help(text: str, *, default: Any = None, config: str | None = None) -> str:
    """Option help ending in its default, one pattern for every option of every command.

    ``default="1000"`` -> ``[default: 1000]``; ``config="campaign.batch_size"`` ->
    ``[default: from the config: campaign.batch_size (16 if unset)]``, the schema's
    own default, so the help cannot drift from it. New options: pass one of the two.
    """
    if config is not None:
        dflt = _config_default(config)
        unset = "unset" if dflt is None else f"{dflt} if unset"
        if isinstance(dflt, list):
            unset = f"{', '.join(map(str, dflt))} if unset"
        return f"{text} [default: from the config: {config} ({unset})]"
    if default is not None:
        return f"{text} [default: {default}]"
    return text


def _example(*lines: str) -> str:
    """A command's epilog: a worked example, kept verbatim by click (``\\b``)."""
    return "\b\nExample:\n" + "\n".join(f"  {ln}" for ln in lines)
