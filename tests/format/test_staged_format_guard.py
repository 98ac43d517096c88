"""The format guard of staged versions (docs/format.md, "Format version rule",
version 6): a manifest with ``transaction`` is written as format_version 6 (the
table's own version kept in ``table_format_version``), so a reader that does not
know multi-table transactions refuses it with UnsupportedFormatVersion instead of
showing a version that may never commit.  Tables without a transaction, and the
versions after one, keep their format version: older readers still read them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import caslake
from benchmarks.multitable import before_multitable
from caslake.errors import UnsupportedFormatVersion
from caslake.format import FORMAT_VERSION
from caslake.format import manifest as manifest_mod
from caslake.format.keys import POINTER_KEY
from caslake.ops.multi import MultiTransaction

SCHEMA = pa.schema([("id", pa.int64())])


def doc(root: Path, key: str) -> dict[str, object]:
    return dict(json.loads((root / key).read_bytes()))


def head_docs(root: Path) -> tuple[dict[str, object], dict[str, object]]:
    """The pointer's JSON and the JSON of the manifest it names."""
    pointer = doc(root, POINTER_KEY)
    return pointer, doc(root, str(pointer["manifest"]))


def staged_pair(tmp_path: Path) -> tuple[caslake.Table, caslake.Table, MultiTransaction]:
    a, b = (caslake.create_table(str(tmp_path / n), SCHEMA) for n in ("a", "b"))
    a.append(pa.table({"id": [1, 2]}, schema=SCHEMA))
    tx = MultiTransaction([a, b], ttl_ms=60_000)
    tx[a].append(pa.table({"id": [3]}, schema=SCHEMA))
    tx[b].append(pa.table({"id": [4]}, schema=SCHEMA))
    tx.stage()  # both staged, the record pending
    return a, b, tx


def test_a_staged_manifest_needs_the_feature_and_the_table_keeps_its_version(
        tmp_path: Path) -> None:
    a, _, tx = staged_pair(tmp_path)
    pointer, staged = head_docs(tmp_path / "a")
    assert staged["transaction"] is not None
    assert (staged["format_version"], staged["table_format_version"]) == (6, 1)
    assert pointer["format_version"] == 1  # the table's version is not raised
    assert caslake.open_table(a.uri).to_arrow().num_rows == 2  # pending: not shown
    tx.decide()
    assert caslake.open_table(a.uri).to_arrow().num_rows == 3  # a reader that knows
    parsed = caslake.open_table(a.uri).snapshot.manifest
    assert parsed.transaction is not None and parsed.format_version == 1
    a.append(pa.table({"id": [5]}, schema=SCHEMA))  # the next version is plain again
    pointer, latest = head_docs(tmp_path / "a")
    assert (pointer["format_version"], latest["format_version"]) == (1, 1)
    assert "table_format_version" not in latest


def test_a_reader_without_the_feature_refuses_a_staged_version(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader that reads up to format 5 for every manifest (what this one was
    before the guard) refuses the staged head, typed; a table with no transaction
    it reads as before."""
    a, b, _ = staged_pair(tmp_path)
    plain = caslake.create_table(str(tmp_path / "plain"), SCHEMA)
    plain.append(pa.table({"id": [7]}, schema=SCHEMA))
    monkeypatch.setattr(manifest_mod, "TXN_FORMAT_VERSION", FORMAT_VERSION)
    for t in (a, b):
        with pytest.raises(UnsupportedFormatVersion, match="format_version 6"):
            caslake.open_table(t.uri)
    assert caslake.open_table(plain.uri).to_arrow()["id"].to_pylist() == [7]


def test_a_manifest_saying_6_without_a_transaction_is_refused(tmp_path: Path) -> None:
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA)
    pointer = doc(tmp_path / "t", POINTER_KEY)
    path = tmp_path / "t" / str(pointer["manifest"])
    m = json.loads(path.read_bytes())
    m["format_version"] = 6
    path.write_text(json.dumps(m))
    with pytest.raises(UnsupportedFormatVersion, match="without a transaction"):
        caslake.open_table(t.uri)


# What the caslake before multi-table transactions shows of each table: its rows,
# or the name of the error it raises.
OLD_READER = """
import json, sys
import caslake
out = {}
for uri in sys.argv[1:]:
    try:
        out[uri] = sorted(caslake.open_table(uri).to_arrow()["id"].to_pylist())
    except Exception as e:
        out[uri] = type(e).__name__
print(json.dumps(out))
"""


def test_the_caslake_before_multi_table_transactions_refuses_a_staged_version(
        tmp_path: Path) -> None:
    """The real older reader (the package before multi-table transactions landed,
    extracted with git archive): a staged head is UnsupportedFormatVersion; a table
    with no transaction, and a table after its transaction was decided and another
    commit landed, read as before."""
    old, why = before_multitable(tmp_path / "before")
    if old is None:
        pytest.skip(f"no older caslake to run: {why}")
    a, b, _ = staged_pair(tmp_path / "staged")
    plain = caslake.create_table(str(tmp_path / "plain"), SCHEMA)
    plain.append(pa.table({"id": [7]}, schema=SCHEMA))
    c, _, tx = staged_pair(tmp_path / "decided")
    tx.decide()
    c.append(pa.table({"id": [9]}, schema=SCHEMA))
    uris = [t.uri for t in (a, b, plain, c)]
    res = subprocess.run([sys.executable, "-c", OLD_READER, *uris], capture_output=True,
                         text=True, env={"PYTHONPATH": str(old), "PATH": "/usr/bin:/bin"},
                         check=False, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    seen = json.loads(res.stdout.strip().splitlines()[-1])
    assert [seen[u] for u in uris] == ["UnsupportedFormatVersion", "UnsupportedFormatVersion",
                                       [7], [1, 2, 3, 9]], seen
