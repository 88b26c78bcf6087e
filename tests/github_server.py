"""A local GitHub REST server for the GitHub tests: real HTTP on 127.0.0.1, in a thread.

It implements the endpoints parity-gate calls, answers in the shapes of GitHub's
own OpenAPI description (tests/data/github-openapi, an excerpt of
@octokit/openapi) and validates every response it sends and every request body
it receives against that description; `errors` collects what did not validate.
Faults (500s, timeouts, 403 rate limits with reset headers, 422s) are injected
per endpoint and consumed in order.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import jsonschema

SPEC = json.loads((Path(__file__).parent / "data" / "github-openapi"
                   / "api.github.com.excerpt.json").read_text(encoding="utf-8"))


def _nullable(schema: Any) -> Any:
    """OpenAPI 3.0 schema objects → JSON Schema: `nullable: true` becomes a null branch."""
    if isinstance(schema, list):
        return [_nullable(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _nullable(v) for k, v in schema.items() if k != "nullable"}
    if schema.get("nullable"):
        if "type" in out and "enum" not in out:
            out["type"] = [out["type"], "null"]
        else:
            out = {"anyOf": [out, {"type": "null"}]}
    return out


COMPONENTS = _nullable(SPEC["components"])


def _validator(schema: dict[str, Any]) -> jsonschema.protocols.Validator:
    return jsonschema.Draft202012Validator({**_nullable(schema), "components": COMPONENTS},
                                           format_checker=jsonschema.FormatChecker())


def _resolve(schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        _, _, section, name = schema["$ref"].split("/")
        schema = SPEC["components"][section][name]
    return schema


def operation(template: str, method: str) -> dict[str, Any]:
    return SPEC["paths"][template][method.lower()]


def response_schema(template: str, method: str, status: int) -> dict[str, Any] | None:
    resp = operation(template, method)["responses"].get(str(status))
    if resp is None and status >= 400:  # undocumented for this operation: GitHub's error shape
        return {"$ref": "#/components/schemas/basic-error"}
    if resp is None:
        raise AssertionError(f"{method} {template}: status {status} is not in GitHub's spec")
    content = _resolve(resp).get("content", {}).get("application/json")
    return content["schema"] if content else None


def request_schema(template: str, method: str) -> dict[str, Any] | None:
    body = operation(template, method).get("requestBody")
    return body["content"]["application/json"]["schema"] if body else None


def instance(schema: Any, **overrides: Any) -> Any:
    """The smallest object the schema accepts (nullable fields null), then `overrides`."""
    schema = _resolve(schema)
    if overrides:
        base = instance(schema)
        base.update(overrides)
        return base
    if schema.get("nullable"):
        return None
    if "allOf" in schema:
        out: dict[str, Any] = {}
        for part in schema["allOf"]:
            out.update(instance(part))
        return out
    for key in ("oneOf", "anyOf"):
        if key in schema:
            return instance(schema[key][0])
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type", "object")
    if kind == "object":
        props = schema.get("properties", {})
        return {name: instance(props.get(name, {"type": "string"}))
                for name in schema.get("required", [])}
    return {"string": _string(schema), "integer": 1, "number": 1.0, "boolean": False,
            "array": []}[kind]


def _string(schema: dict[str, Any]) -> str:
    return {"date-time": "2026-01-01T00:00:00Z", "uri": "https://example.invalid/x",
            "email": "x@example.invalid", "uri-template": "https://example.invalid/{x}"
            }.get(schema.get("format", ""), "x")


def _schema(name: str) -> dict[str, Any]:
    return SPEC["components"]["schemas"][name]


def user(login: str, kind: str = "User") -> dict[str, Any]:
    return instance(_schema("simple-user"), login=login, type=kind, id=abs(hash(login)) % 10**6)


@dataclass
class Fault:
    """One injected failure: `kind` is 500, timeout, ratelimit, secondary, 422, 403."""

    route: str              # "comments", "comment", "pull", "issues", "search"
    kind: str
    reset_in: float = 0.0   # ratelimit: seconds until X-RateLimit-Reset
    delay: float = 0.0      # timeout: how long the answer is held back


@dataclass
class Logged:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any
    headers: dict[str, str]
    at: float
    route: str
    status: int = 0


@dataclass
class Item:
    """An issue or pull request the search endpoint can find."""

    repo: str
    number: int
    title: str
    body: str = ""
    pr: bool = False
    state: str = "open"
    merged: bool = False
    labels: list[str] = field(default_factory=list)
    updated_at: str = "2026-01-01T00:00:00Z"
    milestone: str | None = None  # e.g. "v0.7.3": the release a merged fix ships in
    merged_at: str = "2025-12-01T00:00:00Z"

    def to_json(self) -> dict[str, Any]:
        kind = "pull" if self.pr else "issues"
        extra: dict[str, Any] = {}
        if self.pr:
            extra["pull_request"] = instance(
                _schema("issue-search-result-item")["properties"]["pull_request"],
                merged_at=self.merged_at if self.merged else None,
                html_url=f"https://github.com/{self.repo}/pull/{self.number}")
        if self.milestone is not None:
            schema = {k: v for k, v in _schema("nullable-milestone").items()
                      if k != "nullable"}
            extra["milestone"] = instance(schema, title=self.milestone, state="closed",
                                          number=sum(map(ord, self.milestone)))
        return instance(
            _schema("issue-search-result-item"), number=self.number, title=self.title,
            body=self.body, state=self.state, updated_at=self.updated_at,
            html_url=f"https://github.com/{self.repo}/{kind}/{self.number}",
            repository_url=f"https://api.github.com/repos/{self.repo}",
            labels=[{"name": n} for n in self.labels], score=1.0, **extra)


ROUTES = [
    ("comments", re.compile(r"^/repos/([^/]+/[^/]+)/issues/(\d+)/comments$"),
     "/repos/{owner}/{repo}/issues/{issue_number}/comments"),
    ("comment", re.compile(r"^/repos/([^/]+/[^/]+)/issues/comments/(\d+)$"),
     "/repos/{owner}/{repo}/issues/comments/{comment_id}"),
    ("pull", re.compile(r"^/repos/([^/]+/[^/]+)/pulls/(\d+)$"),
     "/repos/{owner}/{repo}/pulls/{pull_number}"),
    ("issues", re.compile(r"^/repos/([^/]+/[^/]+)/issues$"), "/repos/{owner}/{repo}/issues"),
    ("search", re.compile(r"^/search/issues$"), "/search/issues"),
]


class FakeGitHub:
    """State, faults and the request log of one local GitHub."""

    def __init__(self, token: str | None = None) -> None:
        self.token = token
        self.lock = threading.Lock()
        self.comments: dict[tuple[str, int], list[dict[str, Any]]] = {}
        self.pulls: dict[tuple[str, int], dict[str, Any]] = {}
        self.items: list[Item] = []
        self.faults: list[Fault] = []
        self.log: list[Logged] = []
        self.errors: list[str] = []
        self.next_id = 1000
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> FakeGitHub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # ---- fixtures a test sets up

    def add_pull(self, repo: str, number: int, head_sha: str, head_repo: str,
                 head_ref: str) -> None:
        pr_schema = _schema("pull-request")
        repo_schema = _schema("repository")
        head = instance(pr_schema["properties"]["head"], sha=head_sha, ref=head_ref,
                        label=f"{head_repo.split('/')[0]}:{head_ref}",
                        repo=instance(repo_schema, full_name=head_repo,
                                      name=head_repo.split("/")[1]))
        base = instance(pr_schema["properties"]["base"],
                        repo=instance(repo_schema, full_name=repo, name=repo.split("/")[1]))
        self.pulls[(repo, number)] = instance(pr_schema, number=number, head=head, base=base,
                                              state="open")

    def add_comment(self, repo: str, number: int, body: str, login: str = "someone",
                    kind: str = "User") -> dict[str, Any]:
        with self.lock:
            return self._new_comment(repo, number, body, user(login, kind))

    def fail(self, route: str, kind: str, times: int = 1, **kw: float) -> None:
        self.faults += [Fault(route, kind, **kw) for _ in range(times)]

    def calls(self, route: str | None = None, method: str | None = None) -> list[Logged]:
        return [c for c in self.log if (route is None or c.route == route)
                and (method is None or c.method == method)]

    # ---- behaviour

    def _new_comment(self, repo: str, number: int, body: str, who: dict[str, Any]
                     ) -> dict[str, Any]:
        self.next_id += 1
        c = instance(_schema("issue-comment"), id=self.next_id, body=body, user=who,
                     html_url=f"https://github.com/{repo}/pull/{number}#issuecomment-"
                              f"{self.next_id}")
        self.comments.setdefault((repo, number), []).append(c)
        return c

    def _search(self, q: str) -> list[dict[str, Any]]:
        """GitHub's issue search, as far as the tests need it: qualifiers filter; a
        parenthesised group matches when any of its terms (OR) is in the title or body;
        groups and bare terms must all match (AND); a quoted term is one phrase."""
        repos = re.findall(r"repo:(\S+)", q)  # several: any of them (GitHub ORs them)
        kind = re.search(r"is:(issue|pr)", q)
        label = re.search(r'label:"([^"]+)"', q)
        merged = re.search(r"merged:(\S+)\.\.(\S+)", q)  # inclusive dates, as GitHub's
        rest = re.sub(r'repo:\S+|is:\S+|label:"[^"]+"|in:\S+|merged:\S+', " ", q)
        groups = [[t.strip('"').lower() for t in re.findall(r'"[^"]+"|[^\s()]+', g)
                   if t != "OR"] for g in re.findall(r"\(([^()]*)\)", rest)]
        groups += [[t.strip('"').lower()] for t in re.findall(
            r'"[^"]+"|[^\s()]+', re.sub(r"\([^()]*\)", " ", rest)) if t != "OR"]
        out = []
        for item in self.items:
            if repos and item.repo not in repos:
                continue
            if kind and item.pr != (kind.group(1) == "pr"):
                continue
            if label and label.group(1) not in item.labels:
                continue
            if merged and not (item.merged and merged.group(1) <= item.merged_at[:10]
                               <= merged.group(2)):
                continue
            text = f"{item.title}\n{item.body}".lower()
            if not all(any(t in text for t in g) for g in groups if g):
                continue
            out.append(item.to_json())
        return out

    def handle(self, method: str, raw_path: str, headers: dict[str, str], raw: bytes
               ) -> tuple[int, dict[str, str], Any]:
        parsed = urlparse(raw_path)
        query = parse_qs(parsed.query)
        route, template, groups = "", "", ()
        for name, pattern, tmpl in ROUTES:
            m = pattern.match(parsed.path)
            if m:
                route, template, groups = name, tmpl, m.groups()
                break
        body = json.loads(raw) if raw else None
        with self.lock:
            entry = Logged(method, parsed.path, query, body, headers, time.monotonic(), route)
            self.log.append(entry)
        if not route:
            return 404, {}, {"message": "Not Found", "documentation_url": "x"}
        schema = request_schema(template, method) if method in ("POST", "PATCH") else None
        if schema is not None:
            for err in _validator(schema).iter_errors(body):
                self.errors.append(f"request {method} {template}: {err.message}")
        status, extra, payload = self._answer(method, route, groups, query, headers, body)
        entry.status = status
        if payload is not None or status not in (204, 304):
            rs = response_schema(template, method, status)
            if rs is not None:
                for err in _validator(rs).iter_errors(payload):
                    self.errors.append(f"response {status} {method} {template}: "
                                       f"{err.message[:200]}")
        return status, extra, payload

    def _answer(self, method: str, route: str, groups: tuple[str, ...],
                query: dict[str, list[str]], headers: dict[str, str], body: Any
                ) -> tuple[int, dict[str, str], Any]:
        with self.lock:
            fault = next((f for f in self.faults if f.route == route), None)
            if fault is not None:
                self.faults.remove(fault)
        if fault is not None:
            if fault.kind == "timeout":
                time.sleep(fault.delay)
            elif fault.kind == "500":
                return 503, {}, {"message": "Service unavailable", "documentation_url": "x"}
            elif fault.kind == "ratelimit":
                reset = int(time.time() + fault.reset_in)
                return 403, {"X-RateLimit-Limit": "30", "X-RateLimit-Remaining": "0",
                             "X-RateLimit-Reset": str(reset)}, {
                    "message": "API rate limit exceeded", "documentation_url": "x"}
            elif fault.kind == "422":
                return 422, {}, {"message": "Validation Failed", "documentation_url": "x",
                                 "errors": [{"resource": "Search", "field": "q",
                                             "code": "invalid"}]}
            elif fault.kind == "403":
                return 403, {}, {"message": "Resource not accessible by integration",
                                 "documentation_url": "x"}
        if self.token is not None and method != "GET" and \
                headers.get("authorization") != f"Bearer {self.token}":
            return 403, {}, {"message": "Must have admin rights", "documentation_url": "x"}
        with self.lock:
            return self._route(method, route, groups, query, headers, body)

    def _route(self, method: str, route: str, groups: tuple[str, ...],
               query: dict[str, list[str]], headers: dict[str, str], body: Any
               ) -> tuple[int, dict[str, str], Any]:
        if route == "comments":
            key = (groups[0], int(groups[1]))
            if method == "POST":
                return 201, {}, copy.deepcopy(self._new_comment(*key, body["body"],
                                                                user("github-actions[bot]",
                                                                     "Bot")))
            per = int(query.get("per_page", ["30"])[0])
            page = int(query.get("page", ["1"])[0])
            items = self.comments.get(key, [])
            chunk = items[(page - 1) * per: page * per]
            extra = {}
            if page * per < len(items):
                extra["Link"] = (f'<{self.url}/repos/{groups[0]}/issues/{groups[1]}/comments?'
                                 f'per_page={per}&page={page + 1}>; rel="next"')
            return 200, extra, copy.deepcopy(chunk)
        if route == "comment":
            for items in self.comments.values():
                for c in items:
                    if c["id"] == int(groups[1]):
                        if c["user"]["type"] != "Bot":
                            return 403, {}, {"message": "Resource not accessible by "
                                             "integration", "documentation_url": "x"}
                        c["body"] = body["body"]
                        return 200, {}, copy.deepcopy(c)
            return 404, {}, {"message": "Not Found", "documentation_url": "x"}
        if route == "pull":
            pr = self.pulls.get((groups[0], int(groups[1])))
            if pr is None:
                return 404, {}, {"message": "Not Found", "documentation_url": "x"}
            return 200, {}, copy.deepcopy(pr)
        if route == "issues":
            number = 9000 + len([i for i in self.items if i.repo == groups[0]])
            item = Item(groups[0], number, body["title"], body.get("body", ""))
            self.items.append(item)
            return 201, {}, instance(
                _schema("issue"), number=number, title=item.title, body=item.body,
                html_url=f"https://github.com/{groups[0]}/issues/{number}")
        q = query.get("q", [""])[0]
        items = self._search(q)
        payload = {"total_count": len(items), "incomplete_results": False, "items": items,
                   "search_type": "lexical"}
        etag = '"' + hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[
            :20] + '"'
        if headers.get("if-none-match") == etag:
            return 304, {"ETag": etag}, None
        return 200, {"ETag": etag}, payload

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _do(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k.lower(): v for k, v in self.headers.items()}
                status, extra, payload = fake.handle(self.command, self.path, headers, raw)
                data = b"" if payload is None else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    for k, v in extra.items():
                        self.send_header(k, v)
                    self.send_header("Content-Type", "application/json; charset=utf-8")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client timed out
                    pass

            do_GET = do_POST = do_PATCH = _do

        return Handler
