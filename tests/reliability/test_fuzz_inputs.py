"""Fuzzing what caslake reads from storage: metadata parsers, key safety, damaged data files.

Contract under test (docs/format.md): anything that does not match the format
is rejected with :class:`~caslake.errors.CorruptMetadata` (or its subclass
``UnsupportedFormatVersion``) whose ``key`` is the object's key; a read of a
damaged table returns the correct rows or raises a typed ``CaslakeError`` that
names the damaged object -- never another exception type, never a hang, never
a wrong answer.

1. **Parsers** (``parse_pointer``, ``parse_manifest``, ``parse_tombstone``, the
   segment object reader ``caslake.format.segment.SegmentFile`` and the Parquet
   footer check ``caslake.format.parquet.check_footer``), with Hypothesis:
   random bytes; real documents taken from a real table (a pointer, a manifest
   with segments, ancestors, tombstones and stats, a segment object, tombstones
   with positions, whole row groups and key ranges, a Parquet footer) mutated
   structurally (delete fields, change types, huge and negative numbers, wrong
   nesting, extra fields, string edits) and at the byte level (bit flips,
   truncation, insertion); tombstone headers and bitmaps mutated and re-framed
   with a valid CRC so the checks behind the CRC run.
2. **Key safety**: every key field a manifest, pointer or tombstone holds, set
   to ``..`` paths, absolute paths, ``s3://other-bucket/...``, backslashes,
   empty segments and the like -> ``CorruptMetadata``; random key text is
   either rejected or is a well-formed relative key.
3. **End to end**: mutated manifests and tombstones installed in a real table
   and read through ``open_table``/``scan``/``history``.
4. **Damaged data files** on real local tables whose directory names hold
   spaces, unicode and ``=``: truncated, deleted, replaced by another valid
   Parquet file of a different size, overwritten with garbage of the same size
   (ETag kept), single bit flips in column chunks and footers (ETag kept, as
   bit rot would; run in worker processes, because a flipped footer can abort
   the reading process); and a replaced object on moto S3.

Every finding these tests made was fixed, and each keeps a minimal reproduction
below ("findings, fixed"): JSON integers past Python's digit limit, a tombstone
``key_ranges`` that is not a list, sizes and key-range bounds outside 64-bit
range, percent-encoded ``file://`` URIs, bit flips in data pages (now page
CRCs), in footers (now a footer CRC-32 in the manifest, checked before pyarrow
parses the footer: some damaged footers abort the process inside pyarrow),
non-UTF-8 footers, row-group counts that do not add up, and type mismatches
not naming the file.  The number of fuzz cases per test is printed at the end
of the module.
"""

from __future__ import annotations

import copy
import json
import os
import random
import re
import struct
import subprocess
import sys
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import caslake
from caslake.core import WriteOptions
from caslake.errors import CaslakeError, CorruptMetadata
from caslake.format.keys import POINTER_KEY
from caslake.format.manifest import DataFile, parse_manifest, parse_pointer, segment_ref_check
from caslake.format.parquet import (
    FooterInfo,
    check_footer,
    footer_size_from_trailer,
    parse_footer,
)
from caslake.format.segment import SegmentFile
from caslake.format.tombstone import parse_tombstone

pytestmark = pytest.mark.timeout(300)

CASES: Counter[str] = Counter()  # fuzz cases tried, per test
OUTCOMES: Counter[str] = Counter()  # what they ended in
SILENT: list[str] = []  # damaged data files read back as wrong rows without an error
CRASHES: list[str] = []  # damaged data files that killed the reading process
FUZZ = settings(deadline=timedelta(seconds=5), database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def fuzz(examples: int, *, io: bool = False) -> settings:
    """The module's Hypothesis settings with ``examples`` cases.  A per-case deadline
    catches hangs in the pure parsers; cases that do I/O on a real table rely on the
    test timeout instead (a loaded machine must not make them flaky)."""
    return settings(FUZZ, max_examples=examples, deadline=None if io else FUZZ.deadline)

def classify(case: str, fn: Callable[[], object], key: str) -> str:
    """Run one parse; return "parsed" or "corrupt"; fail on anything else."""
    CASES[case] += 1
    try:
        fn()
    except CorruptMetadata as e:
        assert e.key == key, f"CorruptMetadata names {e.key!r}, expected {key!r}: {e}"
        result = "corrupt"
    except Exception as e:
        raise AssertionError(f"{type(e).__name__} escaped instead of CorruptMetadata({key!r}): "
                             f"{e}") from e
    else:
        result = "parsed"
    OUTCOMES[f"{case}: {result}"] += 1
    return result


@pytest.fixture(scope="module", autouse=True)
def print_counts(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    capman = request.config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled():
        print(f"\n\nfuzz cases tried (tests/reliability/test_fuzz_inputs.py): "
              f"{sum(CASES.values())}")
        for name, n in sorted(CASES.items()):
            print(f"  {n:6d}  {name}")
        print("outcomes:")
        for name, n in sorted(OUTCOMES.items()):
            print(f"  {n:6d}  {name}")
        if SILENT:
            print(f"reads that returned wrong rows without an error ({len(SILENT)}), e.g.:")
            for line in SILENT[:5]:
                print(f"          {line}")
        if CRASHES:
            print(f"reads that killed the reading process ({len(CRASHES)}):")
            for line in CRASHES[:5]:
                print(f"          {line}")
        print(f"bit-flip seed: CASLAKE_FUZZ_SEED={FLIP_SEED}")


# --- a real table to take documents from ------------------------------------------------

RICH = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("s", pa.string()),
                  pa.field("ts", pa.timestamp("us", tz="UTC")), pa.field("d", pa.decimal128(10, 2)),
                  pa.field("day", pa.date32()), pa.field("f", pa.float64())])


def rich_rows(ids: list[int]) -> pa.Table:
    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    return pa.table({"id": ids, "s": [f"s{i}" for i in ids],
                     "ts": [t0 + timedelta(seconds=i) for i in ids],
                     "d": [Decimal(i % 100000) / 100 for i in ids],
                     "day": [date(2024, 1, 1) + timedelta(days=i % 300) for i in ids],
                     "f": [i / 3 for i in ids]}, schema=RICH)


@dataclass
class Docs:
    root: Path
    pointer: bytes
    manifest_key: str
    manifest: bytes
    segment_key: str
    segment: bytes
    tombstones: dict[str, bytes]
    footer: bytes
    data_file: DataFile


