"""The manager's client-side rate limit (specon_manager/rate_limit.py): ``burst`` requests at
once, then ``qps`` a second, on a clock the test moves (no wall-clock timing); and the Kube
client takes a token before each request it sends, retries included."""

from __future__ import annotations

from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest
from loopback import JsonHandler, serving

from specon_manager.kube import Kube
from specon_manager.rate_limit import TokenBucket
from specon_manager.service import build
from specon_manager.settings import ManagerSettings


class Clock:
    """A clock that moves only when told to, and a sleep that moves it."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_burst_goes_at_once_then_qps_a_second() -> None:
    clock = Clock()
    bucket = TokenBucket(qps=10, burst=3, clock=clock, sleep=clock.sleep)
    assert [bucket.take() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take() == pytest.approx(0.1)
    assert bucket.take() == pytest.approx(0.1)
    assert clock.slept == pytest.approx([0.1, 0.1])
    clock.now += 10  # idle: the bucket refills, to ``burst`` and no more
    assert [bucket.take() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take() == pytest.approx(0.1)
    assert bucket.waited_s == pytest.approx(0.3)


def test_waiting_callers_are_each_promised_their_own_token() -> None:
    """Callers that ask at the same instant (threads, the clock not moving between them) are
    told to wait 1/qps, 2/qps, ...: none is promised a token another was."""
    clock = Clock()
    bucket = TokenBucket(qps=4, burst=1, clock=clock, sleep=lambda s: None)
    assert [bucket.take() for _ in range(4)] == pytest.approx([0.0, 0.25, 0.5, 0.75])


def test_a_bucket_needs_a_rate_and_a_burst() -> None:
    for qps, burst in ((0, 1), (-1, 1), (1, 0)):
        with pytest.raises(ValueError):
            TokenBucket(qps, burst)


class _Ok(JsonHandler):
    def do_GET(self) -> None:
        self.reply(200, b'{"items":[]}')


@pytest.fixture
def url() -> Iterator[str]:
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), _Ok)) as out:
        yield out


def test_the_client_takes_a_token_per_request_and_its_copies_share_the_bucket(url: str) -> None:
    clock = Clock()
    kube = Kube(url)
    kube.rate = TokenBucket(qps=2, burst=2, clock=clock, sleep=clock.sleep)
    try:
        kube.list("/api/v1/pods")
        kube.with_timeout(5).list("/api/v1/pods")
        assert clock.slept == []
        kube.fenced(lambda: None).list("/api/v1/pods")
        assert clock.slept == pytest.approx([0.5])  # the third request waited for its token
    finally:
        kube.close()


def test_the_manager_limits_its_client_as_its_settings_say(url: str) -> None:
    kube = Kube(url)
    try:
        build(ManagerSettings(kubernetes=False, leader_election=False, kube_qps=7,
                              kube_burst=9), kube)
        assert kube.rate is not None
        assert (kube.rate.qps, kube.rate.burst) == (7, 9)
    finally:
        kube.close()
