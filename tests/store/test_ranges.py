"""Unit tests of byte-range coalescing (caslake.store.ranges)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caslake.errors import InvalidArgument, StoreError
from caslake.store.ranges import (
    DEFAULT_MAX_REQUEST,
    MiB,
    RangeRequest,
    plan_ranges,
    slice_results,
)


def spans(requests: list[RangeRequest]) -> list[tuple[int, int]]:
    return [(r.start, r.end) for r in requests]


def test_defaults() -> None:
    assert 64 * MiB == DEFAULT_MAX_REQUEST


def test_no_ranges_and_empty_ranges_make_no_requests() -> None:
    assert plan_ranges([]) == []
    assert plan_ranges([(5, 5), (0, 0)]) == []
    assert slice_results([(5, 5)], [], []) == [b""]


def test_gap_zero_merges_only_touching_and_overlapping() -> None:
    assert spans(plan_ranges([(0, 10), (10, 20)], max_gap=0)) == [(0, 20)]
    assert spans(plan_ranges([(0, 10), (5, 8)], max_gap=0)) == [(0, 10)]
    assert spans(plan_ranges([(0, 10), (11, 20)], max_gap=0)) == [(0, 10), (11, 20)]


def test_gap_threshold_is_inclusive() -> None:
    assert spans(plan_ranges([(0, 10), (110, 120)], max_gap=100)) == [(0, 120)]
    assert spans(plan_ranges([(0, 10), (111, 120)], max_gap=100)) == [(0, 10), (111, 120)]


def test_ranges_are_sorted_before_merging() -> None:
    ranges = [(300, 310), (0, 10), (150, 160)]
    assert spans(plan_ranges(ranges, max_gap=140)) == [(0, 310)]
    assert spans(plan_ranges(ranges, max_gap=139)) == [(0, 10), (150, 160), (300, 310)]


def test_merge_fills_requests_up_to_the_size_cap() -> None:
    got = plan_ranges([(0, 40), (50, 90), (95, 100)], max_gap=20, max_request=60)
    assert spans(got) == [(0, 60), (60, 100)]
    got = plan_ranges([(0, 40), (50, 90)], max_gap=5, max_request=60)
    assert spans(got) == [(0, 40), (50, 90)]


def test_split_tail_packs_with_the_next_range() -> None:
    got = plan_ranges([(0, 250), (255, 260)], max_gap=10, max_request=100)
    assert spans(got) == [(0, 100), (100, 200), (200, 260)]


def test_oversized_range_is_split() -> None:
    got = plan_ranges([(0, 250)], max_request=100)
    assert spans(got) == [(0, 100), (100, 200), (200, 250)]


def test_overlap_that_cannot_merge_fetches_only_the_remainder() -> None:
    got = plan_ranges([(0, 100), (50, 150)], max_gap=0, max_request=100)
    assert spans(got) == [(0, 100), (100, 150)]
    data = bytes(range(150))
    assert slice_results([(0, 100), (50, 150)], got, [data[0:100], data[100:150]]) == [
        data[0:100], data[50:150]]


def test_slice_results_across_split_requests() -> None:
    data = bytes(range(256)) * 4
    ranges = [(10, 900), (5, 6), (900, 1024)]
    reqs = plan_ranges(ranges, max_gap=0, max_request=100)
    payloads = [data[r.start:r.end] for r in reqs]
    assert slice_results(ranges, reqs, payloads) == [data[s:e] for s, e in ranges]


def test_short_payload_means_range_past_the_end() -> None:
    reqs = plan_ranges([(0, 10)])
    with pytest.raises(StoreError, match="object size is 7") as info:
        slice_results([(0, 10)], reqs, [b"x" * 7], key="k")
    assert info.value.key == "k"


@pytest.mark.parametrize("bad", [[(-1, 3)], [(5, 4)], [(1, 2, 3)], [(0.5, 2)]])
def test_invalid_ranges_are_rejected(bad: list[tuple[int, int]]) -> None:
    with pytest.raises(InvalidArgument):
        plan_ranges(bad)


def test_invalid_parameters_are_rejected() -> None:
    with pytest.raises(InvalidArgument):
        plan_ranges([(0, 1)], max_gap=-1)
    with pytest.raises(InvalidArgument):
        plan_ranges([(0, 1)], max_request=0)


range_lists = st.lists(
    st.tuples(st.integers(0, 2000), st.integers(0, 300)).map(lambda t: (t[0], t[0] + t[1])),
    max_size=25,
)


@settings(max_examples=300, deadline=None)
@given(ranges=range_lists, max_gap=st.integers(0, 400), max_request=st.integers(1, 700))
def test_plan_properties(ranges: list[tuple[int, int]], max_gap: int, max_request: int) -> None:
    reqs = plan_ranges(ranges, max_gap=max_gap, max_request=max_request)
    # Sorted, disjoint, non-empty, capped.
    for a, b in itertools.pairwise(reqs):
        assert a.end <= b.start
    assert all(0 < r.length <= max_request for r in reqs)
    # Every requested byte is covered, and no request holds only unrequested bytes.
    wanted: set[int] = set()
    for s, e in ranges:
        wanted.update(range(s, e))
    covered: set[int] = set()
    for r in reqs:
        part = set(range(r.start, r.end))
        assert part & wanted, f"request {r} fetches nothing requested"
        assert r.start in wanted and (r.end - 1) in wanted
        covered |= part
    assert wanted <= covered
    # A request is closed only when the next wanted byte is beyond the gap
    # threshold or beyond the size cap.
    for a, b in itertools.pairwise(reqs):
        assert b.start - a.end > max_gap or b.start >= a.start + max_request


@settings(max_examples=300, deadline=None)
@given(ranges=range_lists, max_gap=st.integers(0, 400), max_request=st.integers(1, 700))
def test_slicing_equals_python_slicing(ranges: list[tuple[int, int]], max_gap: int,
                                       max_request: int) -> None:
    data = bytes(i % 251 for i in range(2400))
    reqs = plan_ranges(ranges, max_gap=max_gap, max_request=max_request)
    payloads = [data[r.start:r.end] for r in reqs]
    assert slice_results(ranges, reqs, payloads) == [data[s:e] for s, e in ranges]