def build_rich_table(root: Path) -> caslake.Table:
    """A table whose latest manifest has segments, ancestors, stats of every type and
    tombstones with key ranges, whole row groups and positions."""
    t = caslake.create_table(str(root), RICH)
    big = list(range(100_000, 120_000))
    random.Random(7).shuffle(big)
    t.write_options = WriteOptions(row_group_size=64 * 1024)
    t.append(rich_rows(big))
    t.write_options = WriteOptions()
    t.delete("id BETWEEN 100000 AND 109999")  # scattered positions -> a key range
    for k in range(66):  # > 64 inline entries -> a segment
        t.append(rich_rows(list(range(k * 10, k * 10 + 10))))
    t.delete("id IN (3, 5, 17, 18, 250)")  # positions in several files
    t.delete("id BETWEEN 30 AND 39")  # a whole file
    return t


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> Docs:
    root = tmp_path_factory.mktemp("docs") / "table"
    t = build_rich_table(root)
    pointer = (root / POINTER_KEY).read_bytes()
    m = parse_pointer(pointer, POINTER_KEY)
    manifest = parse_manifest((root / m.manifest).read_bytes(), m.manifest)
    assert manifest.segments and manifest.ancestors and len(manifest.tombstones) >= 2
    seg_key = manifest.segments[0].manifest
    tombs = {ref.path: (root / ref.path).read_bytes() for ref in manifest.tombstones}
    headers = [_split_tombstone(b)[0] for b in tombs.values()]
    assert any(f.get("key_ranges") for h in headers for f in h["files"])
    f = t.io.live_files(t.snapshot)[0]
    footer = (root / f.path).read_bytes()[-f.footer_size:]
    return Docs(root, pointer, m.manifest, (root / m.manifest).read_bytes(), seg_key,
                (root / seg_key).read_bytes(), tombs, footer, f)


def _split_tombstone(raw: bytes) -> tuple[dict[str, Any], bytes]:
    (h,) = struct.unpack("<I", raw[4:8])
    return json.loads(raw[8:8 + h]), raw[8 + h:-4]


def _frame_tombstone(header: bytes, blobs: bytes) -> bytes:
    body = b"CLTB" + struct.pack("<I", len(header)) + header + blobs
    return body + struct.pack("<I", zlib.crc32(body))


# --- mutation strategies ------------------------------------------------------------------

EVIL_STRINGS = ["", ".", "..", "/", "../x", "data/../../x", "/etc/passwd", "s3://other/x",
                "data\\x", "data//x", "é", "\x00", "9" * 300, "NaN", "2026-13-45T99:99:99Z",
                "timestamp[ms, tz=Not/AZone]", "decimal128(99, 3)", "decimal128(5, 9)"]
FIELD_NAMES = ["format", "format_version", "version", "manifest", "commit_id", "table_id",
               "parent", "files", "segments", "removed", "tombstones", "ancestors", "txns",
               "totals", "summary", "properties", "operation_params", "schema", "fields",
               "stats", "min", "max", "nulls", "row_groups", "key_ranges", "positions",
               "offset", "length", "cardinality", "field_id", "row_count", "footer_size",
               "size", "etag", "path", "deleted_rows", "1", "2", "99", "-1"]
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70),
    st.sampled_from([0, -1, 1, 2**31, 2**32, 2**53 + 1, 2**63, 2**64, -2**63 - 1, 10**400,
                     -10**400]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(EVIL_STRINGS))
JSON_VALUES = st.recursive(
    SCALARS, lambda inner: st.lists(inner, min_size=1, max_size=3)
    | st.dictionaries(st.sampled_from(FIELD_NAMES) | st.text(max_size=6), inner, min_size=1,
                      max_size=3),
    max_leaves=6)  # empty containers come from the "empty" mutation
MUTATIONS = ["delete", "replace", "wrap_list", "wrap_dict", "add_field", "number", "string",
             "duplicate", "empty"]


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, (*prefix, i))


def _at(obj: Any, path: tuple[Any, ...]) -> Any:
    for k in path:
        obj = obj[k]
    return obj


def _as_float(n: int | float) -> float:
    """``float(n)``, or the largest float for an int beyond float range (an earlier
    mutation step can have made the number that large)."""
    try:
        return float(n)
    except OverflowError:
        return sys.float_info.max if n > 0 else -sys.float_info.max  # copysign overflows too


def mutate_json(data: st.DataObject, doc: Any) -> Any:
    """1-4 structural mutations at random places of a JSON document."""
    doc = copy.deepcopy(doc)
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        paths = list(_paths(doc))
        path = data.draw(st.sampled_from(paths), label="path")
        kind = data.draw(st.sampled_from(MUTATIONS), label="kind")
        target = _at(doc, path)
        if not path:
            if kind == "replace":
                doc = data.draw(JSON_VALUES)
            continue
        parent, k = _at(doc, path[:-1]), path[-1]
        if kind == "delete":
            del parent[k]
        elif kind == "replace":
            parent[k] = data.draw(JSON_VALUES, label="value")
        elif kind == "wrap_list":
            parent[k] = [target]
        elif kind == "wrap_dict":
            parent[k] = {"value": target}
        elif kind == "add_field" and isinstance(target, dict):
            target[data.draw(st.sampled_from(FIELD_NAMES))] = data.draw(JSON_VALUES)
        elif kind == "number" and isinstance(target, int | float) and not isinstance(target, bool):
            parent[k] = data.draw(st.sampled_from([-target, -1, target + 1, target * 2**40,
                                                   10**30, -(10**30), _as_float(target), 0.5]))
        elif kind == "string" and isinstance(target, str):
            parent[k] = data.draw(st.sampled_from([
                target + "/..", "/" + target, target[: len(target) // 2], "", target + "\\",
                target.replace("/", "//", 1), target + "é", target.upper(), "../" + target]))
        elif kind == "duplicate" and isinstance(target, list) and target:
            target.append(copy.deepcopy(target[0]))
        elif kind == "empty" and isinstance(target, list | dict):
            parent[k] = type(target)()
    return doc


def damage_bytes(data: st.DataObject, raw: bytes, keep_tail: int = 0) -> bytes:
    """1-4 byte-level damages: bit flips, overwritten bytes, truncation, insertion, deletion."""
    b = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 4), label="damages")):
        limit = max(1, len(b) - keep_tail)
        kind = data.draw(st.sampled_from(["flip", "set", "truncate", "insert", "cut"]))
        i = data.draw(st.integers(0, limit - 1), label="at")
        if kind == "flip" and b:
            b[i] ^= 1 << data.draw(st.integers(0, 7))
        elif kind == "set" and b:
            b[i] = data.draw(st.integers(0, 255))
        elif kind == "truncate":
            b = b[:i]
        elif kind == "insert":
            b[i:i] = data.draw(st.binary(min_size=1, max_size=16))
        elif kind == "cut":
            del b[i:i + data.draw(st.integers(1, 16))]
    return bytes(b)


