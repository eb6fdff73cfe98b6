"""Plots on kiln's pages: Vega-Lite charts built with altair and rendered to SVG by
vl-convert when the page is written.

Why SVG and not the Vega JavaScript inline: a page is then a static file that needs no
script, no CDN and no network, renders the same in every browser (or a mail client, or
GitHub's file view), and stays a few tens of kilobytes, where every page with the Vega
bundle inline would carry about a megabyte of JavaScript, one copy per published run on
the docs branch. What is lost is interactivity (tooltips, zoom); values a reader needs
are written on the page as tables instead.

altair and vl-convert are imported when a page is drawn, never for the text reports.
"""

from __future__ import annotations

import html
from typing import Any

PAGE_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1040px;color:#222;padding:0 1em}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{padding:2px 10px;border-bottom:1px solid #ddd}
th{text-align:left}td.n{text-align:right;font-variant-numeric:tabular-nums}
h2{font-size:17px;margin-top:2em}h3{font-size:15px}.note{color:#555}
.plot{margin:.5em 0 1em}.plot svg{max-width:100%;height:auto}
.badge{display:inline-block;padding:0 6px;border-radius:3px;background:#eee;font-size:12px}
.frozen-star{background:#fde2c4}nav{margin:1em 0}select{font:inherit}
"""

OUTCOME_COLORS = {"ok": "#2e7d32", "failed": "#c62828", "no record": "#ef6c00"}


def inline_data(rows: list[dict[str, Any]]) -> Any:
    """Rows carried inside the spec (a page has no data files beside it)."""
    import altair as alt

    return alt.Data(values=rows)  # type: ignore[no-untyped-call]


def to_svg(chart: Any) -> str:
    """The chart as an inline ``<svg>`` element (vl-convert's renderer, no script)."""
    import vl_convert

    # validate=False: the specs are built here by code, and altair's JSON-schema check of
    # every nested object cost more than drawing them.
    svg: str = vl_convert.vegalite_to_svg(chart.to_dict(validate=False))
    if svg.startswith("<?xml"):
        svg = svg.split("?>", 1)[1].lstrip()
    return svg


def plot_block(chart: Any, label: str) -> str:
    """A plot in a figure element a test (and a screen reader) can find by its label."""
    return (f'<figure class="plot" role="img" aria-label="{html.escape(label)}">'
            f"{to_svg(chart)}</figure>")


NAV_START, NAV_END = "<!--kiln:nav-->", "<!--/kiln:nav-->"
"""Where a page's navigation goes: publishing puts links between runs there without
drawing the page again."""


def with_nav(page: str, nav: str) -> str:
    """``page`` with its navigation replaced by ``nav``."""
    start, end = page.find(NAV_START), page.find(NAV_END)
    if start < 0 or end < start:
        return page.replace("<body>", f"<body>{NAV_START}{nav}{NAV_END}", 1)
    return page[: start + len(NAV_START)] + nav + page[end:]


def html_page(title: str, body: str, *, head: str = "") -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{PAGE_CSS}</style>{head}</head>"
        f"<body>{body}</body></html>\n"
    )


def html_table(columns: list[str], rows: list[list[str]], numeric: set[str] | None = None,
               row_classes: list[str] | None = None) -> str:
    """A table of already-formatted text (escaped here)."""
    numeric = numeric or set()
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = []
    for index, row in enumerate(rows):
        cls = row_classes[index] if row_classes else ""
        cells = "".join(
            f'<td class="n">{html.escape(v)}</td>' if c in numeric else f"<td>{html.escape(v)}</td>"
            for c, v in zip(columns, row, strict=True)
        )
        body.append(f'<tr class="{cls}">{cells}</tr>' if cls else f"<tr>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"
