"""``kiln verify``: compare two wheels of the same cell."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape

from wheelkiln import ui
from wheelkiln.cli.options import CONTEXT, emit_json, json_option, summary_table
from wheelkiln.errors import GateError


@click.command(context_settings=CONTEXT)
@click.argument("wheel_a", type=click.Path(path_type=Path))
@click.argument("wheel_b", type=click.Path(path_type=Path))
@json_option("the comparison")
def verify(wheel_a: Path, wheel_b: Path, as_json: bool) -> None:
    """Compare two wheels of the same cell (e.g. sharded and unsharded builds).

    Checks the file lists, every extension module's exported dynamic symbols, and the
    bytes. Objects that differ only in nvcc's per-process temp names are reported as
    their own category, as are objects that differ only in nvcc's per-build module ids
    and what the linker derives from them. Exits non-zero when the wheels are not equivalent.
    """
    from wheelkiln.wheels.compare import compare_wheels

    result = compare_wheels(wheel_a, wheel_b)
    if as_json:
        emit_json(result.as_dict())
    rows = [
        ("A", str(wheel_a)),
        ("B", str(wheel_b)),
        ("files only in A", ", ".join(result.only_in_a) or "none"),
        ("files only in B", ", ".join(result.only_in_b) or "none"),
        ("byte-identical", str(len(result.identical))),
        ("differ only in nvcc's per-build names", ", ".join(result.nvcc_temp_names_only) or "none"),
        ("differ only in debug info", ", ".join(result.debug_info_only) or "none"),
        ("differ", ", ".join(result.differing) or "none"),
        (
            "extension modules",
            f"{result.symbols_checked} checked, "
            f"{len(result.symbol_differences)} with different exported symbols",
        ),
    ]
    ui.console.print(summary_table("kiln verify", rows))
    for name, diff in result.symbol_differences.items():
        ui.info(
            escape(
                f"  {name}: only in A: {', '.join(diff['only_in_a'][:5]) or '-'}; "
                f"only in B: {', '.join(diff['only_in_b'][:5]) or '-'}"
            )
        )
    if not result.equivalent:
        raise GateError(
            "The wheels are not equivalent.",
            hint="Different files or exported symbols mean different builds; differing bytes "
            "with equal symbols can be a non-deterministic toolchain.",
        )
    identical = not (result.nvcc_temp_names_only or result.debug_info_only)
    verdict = "equivalent" + (" (byte-identical)" if identical else "")
    ui.info(f"[green]{verdict}[/green]")