# --- 1. parsers ---------------------------------------------------------------------------

def parse_segment(raw: bytes, key: str) -> list[DataFile]:
    """A segment object parsed and every block decoded (each checked against its summary)."""
    return list(SegmentFile(raw, key).files())


PARSERS: dict[str, tuple[Callable[[bytes, str], object], str]] = {
    "pointer": (parse_pointer, POINTER_KEY),
    "manifest": (parse_manifest, "manifest/v00000000000000000001-" + "a" * 32 + ".json"),
    "tombstone": (parse_tombstone, "tombstone/" + "b" * 32 + ".del"),
    "segment": (parse_segment, "segment/v00000000000000000001-" + "c" * 32 + ".arrow"),
}


@pytest.mark.parametrize("name", sorted(PARSERS))
@fuzz(300)
@given(raw=st.one_of(st.binary(max_size=512), st.binary(max_size=256).map(lambda b: b"CLTB" + b),
                     st.binary(max_size=256).map(lambda b: b'{"format":"caslake.' + b)))
def test_random_bytes(name: str, raw: bytes) -> None:
    fn, key = PARSERS[name]
    classify(f"random bytes -> parse_{name}", lambda: fn(raw, key), key)


def _doc_for(docs: Docs, name: str, data: st.DataObject) -> bytes:
    if name == "pointer":
        return docs.pointer
    if name == "manifest":
        return docs.manifest
    if name == "segment":
        return docs.segment
    return data.draw(st.sampled_from(sorted(docs.tombstones.values())), label="tombstone")


@pytest.mark.parametrize("name", ["pointer", "manifest"])
@fuzz(300)
@given(data=st.data())
def test_mutated_json_documents(docs: Docs, name: str, data: st.DataObject) -> None:
    fn, key = PARSERS[name]
    doc = mutate_json(data, json.loads(_doc_for(docs, name, data)))
    raw = json.dumps(doc).encode()
    classify(f"mutated {name} JSON", lambda: fn(raw, key), key)


@fuzz(300)
@given(data=st.data())
def test_mutated_tombstone_headers(docs: Docs, data: st.DataObject) -> None:
    """Header mutations re-framed with a valid CRC, so every check behind it runs."""
    fn, key = PARSERS["tombstone"]
    header, blobs = _split_tombstone(_doc_for(docs, "tombstone", data))
    raw = _frame_tombstone(json.dumps(mutate_json(data, header)).encode(), blobs)
    classify("mutated tombstone header (valid CRC)", lambda: fn(raw, key), key)


@fuzz(300)
@given(data=st.data())
def test_mutated_tombstone_bitmaps(docs: Docs, data: st.DataObject) -> None:
    """Damaged roaring bitmaps (and header length) behind a valid CRC."""
    fn, key = PARSERS["tombstone"]
    raw = _doc_for(docs, "tombstone", data)
    (h,) = struct.unpack("<I", raw[4:8])
    header, blobs = raw[8:8 + h], raw[8 + h:-4]
    body = damage_bytes(data, blobs)
    framed = _frame_tombstone(header, body)
    if data.draw(st.booleans(), label="bad header length"):
        framed = framed[:4] + struct.pack("<I", data.draw(st.integers(0, 2**32 - 1))) + framed[8:]
        framed = framed[:-4] + struct.pack("<I", zlib.crc32(framed[:-4]))
    classify("damaged tombstone bitmaps (valid CRC)", lambda: fn(framed, key), key)


@pytest.mark.parametrize("name", sorted(PARSERS))
@fuzz(300)
@given(data=st.data())
def test_damaged_document_bytes(docs: Docs, name: str, data: st.DataObject) -> None:
    fn, key = PARSERS[name]
    raw = damage_bytes(data, _doc_for(docs, name, data))
    classify(f"damaged {name} bytes", lambda: fn(raw, key), key)


@fuzz(300)
@given(data=st.data())
def test_damaged_parquet_footers(docs: Docs, data: st.DataObject) -> None:
    """``check_footer`` on a damaged footer (the manifest's footer_size matching it)."""
    tail = damage_bytes(data, docs.footer, keep_tail=8)
    if data.draw(st.booleans(), label="keep magic"):
        tail = tail[:-4] + b"PAR1" if len(tail) >= 8 else tail
    f = replace(docs.data_file, footer_size=len(tail))
    classify("damaged Parquet footer", lambda: check_footer(tail, f), f.path)


# --- 2. key safety ------------------------------------------------------------------------

BAD_KEYS = ["../x.parquet", "data/../../etc/passwd", "data/../manifest/x.json", "/etc/passwd",
            "/data/x.parquet", "s3://other-bucket/data/x.parquet", "file:///etc/passwd",
            "data\\..\\x.parquet", "data//x.parquet", "data/./x.parquet", "data/x/",
            "", "data", "DATA/x.parquet", "data/x .parquet", "data/%2e%2e/x.parquet",
            "data/x\x00.parquet", "data/ü.parquet", "manifest/x.json", "tombstone/x.del",
            "_latest_manifest", "..", "data/..", "data/x.parquet/.."]


