"""The ``kiln`` command: one module per command family, the options they share in
:mod:`wheelkiln.cli.options`. This module is the only place that turns errors into exit
codes."""

from __future__ import annotations

import importlib
import sys

import click

from wheelkiln import ui
from wheelkiln.cli.options import CONTEXT
from wheelkiln.errors import KilnError

COMMANDS: dict[str, tuple[str, str]] = {
    "recipe": ("wheelkiln.cli.recipe", "recipe"),
    "build": ("wheelkiln.cli.build", "build"),
    "shard": ("wheelkiln.cli.shard", "shard"),
    "link": ("wheelkiln.cli.shard", "link"),
    "shard-plan": ("wheelkiln.cli.shard", "shard_plan"),
    "verify": ("wheelkiln.cli.verify", "verify"),
    "bench": ("wheelkiln.cli.bench", "bench_group"),
    "matrix": ("wheelkiln.cli.matrix", "matrix_command"),
    "ci": ("wheelkiln.cli.matrix", "ci_group"),
    "lint": ("wheelkiln.cli.plan", "lint_command"),
    "plan": ("wheelkiln.cli.plan", "plan_command"),
    "timeline": ("wheelkiln.cli.plan", "timeline_command"),
    "fleet": ("wheelkiln.cli.fleet", "fleet_group"),
    "envs": ("wheelkiln.cli.envs", "envs_group"),
    "wheels": ("wheelkiln.cli.wheels", "wheels_group"),
    "sources": ("wheelkiln.cli.sources", "sources_group"),
    "answers": ("wheelkiln.cli.answers", "answers_group"),
}
"""Each command's name: its module and object in it."""


class _Commands(click.Group):
    """The commands, each imported when it is asked for: a shard or link job starts
    ``kiln`` once per job, and the bench, fleet, plan and matrix modules it never runs
    cost about 0.1 s of that start (``kiln --help`` still imports them all)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, name = COMMANDS[cmd_name]
        command: click.Command = getattr(importlib.import_module(module), name)
        return command


@click.group(cls=_Commands, context_settings=CONTEXT)
@click.version_option(package_name="wheelkiln")
def cli() -> None:
    """wheelkiln: build heavy native Python wheels fast and honestly.

    Every compile goes through a correct compiler cache; one package's compile can be
    sharded across N jobs that hand over a cache, with a link job that must see zero
    misses; and benchmarks report medians with n.
    """


def _exit_with(exc: KilnError) -> None:
    ui.error(exc.message, hint=exc.hint)
    sys.exit(exc.exit_code)


def _silence_stdout() -> None:
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        ui.console.print("[red]aborted[/red]")
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except KilnError as exc:
        _exit_with(exc)
    except BrokenPipeError:
        # The reader of stdout went away (`kiln matrix --json | head`): nothing to say.
        _silence_stdout()
        sys.exit(1)
    except OSError as exc:
        # A file system refusal that no check caught (a disk filling up mid-build, a
        # directory removed under us): name the path, never a traceback.
        from wheelkiln.output_paths import path_error

        _exit_with(path_error(exc))
    except KeyboardInterrupt:
        ui.console.print("[red]interrupted[/red]")
        sys.exit(130)
    except Exception:
        import traceback

        ui.console.print("[red]internal error[/red] (a wheelkiln bug; please report it):")
        ui.console.print(traceback.format_exc(), markup=False)
        sys.exit(70)
