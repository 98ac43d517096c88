"""The health report: one self-contained HTML page that draws a table's state.

This module owns gathering a table's health figures from its metadata (never
its data files) and drawing them with matplotlib as inline SVG, so the page
needs no network and no script:

* versions over time, with the rows each commit added and deleted;
* live file sizes as a histogram, with the small-file share (files under half
  the target size: what ``compact`` rewrites);
* the deleted-row share of each live file;
* tombstone, segment and manifest-entry counts;
* how well the summaries prune -- the *width* measure (also in
  ``benchmarks/segment_width.py``): a summary's min..max span of a column over
  the table's whole span; the mean over files or segment objects is the share
  of them a point read on that column must open (lower prunes better);
* write requests and bytes per operation kind, from the history (each commit
  PUTs its data files, tombstones, manifest and pointer);
* what ``compact`` and ``gc`` would do now, from their dry runs (which write,
  commit and delete nothing).

matplotlib is the ``report`` extra (``pip install caslake[report]``); it is
imported only when a report is drawn.  :func:`gather` needs nothing beyond
caslake.
"""

from __future__ import annotations

import base64
import html
import io
import os
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from caslake.core import HistoryEntry, Snapshot, TableContext
from caslake.errors import InvalidArgument
from caslake.format.keys import MANIFEST_PREFIX
from caslake.format.manifest import DataFile
from caslake.ops.compact import plan_compaction
from caslake.ops.gc import RootsProvider, collect_garbage

__all__ = ["Health", "gather", "summary_widths", "write_report"]

#: The figures drawn, in order: (element id, title).
CHARTS: tuple[tuple[str, str], ...] = (
    ("versions", "Versions over time"),
    ("file-sizes", "File sizes"),
    ("deleted-share", "Deleted rows per file"),
    ("counts", "Tombstones and segments"),
    ("pruning", "How well summaries prune"),
    ("requests", "Write requests and bytes per operation"),
    ("maintenance", "What compact and gc would do now"),
)


@dataclass
class Health:
    """The figures of one table version the report draws (see the module docstring)."""

    uri: str
    version: int
    history: list[HistoryEntry]
    file_sizes: list[int]
    deleted_shares: list[float]
    small_file_bytes: int
    counts: dict[str, int]
    widths: dict[str, dict[str, float]]
    requests: dict[str, dict[str, int]]
    compact: dict[str, int]
    gc: dict[str, int]
    notes: list[str] = field(default_factory=list)

    @property
    def small_file_share(self) -> float:
        """The share of live files under half the target file size."""
        if not self.file_sizes:
            return 0.0
        return sum(s < self.small_file_bytes for s in self.file_sizes) / len(self.file_sizes)


def summary_widths(snapshot: Snapshot, files: Sequence[DataFile]) -> dict[str, dict[str, float]]:
    """Mean summary width per numeric column, for ``"files"`` (the manifest's file
    statistics) and ``"segments"`` (segment objects' summaries, when there are any).

    A summary's width is its ``max - min`` span (+1 for integers) over the span of
    the whole table; the mean is the share of summaries a point read on that
    column cannot skip.

    Examples:
        >>> import caslake, pyarrow as pa
        >>> t = caslake.create_table("memory://", pa.schema([("id", pa.int64())]))
        >>> for i in range(4):
        ...     _ = t.append(pa.table({"id": list(range(i * 10, i * 10 + 10))}))
        >>> summary_widths(t.snapshot, t.io.live_files(t.snapshot))["files"]
        {'id': 0.25}
    """
    m = snapshot.manifest
    names = {f.id: f.name for f in m.schema.fields}
    out: dict[str, dict[str, float]] = {}
    for kind, stats in (("files", [f.stats for f in files]),
                        ("segments", [s.stats for s in m.segments
                                      if s.is_object and s.stats is not None])):
        widths = _widths(stats, names)
        if widths:
            out[kind] = widths
    return out