def _key_slots(docs: Docs) -> dict[str, tuple[str, Callable[[str], bytes]]]:
    """For every key field: (parser name, function key -> document bytes with that key).
    The key is placed under the field's own prefix where the field has one, so only
    the unsafe part is under test; raw keys are tried too."""
    man = json.loads(docs.manifest)
    ptr = json.loads(docs.pointer)
    tomb_raw = next(b for b in docs.tombstones.values()
                    if _split_tombstone(b)[0]["files"][0].get("positions"))
    header, blobs = _split_tombstone(tomb_raw)

    def manifest_with(edit: Callable[[dict[str, Any], str], None]) -> Callable[[str], bytes]:
        def make(key: str) -> bytes:
            doc = copy.deepcopy(man)
            edit(doc, key)
            return json.dumps(doc).encode()
        return make

    def set_tomb_files(doc: dict[str, Any], key: str) -> None:
        ref = doc["tombstones"][0]
        ref["files"] = {key: 1}

    def set_removed(doc: dict[str, Any], key: str) -> None:
        doc["removed"] = [key]

    def set_segment(doc: dict[str, Any], key: str) -> None:
        ref = doc["segments"][0]
        ref["segment"] = key
        ref["check"] = segment_ref_check(ref)  # so the key itself is what is checked

    def pointer_with(key: str) -> bytes:
        return json.dumps({**ptr, "manifest": key}).encode()

    def tombstone_with(key: str) -> bytes:
        h = copy.deepcopy(header)
        h["files"][0]["path"] = key
        return _frame_tombstone(json.dumps(h).encode(), blobs)

    return {
        "pointer.manifest": ("pointer", pointer_with),
        "manifest.parent": ("manifest", manifest_with(lambda d, k: d.update(parent=k))),
        "manifest.files[].path": ("manifest", manifest_with(
            lambda d, k: d["files"][0].update(path=k))),
        "manifest.segments[].segment": ("manifest", manifest_with(set_segment)),
        "manifest.ancestors[].manifest": ("manifest", manifest_with(
            lambda d, k: d["ancestors"][0].update(manifest=k))),
        "manifest.removed[]": ("manifest", manifest_with(set_removed)),
        "manifest.tombstones[].path": ("manifest", manifest_with(
            lambda d, k: d["tombstones"][0].update(path=k))),
        "manifest.tombstones[].files{}": ("manifest", manifest_with(set_tomb_files)),
        "tombstone.files[].path": ("tombstone", tombstone_with),
    }


PREFIX = {"pointer.manifest": "manifest/", "manifest.parent": "manifest/",
          "manifest.segments[].segment": "segment/", "manifest.ancestors[].manifest":
          "manifest/", "manifest.tombstones[].path": "tombstone/"}


def _under_prefix(slot: str, key: str) -> str:
    """Rewrite a data/... key to the slot's prefix (manifest/... or tombstone/...)."""
    prefix = PREFIX.get(slot)
    return prefix + key[len("data/"):] if prefix and key.startswith("data/") else key


SLOTS = ["pointer.manifest", "manifest.parent", "manifest.files[].path",
         "manifest.segments[].segment", "manifest.ancestors[].manifest", "manifest.removed[]",
         "manifest.tombstones[].path", "manifest.tombstones[].files{}",
         "tombstone.files[].path"]


@pytest.mark.parametrize("slot", SLOTS)
def test_unsafe_keys_are_corrupt_metadata(docs: Docs, slot: str) -> None:
    name, make = _key_slots(docs)[slot]
    fn, key = PARSERS[name]
    for bad in BAD_KEYS:
        for candidate in {bad, _under_prefix(slot, bad)}:
            if candidate in ("manifest/x.json", "tombstone/x.del") and \
                    candidate.startswith(PREFIX.get(slot, "data/")):
                continue  # a well-formed key of the slot's own kind
            raw = make(candidate)
            CASES["unsafe key in " + slot] += 1
            with pytest.raises(CorruptMetadata) as err:
                fn(raw, key)
            assert err.value.key == key, (slot, candidate)
            OUTCOMES["unsafe keys: corrupt"] += 1


SAFE_KEY = re.compile(r"^[A-Za-z0-9._=-]+(/[A-Za-z0-9._=-]+)*$")


@fuzz(300)
@given(data=st.data(), slot=st.sampled_from(SLOTS),
       text=st.text(alphabet=st.sampled_from(list("ab./\\:=-_ é%\x00")), max_size=24))
def test_random_keys_are_rejected_or_safe(docs: Docs, data: st.DataObject, slot: str,
                                          text: str) -> None:
    name, make = _key_slots(docs)[slot]
    fn, key = PARSERS[name]
    prefix = data.draw(st.sampled_from([PREFIX.get(slot, "data/"), "", "/"]), label="prefix")
    candidate = prefix + text
    outcome = classify("random key text in a key field", lambda: fn(make(candidate), key), key)
    if outcome == "parsed":
        parts = candidate.split("/")
        assert SAFE_KEY.match(candidate) and "." not in parts and ".." not in parts, candidate
        assert candidate.startswith(PREFIX.get(slot, "data/")), candidate


# --- 3. mutated metadata inside a real table ----------------------------------------------


def _read_everything(uri: str) -> None:
    t = caslake.open_table(uri)
    t.scan().to_arrow()
    t.scan(where="id < 50", columns=["id", "ts", "d"]).to_arrow()
    t.history()
    t.scan(version=1).count()


@pytest.fixture(scope="module")
def e2e_table(tmp_path_factory: pytest.TempPathFactory) -> Docs:
    root = tmp_path_factory.mktemp("e2e") / "table"
    build_rich_table(root)
    pointer = (root / POINTER_KEY).read_bytes()
    m = parse_pointer(pointer, POINTER_KEY)
    manifest = parse_manifest((root / m.manifest).read_bytes(), m.manifest)
    tombs = {ref.path: (root / ref.path).read_bytes() for ref in manifest.tombstones}
    return Docs(root, pointer, m.manifest, (root / m.manifest).read_bytes(), "", b"", tombs,
                b"", manifest.files[0])


def _install(path: Path, data: bytes) -> None:
    """Overwrite in place keeping inode and mtime: the local ETag only changes with size."""
    st_ = path.stat()
    with open(path, "r+b") as fh:
        fh.write(data)
        fh.truncate()
    os.utime(path, ns=(st_.st_atime_ns, st_.st_mtime_ns))


def _read_typed(case: str, uri: str) -> str:
    CASES[case] += 1
    try:
        _read_everything(uri)
    except CaslakeError as e:
        OUTCOMES[f"{case}: {type(e).__name__}"] += 1
        return "typed"
    except Exception as e:
        raise AssertionError(f"{type(e).__name__} escaped a read: {e}") from e
    OUTCOMES[f"{case}: read"] += 1
    return "ok"


@pytest.mark.timeout(180)
@fuzz(80, io=True)
@given(data=st.data())
def test_mutated_manifest_in_a_table(e2e_table: Docs, data: st.DataObject) -> None:
    path = e2e_table.root / e2e_table.manifest_key
    doc = mutate_json(data, json.loads(e2e_table.manifest))
    _install(path, json.dumps(doc).encode())
    try:
        _read_typed("mutated manifest read through the table", str(e2e_table.root))
    finally:
        _install(path, e2e_table.manifest)


