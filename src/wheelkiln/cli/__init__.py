"""The ``kiln`` command: one module per command family, the options they share in
:mod:`wheelkiln.cli.options`. This module is the only place that turns errors into exit
codes."""

from __future__ import annotations

import sys
import traceback

import click

from wheelkiln import ui
from wheelkiln.cli.bench import bench_group
from wheelkiln.cli.build import build
from wheelkiln.cli.fleet import fleet_group
from wheelkiln.cli.matrix import ci_group, matrix_command
from wheelkiln.cli.options import CONTEXT
from wheelkiln.cli.plan import lint_command, plan_command, timeline_command
from wheelkiln.cli.recipe import recipe
from wheelkiln.cli.shard import link, shard, shard_plan
from wheelkiln.cli.verify import verify
from wheelkiln.errors import KilnError


@click.group(context_settings=CONTEXT)
@click.version_option(package_name="wheelkiln")
def cli() -> None:
    """wheelkiln: build heavy native Python wheels fast and honestly.

    Every compile goes through a correct compiler cache; one package's compile can be
    sharded across N jobs that hand over a cache, with a link job that must see zero
    misses; and benchmarks report medians with n.
    """


for _command in (
    recipe,
    build,
    shard,
    link,
    shard_plan,
    verify,
    bench_group,
    matrix_command,
    ci_group,
    lint_command,
    plan_command,
    timeline_command,
    fleet_group,
):
    cli.add_command(_command)


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
        ui.console.print("[red]internal error[/red] (a wheelkiln bug; please report it):")
        ui.console.print(traceback.format_exc(), markup=False)
        sys.exit(70)