def _widths(stats: Sequence[Any], names: dict[int, str]) -> dict[str, float]:
    spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
    integer: dict[str, bool] = {}
    for entry in stats:
        for fid, s in (entry or {}).items():
            name = names.get(int(fid))
            lo, hi = s.get("min"), s.get("max")
            if name is None or not _is_number(lo) or not _is_number(hi):
                continue
            spans[name].append((float(lo), float(hi)))
            integer[name] = integer.get(name, True) and isinstance(lo, int)
    out: dict[str, float] = {}
    for name, pairs in spans.items():
        step = 1.0 if integer[name] else 0.0
        whole = max(h for _, h in pairs) - min(lo for lo, _ in pairs) + step
        if whole > 0:
            out[name] = statistics.mean((h - lo + step) / whole for lo, h in pairs)
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _manifest_sizes(ctx: TableContext) -> dict[str, int]:
    return {meta.key: meta.size for meta in ctx.store.list(MANIFEST_PREFIX)}


def _requests(history: Sequence[HistoryEntry], sizes: dict[str, int]) -> dict[str, dict[str, int]]:
    """Per operation kind: commits, PUT requests (data files, tombstones, the
    manifest and the pointer) and bytes written (data files and manifest)."""
    out: dict[str, dict[str, int]] = {}
    for e in history:
        row = out.setdefault(e.operation, {"commits": 0, "requests": 0, "bytes": 0})
        row["commits"] += 1
        row["requests"] += e.files_added + e.tombstones_added + 2
        row["bytes"] += int(e.summary.get("added_bytes", 0)) + sizes.get(e.manifest, 0)
    return out


def _compact_dry_run(ctx: TableContext, head: Snapshot, target: int) -> dict[str, int]:
    plan = plan_compaction(ctx, head, target_file_size=target, deleted_fraction=0.1)
    live = head.manifest.totals.files
    if plan is None:
        return {"files to rewrite": 0, "files to drop": 0, "files kept": live}
    return {"files to rewrite": len(plan.rewrite), "files to drop": len(plan.drop),
            "files kept": live - len(plan.removed),
            "bytes to rewrite": sum(f.size for f in plan.rewrite)}


def _gc_dry_run(ctx: TableContext, roots: Sequence[RootsProvider]) -> dict[str, int]:
    report = collect_garbage(ctx, dry_run=True, extra_roots=roots)
    out = {f"{kind} to delete": len(keys) for kind, keys in sorted(report.deleted.items())}
    out["objects to delete"] = report.deleted_count
    out["bytes to delete"] = report.bytes_deleted
    out["versions retained"] = report.retained_versions
    out["unreferenced, too young"] = report.kept_too_young
    return out


def gather(ctx: TableContext, *, target_file_size: int,
           extra_roots: Sequence[RootsProvider] = ()) -> Health:
    """The health figures of the table's latest version (metadata only; the gc
    and compact dry runs write, commit and delete nothing)."""
    head = ctx.io.latest()
    m = head.manifest
    files = ctx.io.live_files(head)
    deleted = m.deleted_rows_per_file()
    history = [HistoryEntry.of(s.manifest, s.key) for s in ctx.io.history(head)]
    history.reverse()  # oldest first
    counts = {"live files": len(files), "tombstones": len(m.tombstones),
              "segment objects": sum(1 for s in m.segments if s.is_object),
              "inline file entries": len(m.files), "removed entries": len(m.removed),
              "versions": len(history)}
    return Health(
        uri=ctx.store.uri, version=head.version, history=history,
        file_sizes=[f.size for f in files],
        deleted_shares=[deleted.get(f.path, 0) / f.row_count if f.row_count else 0.0
                        for f in files],
        small_file_bytes=target_file_size // 2, counts=counts,
        widths=summary_widths(head, files),
        requests=_requests(history, _manifest_sizes(ctx)),
        compact=_compact_dry_run(ctx, head, target_file_size),
        gc=_gc_dry_run(ctx, extra_roots))


# --- drawing -------------------------------------------------------------------------


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise InvalidArgument("the health report draws with matplotlib: "
                              "pip install 'caslake[report]'") from None
    matplotlib.use("svg", force=True)
    matplotlib.rcParams["svg.fonttype"] = "path"  # text as shapes: no font needed
    matplotlib.rcParams["svg.hashsalt"] = "caslake"  # the same ids on every run
    import matplotlib.pyplot as plt

    return plt


