"""The health report (issue 32) rendered in a real headless Chromium.

A table with 50 versions, deletes, a compaction and a branch; ``caslake report
URI --html`` writes the page.  Chromium (Debian's ``chromium``) loads it from
disk with networking off, and

* ``--dump-dom`` of a copy of the page with a measuring script added: every
  chart's SVG is laid out at a real size and holds drawn marks (paths with a
  non-empty bounding box) -- the page itself has no script;
* ``--screenshot``: each chart's region of the picture has ink (PIL, from
  matplotlib's dependencies); the screenshot stays in the test's tmp_path and
  its path is printed.

The figures are checked against the table itself (pyarrow on its files,
counted independently): the live files, the tombstones, the versions.

Chromium missing is a failure (CI installs it, .ci/run); a local run may skip
only when ``CASLAKE_SKIP_BROWSER=1`` says so, and never under ``CI``.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import caslake
from caslake.cli import main

pytest.importorskip("matplotlib", reason="the report extra (matplotlib) is part of dev")

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                  "--mute-audio"]
CHART_IDS = ["versions", "file-sizes", "deleted-share", "counts", "pruning", "requests",
             "maintenance"]
WIDTH = 1000

_MEASURE = """<script>
window.addEventListener("load", () => {
  const out = {};
  for (const fig of document.querySelectorAll("figure.chart")) {
    const svg = fig.querySelector("svg");
    const box = svg ? svg.getBoundingClientRect() : {x: 0, y: 0, width: 0, height: 0};
    let marks = 0;
    for (const p of fig.querySelectorAll("svg path, svg use")) {
      const b = p.getBBox();
      if (b.width > 0 || b.height > 0) marks++;
    }
    out[fig.id] = {x: box.x, y: box.y + window.scrollY, width: box.width,
                   height: box.height, marks: marks};
  }
  const pre = document.createElement("pre");
  pre.id = "measured";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def _chromium() -> str:
    found = shutil.which("chromium") or ("/usr/bin/chromium"
                                         if os.path.exists("/usr/bin/chromium") else None)
    if found:
        return found
    if os.environ.get("CASLAKE_SKIP_BROWSER") == "1" and not os.environ.get("CI"):
        pytest.skip("CASLAKE_SKIP_BROWSER=1: no Chromium here (apt-get install chromium)")
    pytest.fail("Chromium is missing: apt-get install -y chromium (.ci/run does this); "
                "set CASLAKE_SKIP_BROWSER=1 to skip locally")


def _run_chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / f"chromium-profile-{len(list(tmp_path.glob('chromium-*')))}"
    return subprocess.run([_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=120, check=False)


def _build(uri: str) -> caslake.Table:
    """50 versions: appends, deletes, a compaction, more deletes; and a branch."""
    t = caslake.create_table(uri, pa.schema([("id", pa.int64()), ("v", pa.string())]))
    for i in range(40):
        n = 10 + 5 * (i % 7)
        t.append(pa.table({"id": pa.array(range(i * 100, i * 100 + n), pa.int64()),
                           "v": [f"r{i}"] * n}))
    t.delete("id % 9 = 0")
    t.delete("id < 250")
    t.compact()
    for i in range(40, 44):
        t.append(pa.table({"id": pa.array(range(i * 100, i * 100 + 30), pa.int64()),
                           "v": ["late"] * 30}))
    t.delete("id % 4 = 1")
    t.delete("id BETWEEN 4100 AND 4110")
    t.create_branch("dev")
    t.branch("dev").append(pa.table({"id": pa.array([99999], pa.int64()), "v": ["dev"]}))
    while t.refresh().version < 49:
        t.delete(f"id = {t.version}")  # the rest of the 50 versions (0..49)
    assert t.version == 49
    return t


def test_report_renders_every_chart_in_headless_chromium(tmp_path: Path) -> None:
    uri = str(tmp_path / "table")
    t = _build(uri)
    page = tmp_path / "report.html"
    out = io.StringIO()
    assert main(["report", uri, "--html", str(page), "--json"], out=out) == 0
    summary = json.loads(out.getvalue())
    text = page.read_text(encoding="utf-8")

    # Self-contained: no script, no fetch of anything outside the page.
    assert "<script" not in text
    assert not re.search(r"""(?:src|href)\s*=\s*["'](?!data:|#)""", text)
    assert [m for m in re.findall(r'<figure class="chart" id="([^"]+)"', text)] == CHART_IDS

    # The figures agree with the table read independently.
    files = t.live_files()
    assert summary["live_files"] == len(files)
    assert summary["counts"]["versions"] == 50
    assert summary["counts"]["tombstones"] == len(t.snapshot.manifest.tombstones) > 0
    stored = sum(pq.ParquetFile(t.store.local_path(f["path"])).metadata.num_rows
                 for f in files)
    assert stored == t.describe()["stored_rows"]

    measured_page = tmp_path / "measured.html"
    measured_page.write_text(text.replace("</body>", _MEASURE + "</body>"), encoding="utf-8")
    dom = _run_chromium(tmp_path, "--virtual-time-budget=5000", "--dump-dom",
                        measured_page.as_uri())
    found = re.search(r'<pre id="measured">(.*?)</pre>', dom.stdout, re.S)
    assert found, dom.stderr[-2000:]
    boxes = json.loads(found.group(1).replace("&quot;", '"'))
    assert list(boxes) == CHART_IDS
    for cid, box in boxes.items():
        assert box["width"] > 300 and box["height"] > 150, (cid, box)
        assert box["marks"] >= 10, (cid, box)  # axes, ticks, bars/lines: drawn shapes

    height = int(max(b["y"] + b["height"] for b in boxes.values())) + 40
    shot = tmp_path / "report.png"
    res = _run_chromium(tmp_path, f"--window-size={WIDTH},{height}",
                        f"--screenshot={shot}", page.as_uri())
    assert shot.exists() and shot.stat().st_size > 10_000, res.stderr[-2000:]
    print(f"\nhealth report screenshot: {shot}")
    _check_ink(shot, boxes)


def _check_ink(shot: Path, boxes: dict[str, dict[str, float]]) -> None:
    """Each chart's region of the screenshot holds drawing: many non-white pixels
    and several colours (a blank or failed SVG is white)."""
    image_mod = pytest.importorskip("PIL.Image")
    with image_mod.open(shot) as im:
        rgb = im.convert("RGB")
        for cid, box in boxes.items():
            region = rgb.crop((int(box["x"]), int(box["y"]), int(box["x"] + box["width"]),
                               int(box["y"] + box["height"])))
            raw = region.tobytes()
            pixels = [raw[i:i + 3] for i in range(0, len(raw), 3)]
            ink = sum(1 for p in pixels if sum(p) < 600)
            colours = len(set(pixels))
            assert ink > 0.01 * len(pixels) and colours > 8, (cid, ink, colours)


def test_table_report_method_writes_the_same_page(tmp_path: Path) -> None:
    t = caslake.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64())]))
    for i in range(3):
        t.append(pa.table({"id": pa.array([i, i + 10], pa.int64())}))
    t.delete("id = 1")
    health = t.report(tmp_path / "h.html")
    assert health.version == 4 and health.counts["tombstones"] == 1
    assert health.deleted_shares.count(0.5) == 1  # one file of two rows lost one
    assert health.widths["files"]["id"] == pytest.approx(
        sum((hi - lo + 1) / 13 for lo, hi in ((0, 10), (1, 11), (2, 12))) / 3)
    assert (tmp_path / "h.html").read_text().count('<figure class="chart"') == len(CHART_IDS)