@pytest.mark.timeout(180)
@fuzz(80, io=True)
@given(data=st.data())
def test_mutated_tombstone_in_a_table(e2e_table: Docs, data: st.DataObject) -> None:
    key = data.draw(st.sampled_from(sorted(e2e_table.tombstones)), label="tombstone")
    original = e2e_table.tombstones[key]
    header, blobs = _split_tombstone(original)
    raw = _frame_tombstone(json.dumps(mutate_json(data, header)).encode(), blobs)
    # The manifest records the tombstone's size; record the new one so the reader gets
    # past the size check to the parser and the checks against the snapshot.
    manifest = json.loads(e2e_table.manifest)
    for ref in manifest["tombstones"]:
        if ref["path"] == key:
            ref["size"] = len(raw)
    path, manifest_path = e2e_table.root / key, e2e_table.root / e2e_table.manifest_key
    _install(path, raw)
    _install(manifest_path, json.dumps(manifest).encode())
    try:
        _read_typed("mutated tombstone read through the table", str(e2e_table.root))
    finally:
        _install(path, original)
        _install(manifest_path, e2e_table.manifest)


# --- findings in the parsers, fixed: minimal reproductions ---------------------------------


# fixed finding: an integer literal of more than 4300 digits in a pointer, manifest or tombstone
# header makes json.loads raise ValueError (int max_str_digits), which _load_json /
# parse_tombstone do not map to CorruptMetadata
@pytest.mark.parametrize("name", ["manifest", "pointer", "tombstone"])  # the JSON documents
def test_huge_integer_literal_is_corrupt_metadata(docs: Docs, name: str) -> None:
    fn, key = PARSERS[name]
    huge = b'"format_version":' + b"1" * 4301
    if name == "tombstone":
        original = next(iter(docs.tombstones.values()))
        (h,) = struct.unpack("<I", original[4:8])
        header = original[8:8 + h]
        assert b'"format_version":1' in header
        raw = _frame_tombstone(header.replace(b'"format_version":1', huge), original[8 + h:-4])
    else:
        raw = re.sub(rb'"format_version":\d+', huge,
                     docs.pointer if name == "pointer" else docs.manifest)
        assert raw.count(huge) == 1
    with pytest.raises(CorruptMetadata):
        fn(raw, key)


# fixed finding: parse_tombstone iterates files[].key_ranges without checking it is a list; a
# number, boolean or null there raises TypeError instead of CorruptMetadata
@pytest.mark.parametrize("value", [5, None, True])
def test_tombstone_key_ranges_must_be_a_list(docs: Docs, value: object) -> None:
    header, blobs = _split_tombstone(next(iter(docs.tombstones.values())))
    header["files"][0]["key_ranges"] = value
    raw = _frame_tombstone(json.dumps(header).encode(), blobs)
    with pytest.raises(CorruptMetadata):
        parse_tombstone(raw, "tombstone/x.del")


# fixed finding: a manifest data-file entry whose size does not fit a C long (e.g. 10**30) reaches
# os.pread in the local store, and OverflowError escapes scan() instead of CorruptMetadata
# (parse_manifest bounds no sizes; on S3 the same entry is a typed StoreError)
def test_huge_file_size_in_a_manifest_is_a_typed_error(tmp_path: Path) -> None:
    t = caslake.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64())]))
    t.append(pa.table({"id": [1, 2, 3]}))
    path = tmp_path / "t" / t.snapshot.key
    manifest = json.loads(path.read_bytes())
    manifest["files"][0]["size"] = 10**30
    _install(path, json.dumps(manifest).encode())
    with pytest.raises(CaslakeError):
        caslake.open_table(str(tmp_path / "t")).scan().to_arrow()


# fixed finding: a tombstone key range whose bound does not fit the column's type (e.g. 10**30 on an
# int64 column) passes parse_tombstone and load_masks (value_from_json checks only the Python
# type), then pa.scalar() raises OverflowError out of scan() instead of CorruptMetadata naming
# the tombstone
def test_key_range_outside_the_column_type_is_corrupt_metadata(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t = caslake.create_table(str(root), DATA)
    ids = list(range(20_000))
    random.Random(1).shuffle(ids)
    t.append(pa.table({"id": ids, "s": ["x"] * len(ids), "f": [0.0] * len(ids)}, schema=DATA))
    t.delete("id BETWEEN 0 AND 9999")  # scattered positions: stored as a key range
    ref = t.snapshot.manifest.tombstones[0]
    header, blobs = _split_tombstone((root / ref.path).read_bytes())
    assert header["files"][0]["key_ranges"], header
    header["files"][0]["key_ranges"][0]["min"] = 10**30
    raw = _frame_tombstone(json.dumps(header).encode(), blobs)
    manifest = json.loads((root / t.snapshot.key).read_bytes())
    manifest["tombstones"][0]["size"] = len(raw)
    _install(root / ref.path, raw)
    _install(root / t.snapshot.key, json.dumps(manifest).encode())
    with pytest.raises(CorruptMetadata) as err:
        caslake.open_table(str(root)).scan().to_arrow()
    assert err.value.key == ref.path


# --- 4. damaged data files ------------------------------------------------------------------

DATA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("s", pa.string()),
                  pa.field("f", pa.float64())])
DIR_NAMES = ["plain", "with space", "ünï cödé 表", "k=v", "a b=ü%20c"]
DELETED = {5, 6, 2500}


def data_rows(lo: int, n: int) -> pa.Table:
    ids = list(range(lo, lo + n))
    return pa.table({"id": ids, "s": [f"v{i * 7}" for i in ids], "f": [i / 3 for i in ids]},
                    schema=DATA)


def expected_rows(where: Callable[[int], bool] = lambda i: True) -> list[tuple[Any, ...]]:
    return [(i, f"v{i * 7}", i / 3) for i in range(4000) if i not in DELETED and where(i)]


def as_rows(t: pa.Table) -> list[tuple[Any, ...]]:
    cols = [t.column(c).to_pylist() for c in t.column_names]
    return sorted(zip(*cols, strict=True))


def build_data_table(root: Path) -> caslake.Table:
    t = caslake.create_table(str(root), DATA, write_options=WriteOptions(row_group_size=8192))
    t.append(data_rows(0, 2000))
    t.append(data_rows(2000, 2000))
    t.delete(f"id IN ({', '.join(map(str, sorted(DELETED)))})")
    return t


READS: list[tuple[str, dict[str, Any], Callable[[int], bool]]] = [
    ("all", {}, lambda i: True),
    ("where", {"where": "id >= 1000 AND id < 3000"}, lambda i: 1000 <= i < 3000),
    ("projection", {"columns": ["id", "f"]}, lambda i: True),
]


