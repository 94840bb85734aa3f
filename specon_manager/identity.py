"""Who an agent is, from Kubernetes: its projected, audience-bound service-account token,
checked with a TokenReview and bound to the node of the pod the token is bound to.

The agent pod mounts a token whose audience is the manager's (``agent_audience``); the kubelet
rotates it. The manager sends each token it has not seen to the API server (TokenReview) and
accepts it only when the API server says it is authentic, for this audience, of one of the
agents' ServiceAccounts, and bound to a pod; the node the token speaks for is the pod's node:
the ``authentication.kubernetes.io/node-name`` extra the API server puts in the review (pod
tokens carry it since Kubernetes 1.30), else the ``spec.nodeName`` of the pod named by the
token's pod claims, fetched and matched by UID. A token of node A's agent therefore cannot
speak for node B, and a token copied out of a deleted agent pod stops working.

Answers are cached by the token's digest (bounded LRU): an accepted token until the sooner of
``ttl_s`` and its own expiry, a refused one for ``refused_ttl_s``. The reviews themselves are
limited (:mod:`specon_manager.review_limit`): a few at a time, a ceiling per second (over it
the caller is refused as ``throttled``, 503, and retries), one at a time per token. Refusals
are counted by reason (``specon_manager_agent_auth_refusals_total``). The static-token mode
(``NodeTokens``, ``tokens_file``) remains for tests and managers outside Kubernetes
(docs/security.md).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from specon_manager.auth import NodeTokens
from specon_manager.kube import KubeError, pod_path
from specon_manager.review_limit import ReviewLimiter

log = logging.getLogger(__name__)

NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"
POD_UID_EXTRA = "authentication.kubernetes.io/pod-uid"
SA_PREFIX = "system:serviceaccount:"
TOKENREVIEW_PATH = "/apis/authentication.k8s.io/v1/tokenreviews"

#: Why a token was refused: the label values of ``specon_manager_agent_auth_refusals_total``.
REASONS = ("missing", "malformed", "unknown_token", "expired", "audience", "not_authenticated",
           "not_agent", "unbound", "unavailable", "throttled")
#: Answers that are not remembered: the token was not judged (ask again later).
UNJUDGED = ("unavailable", "throttled")
#: How long a caller waits for another caller's review of the same token.
REVIEW_WAIT_S = 15.0
#: A bearer token longer than this is refused unread (a service-account JWT is about 1 KB).
MAX_TOKEN_BYTES = 16 * 1024


@dataclass(frozen=True, slots=True)
class Refusal:
    """A token that does not name a node: ``reason`` (one of REASONS) and what to log."""

    reason: str
    detail: str

    @property
    def status(self) -> int:
        # The API server could not be asked (or not now): the agent should retry, not think
        # itself refused.
        return 503 if self.reason in UNJUDGED else 401


Answer = str | Refusal  # the node the token speaks for, or why not


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def jwt_claims(token: str) -> dict[str, Any] | None:
    """The payload of a JWT, unverified (None: not a JWT). Only ever used to refuse early
    (expired, wrong audience) or to bound the cache: acceptance is the API server's word."""
    parts = token.split(".")
    if len(parts) != 3 or not parts[1]:
        return None
    try:
        raw = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))
        claims = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return claims if isinstance(claims, dict) else None


def _audiences(claims: dict[str, Any]) -> list[str]:
    aud = claims.get("aud")
    if isinstance(aud, str):
        return [aud]
    if isinstance(aud, list):
        return [a for a in aud if isinstance(a, str)]
    return []


def _first(extra: dict[str, Any], key: str) -> str | None:
    v = extra.get(key)
    if isinstance(v, list) and v and isinstance(v[0], str) and v[0]:
        return v[0]
    return None


class StaticTokens:
    """The static-token mode: a ``TOKEN NODE`` file (tests, managers outside Kubernetes)."""

    def __init__(self, tokens: NodeTokens) -> None:
        self.tokens = tokens

    def cached(self, token: str) -> Answer:
        node = self.tokens.node_for(token)
        return node if node is not None else Refusal("unknown_token", "unknown token")

    def authenticate(self, token: str) -> Answer:
        return self.cached(token)


