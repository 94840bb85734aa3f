"""Limit Events (specon_agent.events): at most one per pod per window, the changes in between
merged into the next; the loop never waits for the API (docs/agent.md, "Events")."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from typing import Any

import pytest

from specon_agent.events import (
    CONTROLLER,
    LOWERED,
    RAISED,
    RESTORED,
    Aggregator,
    LimitEvents,
    LimitNote,
)


def note(before: float | None, after: float | None, pod: str = "train-a",
         **kw: Any) -> LimitNote:
    return LimitNote("team-a", pod, f"uid-{pod}", "main", before, after, **kw)


def wait_until(what: str, ok: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_the_first_change_goes_out_at_once_and_the_rest_of_the_window_is_merged() -> None:
    agg = Aggregator(window_s=60)
    first = agg.offer(note(2, 1, category="WC", why="set by FlowCon (list WL)"), now=100)
    assert first is not None and first.reason == LOWERED and first.count == 1
    assert agg.offer(note(1, 0.5), now=110) is None
    assert agg.offer(note(0.5, 0.75), now=150) is None
    assert agg.offer(note(3, 2, pod="train-b"), now=150) is not None  # pods are apart
    assert agg.next_due() == 160
    assert agg.due(now=159.9) == []
    [merged] = agg.due(now=160)
    # from the limit before the first merged change to the last one's
    assert (merged.before, merged.after, merged.count) == (1, 0.75, 2)
    assert merged.reason == LOWERED
    assert merged.message(60) == ("CPU limit of container main lowered from 1 core to 0.75 "
                                  "cores (2 changes within 60 s, merged)")
    assert agg.due(now=200) == [] and agg.next_due() == float("inf")
    # one window after its last Event a pod's next change goes out at once again
    assert agg.offer(note(0.75, 1), now=220) is not None
    assert agg.due(now=10_000) == [] and not agg._posted  # quiet pods are forgotten


def test_a_flap_that_ends_where_it_began_says_its_last_direction() -> None:
    agg = Aggregator(window_s=60)
    assert agg.offer(note(2, 1), now=0) is not None
    for i in range(50):  # a flapping limit: 1, 2, 1, 2 ...
        assert agg.offer(note(1, 2) if i % 2 == 0 else note(2, 1), now=i) is None
    [merged] = agg.due(now=60)
    assert (merged.before, merged.after, merged.count) == (1, 1, 50)
    assert merged.reason == LOWERED  # its last change lowered it
    assert "(50 changes within 60 s, merged)" in merged.message(60)


def test_the_message_names_the_limits_the_category_and_why() -> None:
    assert note(None, 0.5, category="CC", why="set by FlowCon (list CL)").message(60) == (
        "CPU limit of container main lowered from unlimited to 0.5 cores; job CC; set by "
        "FlowCon (list CL)")
    assert note(0.5, None).reason == RAISED
    restored = note(0.5, 2, restored=True, why="the agent is stopping")
    assert restored.reason == RESTORED
    assert restored.message(60).startswith("CPU limit of container main restored from 0.5 cores "
                                           "to 2 cores")


class Clock:
    """The poster's clock, moved by the test."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_the_poster_posts_the_merged_event_when_the_window_ends() -> None:
    sent: list[dict[str, Any]] = []
    counts: Counter[str] = Counter()
    clock = Clock()
    events = LimitEvents(sent.append, "node-a", window_s=30,
                         count=lambda o: counts.update([o]), clock=clock)
    events.offer(note(2, 1, category="PC"))
    wait_until("the first Event", lambda: len(sent) == 1)
    for after in (0.5, 0.25, 0.5):
        events.offer(note(1, after))
    wait_until("three merged", lambda: counts["merged"] == 3)
    assert len(sent) == 1
    clock.t += 30  # the window ends: the thread wakes within a second of its own
    wait_until("the merged Event", lambda: len(sent) == 2)
    events.close()
    first, merged = sent
    assert first["reason"] == LOWERED and first["action"] == "Throttle"
    assert first["reportingController"] == CONTROLLER == "specon.io/agent"
    assert first["reportingInstance"] == "node-a"
    assert first["regarding"] == {"apiVersion": "v1", "kind": "Pod", "name": "train-a",
                                  "namespace": "team-a", "uid": "uid-train-a"}
    assert first["note"] == "CPU limit of container main lowered from 2 cores to 1 core; job PC"
    assert merged["note"].endswith("(3 changes within 30 s, merged)")
    assert counts == {"posted": 2, "merged": 3}


def test_close_posts_what_is_still_merged() -> None:
    sent: list[dict[str, Any]] = []
    events = LimitEvents(sent.append, "node-a", window_s=3600)
    events.offer(note(2, 1))
    events.offer(note(1, 2, restored=True))
    events.close()
    assert [b["reason"] for b in sent] == [LOWERED, RESTORED]


def test_a_full_queue_drops_and_counts_never_waits() -> None:
    release = threading.Event()
    counts: Counter[str] = Counter()

    def held(body: dict[str, Any]) -> None:  # an API that does not answer yet
        release.wait(30)

    events = LimitEvents(held, "node-a", window_s=0, maxsize=2,
                         count=lambda o: counts.update([o]))
    for i in range(10):
        events.offer(note(1, 2, pod=f"p{i}"))  # returns at once, whatever the API does
    assert counts["dropped"] >= 7  # one in the thread, two queued
    release.set()
    events.close()
    assert counts["posted"] + counts["dropped"] == 10


def test_api_failures_are_counted_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    counts: Counter[str] = Counter()

    def refusing(body: dict[str, Any]) -> None:  # fault injection: an API that refuses
        raise RuntimeError("403 Forbidden")

    caplog.set_level(logging.WARNING, logger="specon_agent.events")
    events = LimitEvents(refusing, "node-a", window_s=0, count=lambda o: counts.update([o]))
    for i in range(3):
        events.offer(note(1, 2, pod=f"p{i}"))
    events.close()
    assert counts == {"failed": 3}
    assert len(caplog.records) == 1 and "403 Forbidden" in caplog.text
