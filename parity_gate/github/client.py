"""A small GitHub REST client that is a good API citizen.

One `requests.Session`; a timeout on every call; retries with backoff on 5xx
and connection errors; on 403/429 with rate-limit headers it waits for the
reset when that is short and otherwise stops with `RateLimited`; the search
API is paced (30/min with a token, 10/min without); GET responses are cached
for the run and, for searches, across runs (`cache_dir`, revalidated with
ETags). The token is sent in a header only: it is never in a URL, a message,
a log line or a cache file. The base URL is configurable (GitHub Enterprise
Server; the tests' local server).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import requests
from pydantic import BaseModel, ConfigDict, ValidationError

from parity_gate import __version__

DEFAULT_API_URL = "https://api.github.com"
RETRIABLE = frozenset({500, 502, 503, 504})


class GitHubError(Exception):
    """A GitHub call failed for good; the message says which call and why (never the token)."""


class BudgetSpent(GitHubError):
    """This run's search budget is spent; answers already cached are still served."""


class RateLimited(GitHubError):
    """The rate limit is spent until `reset` (epoch seconds), too far away to wait for."""

    def __init__(self, message: str, reset: float | None) -> None:
        super().__init__(message)
        self.reset = reset


@dataclass
class CallStats:
    """What one client did: requests sent, answers served from the caches, retries, waits."""

    requests: Counter[str] = field(default_factory=Counter)  # by kind: search, read, write
    run_cache_hits: int = 0
    disk_cache_hits: int = 0
    not_modified: int = 0  # 304 answers to a revalidated cache entry
    retries: int = 0
    waited_s: float = 0.0

    @property
    def sent(self) -> int:
        return sum(self.requests.values())


@dataclass
class Response:
    status: int
    body: Any
    headers: Mapping[str, str]


@dataclass(frozen=True)
class ClientSettings:
    """How a client paces, retries and caches: the per-call timeout; retries with
    exponential backoff (doubling from `backoff_s`); the longest rate-limit reset worth
    waiting for; searches per minute (None: GitHub's own limit, 30 with a token and 10
    without) and the pause between writes; the cross-run search cache and its lifetime;
    the searches this run may send (None: no limit); and the sleep to wait with (the
    tests' clock)."""

    timeout_s: float = 10.0
    retries: int = 3
    backoff_s: float = 1.0
    max_wait_s: float = 60.0
    search_per_minute: float | None = None
    write_interval_s: float = 2.0
    cache_dir: Path | None = None
    cache_ttl_s: float = 6 * 3600.0
    search_budget: int | None = None
    sleep: Callable[[float], None] = time.sleep


