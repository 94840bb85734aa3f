"""Fault injection, named as such: a TCP relay in front of the test plane's real kube-apiserver
that makes it slow, which the real API server cannot be made on demand (issue 32: "a slow API
server leaves no leader").

It relays bytes as they are (TLS passes through; the clients verify the API server's own
certificate) and holds back the first bytes a client sends after each answer (and on a new
connection) for a random ``delay`` seconds: on a kept-alive connection, each request reaches
the API server that much later. A new TLS connection pays it about twice (its handshake)."""

from __future__ import annotations

import contextlib
import random
import socket
import threading
import time
from typing import Self


class SlowProxy:
    def __init__(self, upstream: tuple[str, int], delay: tuple[float, float],
                 seed: int = 0) -> None:
        self.upstream = upstream
        #: Seconds each request is held back, drawn from this range; may be changed while the
        #: proxy runs ((0, 0): not slow).
        self.delay = delay
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._closed = threading.Event()
        #: Requests held back so far (what a test may check to know the fault was there).
        self.delayed = 0

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> Self:
        threading.Thread(target=self._accept, name="slowproxy", daemon=True).start()
        return self

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        with self._lock:
            for s in self._sockets:
                s.close()

    def _pause(self) -> float:
        with self._lock:
            self.delayed += 1
            return self._random.uniform(*self.delay)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            try:
                server = socket.create_connection(self.upstream)
            except OSError:  # the API server is down (the campaign stops it): as it would be
                client.close()
                continue
            with self._lock:
                self._sockets += [client, server]
            answered = threading.Event()
            answered.set()  # a new connection's first bytes are held back too
            threading.Thread(target=self._pipe, args=(client, server, answered, True),
                             daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, answered, False),
                             daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, answered: threading.Event,
              upward: bool) -> None:
        try:
            while not self._closed.is_set():
                data = src.recv(65536)
                if not data:
                    break
                if upward and answered.is_set():
                    answered.clear()
                    time.sleep(self._pause())
                elif not upward:
                    answered.set()
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