def _svg(plt: Any, draw: Callable[[Any], None], *, rows: int = 1, height: float = 3.2) -> str:
    fig, axes = plt.subplots(rows, 1, figsize=(8, height * rows), squeeze=False)
    try:
        draw(axes[:, 0] if rows > 1 else axes[0, 0])
        fig.tight_layout()
        buf = io.StringIO()
        fig.savefig(buf, format="svg")
    finally:
        plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _draw_versions(h: Health) -> Callable[[Any], None]:
    def draw(axes: Any) -> None:
        top, bottom = axes
        times = [e.created_at for e in h.history]
        top.step(times, [e.total_rows for e in h.history], where="post", color="#3465a4")
        top.set_ylabel("live rows")
        top.set_title(f"{len(h.history)} versions, {_span(times)}")
        top.xaxis.set_major_formatter(_time_format())
        versions = [e.version for e in h.history]
        new = [e.rows_added - e.rows_rewritten for e in h.history]
        bottom.bar(versions, new, color="#4e9a06", label="rows added")
        bottom.bar(versions, [e.rows_rewritten for e in h.history], bottom=new,
                   color="#babdb6", label="rows rewritten (compact, purge)")
        bottom.bar(versions, [-e.rows_deleted for e in h.history], color="#cc0000",
                   label="rows deleted")
        bottom.axhline(0, color="black", linewidth=0.5)
        bottom.set_xlabel("version")
        bottom.set_ylabel("rows per commit")
        bottom.legend(loc="upper left", fontsize="small")
    return draw


def _time_format() -> Any:
    from matplotlib.dates import DateFormatter

    return DateFormatter("%H:%M:%S")  # type: ignore[no-untyped-call]  # matplotlib: untyped


def _span(times: Sequence[datetime]) -> str:
    if not times:
        return "no commits"
    return f"{times[0]:%Y-%m-%d %H:%M:%S} to {times[-1]:%Y-%m-%d %H:%M:%S} UTC"


def _draw_sizes(h: Health) -> Callable[[Any], None]:
    def draw(ax: Any) -> None:
        kib = [s / 1024 for s in h.file_sizes] or [0.0]
        ax.hist(kib, bins=min(30, max(5, len(kib))), color="#3465a4", edgecolor="white")
        ax.set_xlabel("file size (KiB)")
        ax.set_ylabel("live files")
        ax.set_title(f"{len(h.file_sizes)} live files; {h.small_file_share:.0%} are small "
                     f"(under {h.small_file_bytes / 2**20:g} MiB)")
    return draw


def _draw_deleted(h: Health) -> Callable[[Any], None]:
    def draw(ax: Any) -> None:
        shares = sorted(h.deleted_shares, reverse=True) or [0.0]
        ax.bar(range(len(shares)), [100 * s for s in shares], color="#cc0000", width=1.0)
        ax.set_ylim(0, 100)
        ax.set_xlabel("live files, most deleted first")
        ax.set_ylabel("rows deleted (%)")
        dirty = sum(s > 0 for s in h.deleted_shares)
        ax.set_title(f"{dirty} of {len(h.deleted_shares)} files have deleted rows")
    return draw


def _draw_bars(values: Mapping[str, int | float], xlabel: str, title: str,
               color: str) -> Callable[[Any], None]:
    def draw(ax: Any) -> None:
        names = list(values)
        ax.barh(names, [values[n] for n in names], color=color)
        for i, n in enumerate(names):
            ax.annotate(f"{values[n]:,.3g}" if isinstance(values[n], float) else
                        f"{values[n]:,}", (values[n], i), xytext=(3, 0),
                        textcoords="offset points", va="center", fontsize="small")
        ax.invert_yaxis()
        ax.set_xlabel(xlabel)
        ax.set_title(title)
    return draw


def _draw_widths(h: Health) -> Callable[[Any], None]:
    values = {f"{col} ({kind})": w for kind, cols in h.widths.items()
              for col, w in sorted(cols.items())}
    if not values:
        values = {"(no numeric column statistics)": 0.0}
    return _draw_bars(values, "mean width: share of summaries a point read opens "
                      "(lower prunes better)", "Summary width per column", "#75507b")


