"""A package index made in the test: small pure-Python wheels written by hand (a wheel is a
zip with a dist-info) and PyPI's JSON API for them on 127.0.0.1, so `parity-gate bisect`
runs end to end, pip included, without the network (`--pip-arg=--no-index`,
`--pip-arg=--find-links=DIR`, `--index URL`)."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

# Padding that makes each module large enough to be shared between probe environments.
PADDING = "# " + "x" * 78 + "\n"


def wheel(folder: Path, name: str, version: str, source: str) -> Path:
    """`name-version-py3-none-any.whl` holding `name/__init__.py` = source."""
    files = {f"{name}/__init__.py": (source + PADDING * 64).encode(),
             f"{name}-{version}.dist-info/METADATA":
                 f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{name}-{version}.dist-info/WHEEL":
                 b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
                 b"Tag: py3-none-any\n"}
    record = f"{name}-{version}.dist-info/RECORD"
    lines = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{path},sha256={digest},{len(data)}")
    files[record] = ("\n".join([*lines, f"{record},,"]) + "\n").encode()
    out = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(out, "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
    return out


@contextmanager
def json_index(releases: Mapping[str, list[str]]) -> Iterator[str]:
    """PyPI's JSON API (`/<name>/json`) for `releases` (name → versions, uploaded a month
    apart in that order) on 127.0.0.1; its URL."""
    with serve_json({name: {"info": {"name": name}, "releases": {
            v: [{"yanked": False, "upload_time_iso_8601": f"2026-{i + 1:02d}-01T00:00:00Z"}]
            for i, v in enumerate(versions)}} for name, versions in releases.items()}) as url:
        yield url


@contextmanager
def serve_json(docs: Mapping[str, object]) -> Iterator[str]:
    """PyPI's JSON API on 127.0.0.1 serving `docs[name]` at `/<name>/json` (404 for any other
    name); its URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            name = self.path.strip("/").removesuffix("/json")
            if name not in docs or not self.path.rstrip("/").endswith("/json"):
                self.send_error(404)
                return
            body = json.dumps(docs[name]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
