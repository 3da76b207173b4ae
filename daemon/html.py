"""The HTML the HTTP listener's pages share (the status page,
``daemon/status.py``; its history charts, ``daemon/charts.py``; the search
and its bulk actions, ``daemon/search.py``): the escaping of every text that
comes from outside, numbers as people read them, the style sheet and the
frame of a page.  Plain functions of their arguments: the pages are written
in a worker thread.
"""

from __future__ import annotations

import html

VIEWPORT = '<meta name="viewport" content="width=device-width, initial-scale=1">'


def esc(value) -> str:
    """``value`` as text safe in an element or a quoted attribute."""
    return html.escape(str(value), quote=True)


def text(b: bytes) -> str:
    """Bytes from outside (a queue name, a payload) as text; what is not UTF-8 shows as U+FFFD."""
    return b.decode(errors="replace")


def cut(data: bytes | None, limit: int) -> str:
    """The start of ``data``, at most ``limit`` bytes, as text, with " …"
    when there was more; the rest is dropped before it is decoded (a client
    may send megabytes)."""
    if not data:
        return ""
    shown = text(data[:limit])
    return shown + " …" if len(data) > limit else shown


def duration(ms: float) -> str:
    """"250 ms", "1.5 s", "3 min 20 s", "2 h 5 min", "1 d 4 h"."""
    seconds = ms / 1000
    if seconds < 1:
        return f"{ms:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, hours, days = int(seconds // 60), int(seconds // 3600), int(seconds // 86400)
    if hours < 1:
        return f"{minutes} min {int(seconds % 60)} s"
    if days < 1:
        return f"{hours} h {minutes % 60} min"
    return f"{days} d {hours % 24} h"


def ago(unix_seconds: float, now: float) -> str:
    """"2.5 s ago" from ``now`` (both unix seconds); "never" for 0."""
    if not unix_seconds:
        return "never"
    return f"{duration(max(0.0, now - unix_seconds) * 1000)} ago"


# -- the page -------------------------------------------------------------------------------------

# Every page's style sheet; a page adds its own after it (charts.CSS, search.SEARCH_CSS).
CSS = """
:root { --fg: #1f2328; --muted: #656d76; --faint: #b1bac4; --line: #d8dee4; --band: #f6f8fa;
        --ok: #1a7f37; --ok-bg: #dafbe1; --warn: #9a6700; --warn-bg: #fff8c5; --bad: #cf222e; --bad-bg: #ffebe9; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--fg); background: #fff;
       font: 14px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
header { display: flex; flex-wrap: wrap; align-items: center; gap: 6px 20px; padding: 10px 24px;
         background: var(--band); border-bottom: 1px solid var(--line); }
h1 { margin: 0; font-size: 19px; letter-spacing: .01em; }
.state { padding: 1px 9px; border-radius: 10px; font-size: 12px; font-weight: 600; letter-spacing: .04em;
         text-transform: uppercase; }
.ok { color: var(--ok); background: var(--ok-bg); }
.warn { color: var(--warn); background: var(--warn-bg); }
.bad { color: var(--bad); background: var(--bad-bg); }
.facts { display: flex; flex-wrap: wrap; gap: 4px 18px; margin: 0; padding: 0; list-style: none; color: var(--muted); }
.facts b { color: var(--fg); font-weight: 600; }
.alert { margin: 14px 24px 0; padding: 8px 12px; border-radius: 6px; }
main { padding: 4px 24px 8px; }
h2 { margin: 16px 0 6px; font-size: 12px; font-weight: 600; letter-spacing: .07em; text-transform: uppercase;
     color: var(--muted); }
h2 .count { margin-left: 8px; color: var(--faint); font-weight: 400; letter-spacing: 0; text-transform: none; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
th, td { padding: 3px 12px; border-bottom: 1px solid var(--line); text-align: left; white-space: nowrap;
         vertical-align: baseline; }
th { font-size: 12px; font-weight: 600; color: var(--muted); background: var(--band); }
th:first-child, td:first-child { padding-left: 8px; }
tbody tr:hover { background: #f6f8fa; }
.n { text-align: right; }
td.zero { color: var(--faint); }
td.dead { color: var(--bad); font-weight: 600; }
.mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace; font-size: 13px; }
td.name { white-space: normal; overflow-wrap: anywhere; min-width: 12ch; max-width: 40ch; }
td.flow { white-space: normal; min-width: 16ch; max-width: 48ch; color: var(--muted); }
td.flow.held { color: var(--warn); }
td.error { white-space: normal; overflow-wrap: anywhere; min-width: 30ch; max-width: 70ch; color: #57606a; }
.durability { color: var(--muted); }
.columns { display: flex; flex-wrap: wrap; gap: 16px 56px; }
dl { display: grid; grid-template-columns: max-content auto; gap: 2px 18px; margin: 0; }
dt { color: var(--muted); }
dd { margin: 0; font-variant-numeric: tabular-nums; }
h3 { margin: 0 0 4px; font-size: 13px; }
.note, footer { color: var(--muted); font-size: 12px; }
.note { margin: 6px 0 0; }
footer { padding: 10px 24px 14px; }
form.act { display: inline; margin: 0 4px 0 0; }
form.act button { font: inherit; font-size: 12px; padding: 1px 8px; border: 1px solid var(--line); border-radius: 5px;
                  background: #fff; color: var(--fg); cursor: pointer; }
form.act button:hover { background: var(--band); border-color: var(--faint); }
form.act button.danger { color: var(--bad); }
form.act button:disabled { color: var(--faint); background: none; border-style: dashed; cursor: not-allowed; }
td.acts { white-space: nowrap; }
td.progress { white-space: normal; overflow-wrap: anywhere; max-width: 40ch; }
"""


def document(title: str, css: str, body: str, head: str = VIEWPORT) -> str:
    """A whole page: ``head``'s tags (the viewport's unless told), the title
    "leaseq: ``title``", the shared ``CSS`` and then the page's own ``css``,
    and ``body``; it loads nothing from anywhere else."""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">{head}'
            f"<title>leaseq: {esc(title)}</title><style>{CSS}{css}</style></head><body>{body}</body></html>\n")


def header(word: str, css_class: str, facts=(), linked: bool = False) -> str:
    """The band at the top: "leaseq" (a link to the status page when
    ``linked``), the state ``word`` in ``css_class``'s colours, and the
    ``(name, value)`` facts."""
    name = '<a href="/" style="color:inherit;text-decoration:none">leaseq</a>' if linked else "leaseq"
    items = "".join(f"<li>{esc(k)} <b>{esc(v)}</b></li>" for k, v in facts)
    return (f'<header><h1>{name}</h1><span class="state {css_class}">{esc(word)}</span>'
            + (f'<ul class="facts">{items}</ul>' if facts else "") + "</header>")