def _draw_requests(h: Health) -> Callable[[Any], None]:
    def draw(axes: Any) -> None:
        left, right = axes
        kinds = sorted(h.requests)
        _draw_bars({k: h.requests[k]["requests"] for k in kinds}, "PUT requests",
                   "Write requests per operation kind", "#f57900")(left)
        _draw_bars({k: h.requests[k]["bytes"] for k in kinds}, "bytes written",
                   "Bytes written per operation kind", "#c17d11")(right)
    return draw


def _draw_maintenance(h: Health) -> Callable[[Any], None]:
    def draw(axes: Any) -> None:
        top, bottom = axes
        compact = {k: v for k, v in h.compact.items() if not k.startswith("bytes")}
        _draw_bars(compact, "files", "compact --dry-run (deleted fraction 0.1)",
                   "#4e9a06")(top)
        gc = {k: v for k, v in h.gc.items() if not k.startswith("bytes")}
        _draw_bars(gc, "objects / versions",
                   f"gc --dry-run (table retention): {h.gc['bytes to delete']:,} bytes "
                   "to delete", "#555753")(bottom)
    return draw


def charts(h: Health) -> list[tuple[str, str, str]]:
    """(id, title, inline SVG) of every chart, in :data:`CHARTS` order."""
    plt = _pyplot()
    drawn = {
        "versions": _svg(plt, _draw_versions(h), rows=2, height=2.6),
        "file-sizes": _svg(plt, _draw_sizes(h)),
        "deleted-share": _svg(plt, _draw_deleted(h)),
        "counts": _svg(plt, _draw_bars(dict(h.counts), "count", "Metadata entries",
                                       "#3465a4")),
        "pruning": _svg(plt, _draw_widths(h)),
        "requests": _svg(plt, _draw_requests(h), rows=2, height=2.4),
        "maintenance": _svg(plt, _draw_maintenance(h), rows=2, height=2.4),
    }
    return [(cid, title, drawn[cid]) for cid, title in CHARTS]


_STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; max-width: 60em; }
figure { margin: 0 0 2em 0; border: 1px solid #ddd; padding: 0.5em; }
figcaption { font-weight: bold; margin-bottom: 0.5em; }
figure svg { width: 100%; height: auto; }
table.facts td { padding: 0 1em 0 0; }
"""


def render_html(h: Health) -> str:
    """The report page: facts, then every chart as inline SVG (no script, no link)."""
    facts = [("table", h.uri), ("version", str(h.version)),
             ("live files", f"{len(h.file_sizes):,}"),
             ("small files", f"{h.small_file_share:.0%}"),
             ("tombstones", f"{h.counts['tombstones']:,}")]
    rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>"
                   for k, v in facts)
    figures = "".join(
        f'<figure class="chart" id="{cid}"><figcaption>{html.escape(title)}</figcaption>'
        f"{svg}</figure>" for cid, title, svg in charts(h))
    notes = "".join(f"<p>{html.escape(n)}</p>" for n in h.notes)
    icon = base64.b64encode(b"<svg xmlns='http://www.w3.org/2000/svg'/>").decode()
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>caslake health: {html.escape(h.uri)}</title>"
            f'<link rel="icon" href="data:image/svg+xml;base64,{icon}">'
            f"<style>{_STYLE}</style></head><body>"
            f"<h1>Table health</h1><table class=\"facts\">{rows}</table>{notes}"
            f"{figures}</body></html>\n")


def write_report(ctx: TableContext, path: str | os.PathLike[str], *, target_file_size: int,
                 extra_roots: Sequence[RootsProvider] = ()) -> Health:
    """Gather the table's health and write the HTML report to ``path``; returns the
    figures drawn."""
    health = gather(ctx, target_file_size=target_file_size, extra_roots=extra_roots)
    page = render_html(health)
    try:
        Path(path).write_text(page, encoding="utf-8")
    except OSError as e:
        raise InvalidArgument(f"cannot write the report to {path}: {e.strerror or e}") from None
    return health