def read_outcome(uri: str, damaged: str) -> tuple[str, str]:
    """Read the table three ways with a fresh handle.  Returns ("correct" | "typed" |
    "wrong" | "untyped", detail); "typed" only counts if the error names ``damaged``."""
    for name, kwargs, keep in READS:
        try:
            got = caslake.open_table(uri).scan(**kwargs).to_arrow()
        except CaslakeError as e:
            named = getattr(e, "key", None) == damaged or damaged in str(e)
            if not named:
                return "unnamed", f"{name}: {type(e).__name__} does not name {damaged}: {e}"
            continue
        except Exception as e:
            return "untyped", f"{name}: {type(e).__name__}: {e}"
        want = [r if "columns" not in kwargs else (r[0], r[2]) for r in expected_rows(keep)]
        rows = as_rows(got)
        if rows != want:
            diff = next(((g, w) for g, w in zip(rows, want, strict=False) if g != w), None)
            return "wrong", (f"{name}: {len(rows)} rows (expected {len(want)}); first "
                             f"difference: read {diff[0] if diff else '-'}, expected "
                             f"{diff[1] if diff else '-'}")
    return "correct-or-typed", ""


@pytest.mark.parametrize("dirname", DIR_NAMES)
def test_tables_under_odd_directory_names_read_correctly(tmp_path: Path, dirname: str) -> None:
    root = tmp_path / dirname / "t=1"
    build_data_table(root)
    for _name, kwargs, keep in READS:
        want = [r if "columns" not in kwargs else (r[0], r[2]) for r in expected_rows(keep)]
        assert as_rows(caslake.open_table(str(root)).scan(**kwargs).to_arrow()) == want


# fixed finding: Table.uri is a percent-encoded file:// URI, but open_table did not decode it
@pytest.mark.parametrize("dirname", DIR_NAMES)
def test_table_uri_opens_the_same_table(tmp_path: Path, dirname: str) -> None:
    """``Table.uri`` (and the standard ``Path.as_uri()``) must name the same table."""
    root = tmp_path / dirname / "t"
    t = build_data_table(root)
    assert caslake.open_table(t.uri).version == t.version
    assert caslake.open_table(root.as_uri()).version == t.version


def _truncate(path: Path, other: bytes) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _replace_with_other_parquet(path: Path, other: bytes) -> None:
    assert len(other) != path.stat().st_size
    path.write_bytes(other)


def _remove(path: Path, other: bytes) -> None:
    path.unlink()


def _garbage_same_size_keep_etag(path: Path, other: bytes) -> None:
    _install(path, random.Random(3).randbytes(path.stat().st_size))


def _zeroed_footer_keep_etag(path: Path, other: bytes) -> None:
    data = bytearray(path.read_bytes())
    (n,) = struct.unpack("<I", data[-8:-4])
    data[-8 - n:-8] = bytes(n)
    _install(path, bytes(data))


DAMAGES = [_truncate, _replace_with_other_parquet, _remove, _garbage_same_size_keep_etag,
           _zeroed_footer_keep_etag]


@pytest.mark.parametrize("damage", DAMAGES, ids=[d.__name__.strip("_") for d in DAMAGES])
@pytest.mark.parametrize("dirname", DIR_NAMES)
def test_damaged_data_file_is_a_typed_error_naming_it(tmp_path: Path, dirname: str,
                                                      damage: Callable[[Path, bytes], None]
                                                      ) -> None:
    root = tmp_path / dirname / "t"
    t = build_data_table(root)
    victim = t.io.live_files(t.snapshot)[0].path
    sink = pa.BufferOutputStream()
    pq.write_table(data_rows(0, 10), sink)
    damage(root / victim, sink.getvalue().to_pybytes())
    CASES["damaged data file (" + damage.__name__.strip("_") + ")"] += 1
    verdict, detail = read_outcome(str(root), victim)
    OUTCOMES[f"damaged data file: {verdict}"] += 1
    assert verdict == "correct-or-typed", detail


# Bit flips run in a worker process: a flipped footer can abort the reading process
# (see test_footer_bit_flip_does_not_abort_the_reader), which must not take the test
# session down.  The worker reports every case before and after it runs; if it dies,
# the case it was on is recorded as a crash, the file restored and the worker restarted
# after that case.