class GitHubClient:
    """REST calls against `api_url` with `token` (None: unauthenticated)."""

    def __init__(self, api_url: str = DEFAULT_API_URL, token: str | None = None,
                 settings: ClientSettings | None = None) -> None:
        self.api_url = api_url.rstrip("/")
        self._token = token or None
        self.settings = settings = settings or ClientSettings()
        per_minute = settings.search_per_minute or (30.0 if self._token else 10.0)
        self.search_interval_s = 60.0 / per_minute
        self._last: dict[str, float] = {}  # kind → monotonic time of its last request
        self._run_cache: dict[str, Response] = {}
        self.stats = CallStats()
        self.session = requests.Session()
        self.session.headers.update({
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": f"parity-gate/{__version__}",
        })
        if self._token:
            self.session.headers["Authorization"] = f"Bearer {self._token}"

    @property
    def authenticated(self) -> bool:
        return self._token is not None

    def redact(self, text: str) -> str:
        """`text` with the token (should any layer echo it) replaced."""
        return text.replace(self._token, "***") if self._token else text

    # ---- calls

    def get(self, path: str, params: Mapping[str, Any] | None = None) -> Response:
        return self._call("GET", path, params=params, kind="read")

    def post(self, path: str, body: Mapping[str, Any]) -> Response:
        return self._call("POST", path, body=body, kind="write")

    def patch(self, path: str, body: Mapping[str, Any]) -> Response:
        return self._call("PATCH", path, body=body, kind="write")

    def search_issues(self, query: str, per_page: int = 30) -> Response:
        """`GET /search/issues` (issues and pull requests), paced and cached across runs."""
        params = {"q": query, "per_page": per_page, "advanced_search": "true"}
        return self._call("GET", "/search/issues", params=params, kind="search",
                          persistent=True)

    def paginate(self, path: str, params: Mapping[str, Any] | None = None,
                 max_pages: int = 50) -> Iterator[Any]:
        """Every item of a list endpoint, following `Link: rel="next"` (same host only)."""
        response = self._call("GET", path, params={**(params or {}), "per_page": 100},
                              kind="read", cache=False)
        for _ in range(max_pages):
            yield from response.body or []
            nxt = _next_link(response.headers.get("Link", ""))
            if not nxt or not nxt.startswith(self.api_url + "/"):
                return
            response = self._call("GET", nxt[len(self.api_url):], kind="read", cache=False)

    # ---- machinery

    def _call(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
              body: Mapping[str, Any] | None = None, kind: str, cache: bool = True,
              persistent: bool = False) -> Response:
        url = self.api_url + path
        key = f"{method} {url}?{urlencode(sorted((params or {}).items()))}"
        if method == "GET" and cache and key in self._run_cache:
            self.stats.run_cache_hits += 1
            return self._run_cache[key]
        stored = self._disk_read(key) if persistent else None
        if stored is not None and time.time() - stored["fetched_at"] < self.settings.cache_ttl_s:
            self.stats.disk_cache_hits += 1
            response = Response(200, stored["body"], {})
            self._run_cache[key] = response
            return response
        headers = {"If-None-Match": stored["etag"]} if stored and stored.get("etag") else {}
        budget = self.settings.search_budget
        if kind == "search" and budget is not None and self.stats.requests["search"] >= budget:
            raise BudgetSpent(f"the search budget of {budget} searches per run "
                              "is spent (the answers are cached: the next run goes on)")
        response = self._send(method, url, params, body, headers, kind)
        if response.status == 304 and stored is not None:
            self.stats.not_modified += 1
            response = Response(200, stored["body"], response.headers)
            self._disk_write(key, response)
        elif persistent:
            self._disk_write(key, response)
        if method == "GET" and cache:
            self._run_cache[key] = response
        return response

    def _send(self, method: str, url: str, params: Mapping[str, Any] | None,
              body: Mapping[str, Any] | None, headers: dict[str, str], kind: str) -> Response:
        what = f"{method} {url.removeprefix(self.api_url)}"
        attempt = 0
        while True:
            self._pace(kind)
            self.stats.requests[kind] += 1
            try:
                r = self.session.request(method, url, params=params, json=body,
                                         headers=headers, timeout=self.settings.timeout_s)
            except (requests.ConnectionError, requests.Timeout) as exc:
                if attempt < self.settings.retries:
                    attempt += 1
                    self._backoff(attempt)
                    continue
                raise GitHubError(self.redact(f"{what}: no answer after {attempt + 1} tries "
                                              f"({type(exc).__name__})")) from None
            if r.status_code in RETRIABLE and attempt < self.settings.retries:
                attempt += 1
                self._backoff(attempt)
                continue
            wait = _rate_limit_wait(r)
            if wait is not None:
                reset = time.time() + wait
                if wait <= self.settings.max_wait_s and attempt < self.settings.retries:
                    attempt += 1
                    self.stats.waited_s += wait
                    self.settings.sleep(wait)
                    continue
                raise RateLimited(f"{what}: rate limit exceeded (HTTP {r.status_code}); it "
                                  f"resets in {wait:.0f} s, more than the "
                                  f"{self.settings.max_wait_s:.0f} s this run waits", reset)
            if r.status_code == 304 or 200 <= r.status_code < 300:
                return Response(r.status_code, _json(r) if r.status_code != 304 else None,
                                dict(r.headers))
            raise GitHubError(self.redact(f"{what}: HTTP {r.status_code}: {_message(r)}"))

    def _pace(self, kind: str) -> None:
        """Space searches by the search limit and writes by `write_interval_s`."""
        interval = {"search": self.search_interval_s,
                    "write": self.settings.write_interval_s}.get(kind)
        last = self._last.get(kind)
        if interval and last is not None:
            wait = last + interval - time.monotonic()
            if wait > 0:
                self.stats.waited_s += wait
                self.settings.sleep(wait)
        self._last[kind] = time.monotonic()

    def _backoff(self, attempt: int) -> None:
        self.stats.retries += 1
        delay = self.settings.backoff_s * 2 ** (attempt - 1)
        self.stats.waited_s += delay
        self.settings.sleep(delay)

    # ---- the cross-run cache: one JSON file per request, keyed by a hash of it

    def _disk_path(self, key: str) -> Path | None:
        if self.settings.cache_dir is None:
            return None
        return self.settings.cache_dir / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"

    def _disk_read(self, key: str) -> dict[str, Any] | None:
        """The stored answer to `key`, validated as a whole; a malformed file is one
        warning and a miss (the request is made again and the file rewritten)."""
        path = self._disk_path(key)
        if path is None or not path.exists():
            return None
        try:
            entry = _DiskEntry.model_validate_json(path.read_bytes())
        except (OSError, ValidationError) as err:
            why = (f"{'.'.join(map(str, e['loc'])) or '(top level)'}: {e['msg']}"
                   if isinstance(err, ValidationError) and (e := err.errors()[0]) else str(err))
            print(f"parity-gate: warning: {path}: malformed GitHub answer cache ({why}); "
                  "asking again", file=sys.stderr)
            return None
        return entry.model_dump() if entry.key == key else None  # a hash collision

    def _disk_write(self, key: str, response: Response) -> None:
        path = self._disk_path(key)
        if path is None:
            return
        entry = {"key": key, "fetched_at": time.time(), "etag": response.headers.get("ETag"),
                 "body": response.body}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(entry, fh)
            os.replace(tmp, path)
        except OSError:  # a cache that cannot be written is only a slower next run
            pass