class TokenReviewer:
    """Projected service-account tokens checked with TokenReview, bound to a node.

    ``review(body)`` posts a TokenReview and returns its answer; ``get(path)`` reads an
    object (None: not found); both raise KubeError/OSError when the API server cannot answer.
    ``service_accounts``: the agents' ServiceAccounts as ``namespace:name``. ``limits``: how
    many reviews are sent (:class:`ReviewLimiter`; the default: 4 at a time, 50 a second).
    """

    def __init__(self, review: Callable[[dict[str, Any]], dict[str, Any]],
                 get: Callable[[str], dict[str, Any] | None], audience: str,
                 service_accounts: Iterable[str], ttl_s: float = 60.0,
                 refused_ttl_s: float = 10.0, max_entries: int = 10_000,
                 clock: Callable[[], float] = time.time,
                 limits: ReviewLimiter | None = None) -> None:
        if not audience:
            raise ValueError("the agents' token audience must not be empty")
        self._review = review
        self._get = get
        self.audience = audience
        self.users = frozenset(SA_PREFIX + sa for sa in service_accounts)
        if not self.users:
            raise ValueError("name the agents' ServiceAccount(s) as namespace:name")
        self.ttl_s = ttl_s
        self.refused_ttl_s = refused_ttl_s
        self.max_entries = max_entries
        self._clock = clock
        self.limits = limits if limits is not None else ReviewLimiter()
        self._cache: OrderedDict[str, tuple[Answer, float]] = OrderedDict()
        self._lock = threading.Lock()
        self.reviews = 0  # TokenReviews sent (what the cache saves)

    # -- the cache ----------------------------------------------------------------------------
    def cached(self, token: str) -> Answer | None:
        """The remembered answer for this token, or None (ask :meth:`authenticate`)."""
        key = digest(token)
        with self._lock:
            hit = self._cache.get(key)
            if hit is None:
                return None
            if self._clock() >= hit[1]:
                del self._cache[key]
                return None
            self._cache.move_to_end(key)
            return hit[0]

    def _remember(self, token: str, answer: Answer, until: float) -> Answer:
        if isinstance(answer, Refusal) and answer.reason in UNJUDGED:
            return answer  # ask again next time
        with self._lock:
            self._cache[digest(token)] = (answer, until)
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)
        return answer

    def __len__(self) -> int:
        return len(self._cache)

    # -- the check ----------------------------------------------------------------------------
    def authenticate(self, token: str) -> Answer:
        """The node this token speaks for, or why not (may ask the API server)."""
        hit = self.cached(token)
        if hit is not None:
            return hit
        now = self._clock()
        refused_until = now + self.refused_ttl_s
        claims = jwt_claims(token)
        if claims is None:
            return self._remember(token, Refusal("malformed", "not a service-account token"),
                                  refused_until)
        exp = claims.get("exp")
        if not isinstance(exp, int | float) or isinstance(exp, bool):
            return self._remember(token, Refusal("unbound", "the token has no expiry: not a "
                                                 "projected service-account token"),
                                  refused_until)
        if exp <= now:
            return self._remember(token, Refusal("expired", "the token has expired"),
                                  refused_until)
        if self.audience not in _audiences(claims):
            return self._remember(token, Refusal(
                "audience", f"the token is not for audience {self.audience!r}"), refused_until)
        with self.limits.single(digest(token), REVIEW_WAIT_S) as mine:
            if not mine:  # another caller reviewed this token meanwhile: its answer
                hit = self.cached(token)
                return hit if hit is not None else Refusal(
                    "unavailable", "the token's review did not finish: retry")
            if not self.limits.allow():
                return Refusal("throttled", f"over {self.limits.per_s:g} token reviews a "
                                            "second: retry")
            with self.limits.slot():
                answer = self._ask(token)
            until = refused_until if isinstance(answer, Refusal) else min(
                self._clock() + self.ttl_s, exp)
            return self._remember(token, answer, until)

    def _ask(self, token: str) -> Answer:
        self.reviews += 1
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": {"token": token, "audiences": [self.audience]}}
        try:
            status = self._review(body).get("status") or {}
        except (KubeError, OSError) as exc:
            log.warning("TokenReview failed: %s", exc)
            return Refusal("unavailable", "the API server could not review the token")
        if not status.get("authenticated"):
            error = str(status.get("error") or "not authenticated")
            reason = ("expired" if "expired" in error else
                      "audience" if "audience" in error else "not_authenticated")
            return Refusal(reason, f"the API server refused the token: {error[:200]}")
        if self.audience not in (status.get("audiences") or []):
            return Refusal("audience", f"the token is not for audience {self.audience!r}")
        user = status.get("user") or {}
        username = str(user.get("username") or "")
        if username not in self.users:
            return Refusal("not_agent", f"{username or 'the token'} is not an agent's "
                                        "ServiceAccount")
        extra = user.get("extra") or {}
        if not isinstance(extra, dict):
            extra = {}
        node = _first(extra, NODE_NAME_EXTRA)
        if node is not None:
            return node
        return self._node_of_pod(username, _first(extra, POD_NAME_EXTRA),
                                 _first(extra, POD_UID_EXTRA))

    def _node_of_pod(self, username: str, pod: str | None, uid: str | None) -> Answer:
        """The node of the pod the token is bound to (API servers before 1.30 name the pod
        but not its node)."""
        if pod is None or uid is None:
            return Refusal("unbound", "the token is not bound to a pod")
        namespace = username[len(SA_PREFIX):].split(":", 1)[0]
        try:
            obj = self._get(pod_path(namespace, pod))
        except (KubeError, OSError) as exc:
            log.warning("pod %s/%s not looked up: %s", namespace, pod, exc)
            return Refusal("unavailable", "the API server could not be asked for the pod")
        md = (obj or {}).get("metadata") or {}
        node = ((obj or {}).get("spec") or {}).get("nodeName")
        if obj is None or md.get("uid") != uid or not isinstance(node, str) or not node:
            return Refusal("unbound", f"pod {namespace}/{pod} with uid {uid} is not on a node")
        return node