# Cases per region: 100 in `make test`; `make stress` runs thousands (CASLAKE_FUZZ_FLIPS).
FLIP_CASES = int(os.environ.get("CASLAKE_FUZZ_FLIPS", "100"))
FLIP_TIMEOUT = max(600, FLIP_CASES // 5)  # seconds; a case takes ~20 ms, ~0.1 s loaded
FLIP_SEED = int(os.environ.get("CASLAKE_FUZZ_SEED", random.randrange(1 << 30)))


@pytest.fixture(scope="module")
def flip_table(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, bytes]:
    """A table under an odd directory name, one of its data files and that file's bytes."""
    root = tmp_path_factory.mktemp("flips") / "ünï cödé=1 x" / "t"
    t = build_data_table(root)
    f = t.io.live_files(t.snapshot)[0]
    return root, f.path, (root / f.path).read_bytes()


def footer_of(raw: bytes) -> FooterInfo:
    """The parsed footer of a whole Parquet file's bytes."""
    n = footer_size_from_trailer(raw[-8:], path="data file")
    return parse_footer(raw[-n:], path="data file", file_size=len(raw))


def flip_case(raw: bytes, region: str, seed: int, i: int) -> tuple[int, int]:
    """The (byte, bit) of case ``i``: a byte of a column chunk, or of the footer."""
    rng = random.Random(f"{seed}:{region}:{i}")
    (n,) = struct.unpack("<I", raw[-8:-4])
    if region == "footer":
        return rng.randrange(len(raw) - 8 - n, len(raw) - 8), rng.randrange(8)
    info = footer_of(raw)
    start, end = rng.choice([info.chunk_range(rg, c) for rg in range(info.num_row_groups)
                             for c in range(info.metadata.num_columns)])
    return rng.randrange(start, end), rng.randrange(8)


def flip_worker(root: str, victim: str, region: str, seed: int, first: int, count: int) -> None:
    """``python -m tests.reliability.test_fuzz_inputs flip ...``: run cases
    ``first..count-1``, one JSON line before ("start") and after ("verdict") each."""
    path = Path(root) / victim
    raw = path.read_bytes()
    for i in range(first, count):
        at, bit = flip_case(raw, region, seed, i)
        print(json.dumps({"i": i, "at": at, "bit": bit, "start": True}), flush=True)
        b = bytearray(raw)
        b[at] ^= 1 << bit
        _install(path, bytes(b))
        try:
            verdict, detail = read_outcome(root, victim)
        finally:
            _install(path, raw)
        print(json.dumps({"i": i, "at": at, "bit": bit, "verdict": verdict, "detail": detail}),
              flush=True)


def flip_campaign(root: Path, victim: str, raw: bytes, region: str, seed: int,
                  count: int) -> list[dict[str, Any]]:
    """Run ``count`` flip cases in worker processes; a worker that dies is a "crash"."""
    results: list[dict[str, Any]] = []
    first = 0
    while first < count:
        proc = subprocess.run([sys.executable, "-m", "tests.reliability.test_fuzz_inputs",
                               "flip", str(root), victim, region, str(seed), str(first),
                               str(count)], capture_output=True, text=True, timeout=FLIP_TIMEOUT,
                              cwd=Path(__file__).resolve().parents[2])
        lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
        results.extend(x for x in lines if "verdict" in x)
        if proc.returncode == 0:
            break
        _install(root / victim, raw)
        started = [x for x in lines if "start" in x]
        if not started or "verdict" in lines[-1]:
            raise AssertionError(f"flip worker failed outside a case: {proc.stderr[-2000:]}")
        last = started[-1]
        results.append({**last, "verdict": "crash",
                        "detail": f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}"})
        first = last["i"] + 1
    return results


def _flip_verdicts(region: str, results: list[dict[str, Any]]) -> list[str]:
    bad = []
    for r in results:
        CASES[f"bit flip in a {region} (worker process)"] += 1
        verdict, where = r["verdict"], f"byte {r['at']} bit {r['bit']}"
        OUTCOMES[f"{region} bit flip: {verdict}"] += 1
        if verdict == "crash":
            CRASHES.append(f"{region} {where}: {r['detail']}")
        elif verdict == "wrong":
            SILENT.append(f"{region} {where}: {r['detail']}")
        if verdict != "correct-or-typed":
            bad.append(f"{where}: {verdict}: {r['detail']}")
    return bad


@pytest.mark.timeout(FLIP_TIMEOUT)
@pytest.mark.parametrize("region", ["column chunk", "footer"])
def test_bit_flips_never_escape_untyped(flip_table: tuple[Path, str, bytes],
                                        region: str) -> None:
    """Single bit flips (ETag kept, as bit rot would) in a column chunk or in the footer:
    a correct read or a typed error naming the file -- never another exception, a wrong
    answer or an aborted reader.  CASLAKE_FUZZ_SEED=<n> replays a run."""
    root, victim, raw = flip_table
    results = flip_campaign(root, victim, raw, region.split()[0], FLIP_SEED, FLIP_CASES)
    assert len(results) == FLIP_CASES
    bad = _flip_verdicts(region, results)
    print(f"{region}: {len(results)} flips, seed {FLIP_SEED}, {len(bad)} bad")
    assert not bad, f"seed {FLIP_SEED}: {bad[:3]}"


class SilentWrongAnswer(AssertionError):
    """A read returned rows that differ from the table's contents, without an error."""


# fixed finding: data files carry no page checksums (pyarrow writes none by default and caslake does
# not verify any), and on the local store an in-place change that keeps size and mtime keeps
# the ETag, so a flipped bit in a float page decodes to a different value and the read returns
# it without error
def test_bit_flip_in_a_float_page_is_detected(flip_table: tuple[Path, str, bytes]) -> None:
    root, victim, raw = flip_table
    info = footer_of(raw)
    _, end = info.chunk_range(0, info.column_indexes(["f"])[0])
    wrong = []
    # Bytes near the end of the first row group's "f" chunk: its (zstd-compressed)
    # data page of dictionary indices.
    for at in range(end - 64, end - 16, 8):
        b = bytearray(raw)
        b[at] ^= 0x10
        _install(root / victim, bytes(b))
        try:
            CASES["deterministic bit flip in a float page"] += 1
            verdict, detail = read_outcome(str(root), victim)
        finally:
            _install(root / victim, raw)
        assert verdict in ("correct-or-typed", "wrong"), detail
        if verdict == "wrong":
            wrong.append(f"byte {at} of {victim}: {detail}")
    if wrong:
        raise SilentWrongAnswer(f"{len(wrong)} flips read back as wrong rows: {wrong[:3]}")


# fixed finding: a Parquet footer whose column name is not valid UTF-8 raises UnicodeDecodeError out
# of scan() (pyarrow decodes column paths; parse_footer only maps OSError/ArrowException to
# CorruptMetadata)
def test_footer_with_a_non_utf8_column_name_is_corrupt_metadata(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t = build_data_table(root)
    victim = t.io.live_files(t.snapshot)[0].path
    raw = (root / victim).read_bytes()
    (n,) = struct.unpack("<I", raw[-8:-4])
    footer_start = len(raw) - 8 - n
    at = raw.index(b"\x02id", footer_start) + 1  # the Thrift string "id" of the schema
    b = bytearray(raw)
    b[at] ^= 0x80
    _install(root / victim, bytes(b))
    with pytest.raises(CorruptMetadata) as err:
        caslake.open_table(str(root)).scan().to_arrow()
    assert err.value.key == victim


class UnnamedFile(AssertionError):
    """A typed error that does not say which object is damaged."""


# fixed finding: when a data file's column type differs from the manifest schema,
# caslake.core.read.scan._cast_to raises CorruptMetadata with key 'data file' instead of the
# file's key (and where pyarrow can cast, e.g. int64 -> float32 or string, the read silently
# returns converted values)
def test_type_mismatch_names_the_data_file(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t = build_data_table(root)
    victim = t.io.live_files(t.snapshot)[0].path
    manifest = json.loads((root / t.snapshot.key).read_bytes())
    manifest["schema"]["fields"][1]["type"] = "int32"  # "s" holds strings
    _install(root / t.snapshot.key, json.dumps(manifest).encode())
    with pytest.raises(CorruptMetadata) as err:
        caslake.open_table(str(root)).scan().to_arrow()
    if err.value.key != victim and victim not in str(err.value):
        raise UnnamedFile(f"CorruptMetadata key is {err.value.key!r}, not {victim!r}")


class ReaderAborted(AssertionError):
    """Reading a damaged table killed the reading process."""


class UntypedEscape(AssertionError):
    """Reading a damaged table raised an exception outside CaslakeError."""


# Searches the footer for the first byte whose bit ``mask``, flipped, gives a footer that
# (``abort``) makes pyarrow abort while building column chunk metadata, or (``row_count``)
# still has the file's row and row-group counts but another row count for row group 0.
# Each candidate is tried in a forked child (the search process itself only parses
# metadata, so forking it is safe).
_FOOTER_SEARCH = """
import os, struct, sys
import pyarrow as pa, pyarrow.parquet as pq
raw, mode, mask = open(sys.argv[1], "rb").read(), sys.argv[2], int(sys.argv[3])
(n,) = struct.unpack("<I", raw[-8:-4])
start = len(raw) - 8 - n
orig = pq.read_metadata(pa.BufferReader(raw[start:]))
for at in range(start, len(raw) - 8):
    b = bytearray(raw[start:])
    b[at - start] ^= mask
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            md = pq.read_metadata(pa.BufferReader(bytes(b)))
            if mode == "abort":
                for rg in range(md.num_row_groups):
                    for c in range(md.num_columns):
                        md.row_group(rg).column(c)
            elif (md.num_rows, md.num_row_groups) == (orig.num_rows, orig.num_row_groups) \
                    and md.row_group(0).num_rows != orig.row_group(0).num_rows:
                code = 7
        except BaseException:
            pass
        os._exit(code)
    status = os.waitpid(pid, 0)[1]
    if os.WIFSIGNALED(status) if mode == "abort" else os.WEXITSTATUS(status) == 7:
        print(at)
        break
"""

_SCAN = """
import sys, caslake
try:
    caslake.open_table(sys.argv[1]).scan().to_arrow()
except caslake.CaslakeError as e:
    print("typed", type(e).__name__, e)
except BaseException as e:
    print("untyped", type(e).__name__, e)
    sys.exit(3)
"""


def _footer_flip_scan(tmp_path: Path, mode: str, mask: int
                      ) -> tuple[str, int, int, subprocess.CompletedProcess[str]] | None:
    """Find a footer flip of the given kind in a fresh table, install it (ETag kept) and
    scan in a child process.  None if no such flip exists."""
    root = tmp_path / "t"
    t = build_data_table(root)
    victim = t.io.live_files(t.snapshot)[0].path
    raw = (root / victim).read_bytes()
    found = subprocess.run([sys.executable, "-c", _FOOTER_SEARCH, str(root / victim), mode,
                            str(mask)], capture_output=True, text=True, timeout=300)
    CASES[f"footer searched for a flip ({mode}, forked)"] += 1
    if not found.stdout.strip():
        return None
    at = int(found.stdout.split()[0])
    b = bytearray(raw)
    b[at] ^= mask
    _install(root / victim, bytes(b))
    scan = subprocess.run([sys.executable, "-c", _SCAN, str(root)], capture_output=True,
                          text=True, timeout=300)
    return victim, at, len(raw) - at, scan


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the search forks")
# fixed finding: one flipped bit in a data file's Parquet footer (ETag kept) makes pyarrow throw a
# C++ ParquetException ('Repetition level histogram size mismatch', 'ColumnMetaData type does
# not match ...') while caslake builds column chunk metadata for row-group pruning; it is not
# converted to a Python error, so the reading process aborts (SIGABRT).  caslake keeps no
# checksum of the footer to verify before parsing it
def test_footer_bit_flip_does_not_abort_the_reader(tmp_path: Path) -> None:
    hit = _footer_flip_scan(tmp_path, "abort", 0x40)
    if hit is None:
        return  # no single-bit (0x40) footer flip aborts pyarrow any more
    victim, at, from_end, scan = hit
    assert scan.returncode != 3, f"byte {at}: {scan.stdout}"
    if scan.returncode < 0:
        raise ReaderAborted(f"flipping bit 6 of byte {at} of {victim} ({from_end} bytes from "
                            f"its end) killed scan().to_arrow() with signal "
                            f"{-scan.returncode}: {scan.stderr.strip()[-300:]}")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the search forks")
# fixed finding: a footer whose row-group row counts are wrong (one flipped bit; the file's total
# still matching the manifest) makes scan() of a file with deletes raise OverflowError
# (negative row count into the roaring bitmap) or pyarrow.ArrowInvalid ('Filter inputs must
# all be the same length'): parse_footer does not check that row groups are non-negative and
# sum to num_rows, and the deletion mask is built and applied outside the error mapping in
# Scan._read_unit
def test_footer_row_group_count_mismatch_is_a_typed_error(tmp_path: Path) -> None:
    hit = _footer_flip_scan(tmp_path, "row_count", 0x01)
    if hit is None:
        return
    victim, at, from_end, scan = hit
    assert scan.returncode >= 0, scan.stderr[-500:]
    if scan.returncode == 3:
        raise UntypedEscape(f"flipping bit 0 of byte {at} of {victim} ({from_end} bytes from "
                            f"its end): {scan.stdout.strip()}")


# --- S3 -------------------------------------------------------------------------------------


@pytest.mark.s3
@pytest.mark.parametrize("prefix", ["plain/t", "with space/ü=1/t"])
def test_s3_odd_prefix_and_replaced_data_file(moto_server: str, s3_options: dict[str, str],
                                              prefix: str) -> None:
    import boto3

    from tests.conftest import make_bucket

    bucket = make_bucket(moto_server)
    uri = f"s3://{bucket}/{prefix}"
    t = caslake.create_table(uri, DATA, storage_options=s3_options,
                             write_options=WriteOptions(row_group_size=8192))
    t.append(data_rows(0, 2000))
    t.append(data_rows(2000, 2000))
    t.delete(f"id IN ({', '.join(map(str, sorted(DELETED)))})")
    assert as_rows(caslake.open_table(uri, storage_options=s3_options).scan().to_arrow()) == \
        expected_rows()
    victim = t.io.live_files(t.snapshot)[0].path
    sink = pa.BufferOutputStream()
    pq.write_table(data_rows(0, 10), sink)
    client = boto3.client("s3", endpoint_url=moto_server, region_name=s3_options["region"],
                          aws_access_key_id=s3_options["access_key_id"],
                          aws_secret_access_key=s3_options["secret_access_key"])
    client.put_object(Bucket=bucket, Key=f"{prefix}/{victim}", Body=sink.getvalue().to_pybytes())
    CASES["replaced data file on S3"] += 1
    with pytest.raises(CaslakeError) as err:
        caslake.open_table(uri, storage_options=s3_options).scan().to_arrow()
    assert getattr(err.value, "key", None) == victim or victim in str(err.value)


if __name__ == "__main__":
    if sys.argv[1:2] == ["flip"]:
        r, v, reg, sd, fst, cnt = sys.argv[2:8]
        flip_worker(r, v, reg, int(sd), int(fst), int(cnt))