class _DiskEntry(BaseModel):
    """One cached GitHub answer, as `_disk_write` stores it."""

    model_config = ConfigDict(extra="forbid", strict=True)
    key: str
    fetched_at: float
    etag: str | None
    body: Any


def search_rate(env: Mapping[str, str]) -> float | None:
    """PARITY_GATE_SEARCH_PER_MINUTE (a GitHub Enterprise Server's own search limit), read
    the same way by the Action and `parity-gate upstream`; None: GitHub's own."""
    try:
        value = float(env.get("PARITY_GATE_SEARCH_PER_MINUTE", ""))
    except ValueError:
        return None
    return value if value > 0 else None


def _rate_limit_wait(r: requests.Response) -> float | None:
    """Seconds until a 403/429 rate limit lifts; None when the answer is not a rate limit."""
    if r.status_code not in (403, 429):
        return None
    retry_after = r.headers.get("Retry-After")
    if retry_after and retry_after.strip().isdigit():  # secondary rate limit
        return float(retry_after)
    if r.headers.get("X-RateLimit-Remaining") == "0":
        reset = r.headers.get("X-RateLimit-Reset", "")
        return max(0.0, float(reset) - time.time()) + 1.0 if reset.isdigit() else 60.0
    if r.status_code == 429:
        return 60.0
    return None


def _json(r: requests.Response) -> Any:
    try:
        return r.json()
    except ValueError:
        raise GitHubError(f"{r.request.method} {r.url}: HTTP {r.status_code} with a body that "
                          "is not JSON (expected GitHub's REST API at this base URL)") from None


def _message(r: requests.Response) -> str:
    """GitHub's own message (and a validation error's details), kept short."""
    try:
        data = r.json()
    except ValueError:
        return r.text[:200] or r.reason
    if not isinstance(data, dict):
        return str(data)[:200]
    parts = [str(data.get("message", r.reason))]
    for err in data.get("errors") or []:
        if isinstance(err, dict):
            parts.append(str(err.get("message") or f"{err.get('field')} {err.get('code')}"))
    return "; ".join(parts)[:300]


def _next_link(header: str) -> str | None:
    for part in header.split(","):
        url, _, rel = part.partition(";")
        if 'rel="next"' in rel:
            return url.strip().strip("<>")
    return None
