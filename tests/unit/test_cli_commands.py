"""The ``kiln`` group imports each command's module only when that command runs."""

from __future__ import annotations

import importlib
import subprocess
import sys

import click

from wheelkiln.cli import COMMANDS, cli


def test_every_listed_command_is_the_command_of_that_name() -> None:
    context = click.Context(cli)
    assert cli.list_commands(context) == sorted(COMMANDS)
    for name, (module, attribute) in COMMANDS.items():
        command = cli.get_command(context, name)
        assert command is getattr(importlib.import_module(module), attribute)
        assert command.name == name
    assert cli.get_command(context, "no-such-command") is None


def test_a_job_command_imports_no_other_command_family() -> None:
    """A shard or link job starts ``kiln`` once per job: the bench, fleet, plan and
    matrix modules are no part of it (``select_cell`` is, from wheelkiln.matrix.cells)."""
    code = (
        "import sys, click\n"
        "from wheelkiln.cli import cli\n"
        "for name in ('build', 'shard', 'link'):\n"
        "    cli.get_command(click.Context(cli), name)\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = done.stdout.split()
    assert "wheelkiln.cli.shard" in loaded and "wheelkiln.cli.build" in loaded
    unwanted = ("wheelkiln.cli.bench", "wheelkiln.cli.fleet", "wheelkiln.cli.plan",
                "wheelkiln.cli.matrix", "wheelkiln.bench", "wheelkiln.fleet")
    assert [name for name in loaded if name.startswith(unwanted)] == []
