"""Ref objects (pure layer): names, keys, and strict parsing of tags and holds."""

from __future__ import annotations

import json

import pytest

from caslake.errors import (
    CorruptMetadata,
    InvalidArgument,
    InvalidRefName,
    UnsupportedFormatVersion,
)
from caslake.format import FORMAT_VERSION
from caslake.format.keys import POINTER_KEY
from caslake.format.refs import (
    BRANCH_PREFIX,
    TAG_PREFIX,
    Hold,
    RefTarget,
    Tag,
    branch_key,
    hold_key,
    name_from_key,
    parse_hold,
    parse_tag,
    tag_key,
    validate_ref_name,
)

TARGET = RefTarget(3, "manifest/v00000000000000000003-" + "a" * 32 + ".json", "b" * 32)


@pytest.mark.parametrize("name", ["", "..", "a/..", "../x", "/a", "a/", "a//b", "./a",
                                  "a\x00b", "a\nb", "tab\tx", "a b", "a\\b", "x:y", "ü",
                                  "a" * 201, "%2F", "*"])
def test_bad_names_are_typed_errors(name: str) -> None:
    with pytest.raises(InvalidRefName) as e:
        validate_ref_name(name)
    assert isinstance(e.value, InvalidArgument) and e.value.name == name


@pytest.mark.parametrize("name", [None, 3, b"x"])
def test_non_string_names_are_typed_errors(name: object) -> None:
    with pytest.raises(InvalidRefName):
        validate_ref_name(name)


@pytest.mark.parametrize("name", ["audit", "release/2026-q3", "v1.2.3", "a=b+c@d", "x_y"])
def test_good_names_round_trip_through_their_flat_keys(name: str) -> None:
    assert validate_ref_name(name) == name
    bk, tk = branch_key(name), tag_key(name)
    assert "/" not in bk[len(BRANCH_PREFIX):] and "/" not in tk[len(TAG_PREFIX):]
    assert name_from_key(bk, BRANCH_PREFIX) == name
    assert name_from_key(tk, TAG_PREFIX) == name


def test_main_is_the_table_pointer_and_stray_keys_are_ignored() -> None:
    assert branch_key("main") == POINTER_KEY
    assert name_from_key(BRANCH_PREFIX + "a%20b", BRANCH_PREFIX) is None
    assert name_from_key(BRANCH_PREFIX + "a/b", BRANCH_PREFIX) is None  # not the encoding
    assert name_from_key("data/x", BRANCH_PREFIX) is None


def test_tag_and_tombstone_round_trip() -> None:
    tag = Tag("q3", "t1", TARGET, "main", created_at_ms=1_700_000_000_000)
    assert parse_tag(tag.to_bytes(), tag_key("q3")) == tag
    dead = tag.tombstone(1_700_000_000_500)
    back = parse_tag(dead.to_bytes(), tag_key("q3"))
    assert back.dropped and back == dead and back.target == TARGET
    assert dead.tombstone(0).dropped_at_ms >= dead.created_at_ms


def test_hold_round_trip_and_key() -> None:
    hold = Hold("c" * 32, "s3://b/clone", "t1", TARGET, "main", created_at_ms=5)
    assert hold.key == hold_key("c" * 32) == "refs/holds/" + "c" * 32 + ".json"
    assert parse_hold(hold.to_bytes(), hold.key) == hold
    with pytest.raises(InvalidRefName):
        hold_key("../x")


def _tag_doc() -> dict:
    return Tag("q3", "t1", TARGET, "main", created_at_ms=1_700_000_000_000).to_json()


@pytest.mark.parametrize("mutate", [
    lambda d: d.update(name="other"),                    # name does not match the key
    lambda d: d.update(manifest="../../etc/passwd"),     # unsafe manifest key
    lambda d: d.update(manifest="data/x.parquet"),       # not a manifest
    lambda d: d.update(version=-1),
    lambda d: d.update(version=True),
    lambda d: d.update(commit_id="xyz"),
    lambda d: d.update(branch="a/.."),
    lambda d: d.update(created_at="yesterday"),
    lambda d: d.update(dropped_at="2000-01-01T00:00:00.000Z"),  # before created_at
    lambda d: d.update(format="caslake.pointer"),
    lambda d: d.pop("table_id"),
])
def test_corrupt_tags_are_corrupt_metadata(mutate) -> None:  # type: ignore[no-untyped-def]
    doc = _tag_doc()
    mutate(doc)
    with pytest.raises(CorruptMetadata) as e:
        parse_tag(json.dumps(doc).encode(), tag_key("q3"))
    assert e.value.key == tag_key("q3")


@pytest.mark.parametrize("raw", [b"", b"{", b"[]", b"null", b'{"format":"caslake.tag"}'])
def test_garbage_tags_are_corrupt_metadata(raw: bytes) -> None:
    with pytest.raises(CorruptMetadata):
        parse_tag(raw, tag_key("q3"))


def test_newer_ref_format_is_refused() -> None:
    doc = _tag_doc()
    doc["format_version"] = FORMAT_VERSION + 1
    with pytest.raises(UnsupportedFormatVersion):
        parse_tag(json.dumps(doc).encode(), tag_key("q3"))


def test_hold_key_must_match_its_holder() -> None:
    hold = Hold("c" * 32, "s3://b/clone", "t1", TARGET, "main", created_at_ms=5)
    with pytest.raises(CorruptMetadata):
        parse_hold(hold.to_bytes(), hold_key("d" * 32))
