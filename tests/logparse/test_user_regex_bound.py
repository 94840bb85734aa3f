"""Issue 14: a tenant's ``loss-regex`` cannot stall the agent. The pattern runs in an engine
with a per-search time bound; a line it gives up on is counted (and, in the agent, reaches
``specon_agent_parse_errors_total``) and parsing goes on."""

from __future__ import annotations

import pytest

from specon.logparse import LogParser


@pytest.mark.timeout(60)
def test_a_catastrophic_pattern_on_a_long_line_does_not_stall() -> None:
    # With Python's re this pattern backtracks exponentially on a line of digits that does
    # not end in "x" (the "over 100 s on one 20-digit line").
    p = LogParser(regex=r"^(?P<loss>(\d+|\d\d)+)+x", regex_timeout_s=0.05)
    lines = [b"1" * n + b"y\n" for n in (20, 40, 5000)]
    recs = p.feed(b"".join(lines) + b"15x\n")
    assert [r.loss for r in recs] == [15.0]  # the loop went on to the next line


@pytest.mark.timeout(60)
def test_a_search_over_its_time_bound_is_counted_and_skipped() -> None:
    p = LogParser(regex=r"(?P<loss>(?:a|a?)+)+b", regex_timeout_s=1e-9, max_line=1 << 20)
    p.feed(b"a" * 200_000 + b"\n")
    assert p.counters.regex_timeouts == 1


@pytest.mark.timeout(60)
def test_all_searches_of_one_poll_share_a_time_budget() -> None:
    # Issue 29: 50 ms per line was no bound on a poll (300 lines: 15 s and more). Between two
    # new_budget() calls all the pattern's searches take about regex_budget_s; the lines
    # after that go to the built-in parsers, and the next budget tries the pattern again.
    import time

    p = LogParser(regex=r"(?P<loss>(a|aa)+)$", regex_timeout_s=0.05, regex_budget_s=0.1)
    hostile = (b"a" * 64 + b"b\n") * 100
    p.new_budget()
    start = time.perf_counter()
    recs = p.feed(hostile + b"loss=0.5\n")
    took = time.perf_counter() - start
    assert took < 1.0, took
    assert p.budget_spent and p.counters.regex_skipped > 50
    assert [r.loss for r in recs] == [0.5]  # read by the built-in parser
    p.new_budget()
    assert not p.budget_spent
    assert p.feed(b"aaa\n") == [] and p.counters.malformed == 1  # tried again: "aaa" matched
    p.drop_regex()
    assert not p.has_regex and [r.loss for r in p.feed(b"loss=0.25\n")] == [0.25]
