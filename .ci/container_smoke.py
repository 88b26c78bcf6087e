"""action.yml's step with a real Docker engine: the second half of .ci/container-smoke.

Runs the step's bash script as the runner does (`bash -eo pipefail FILE`), as a non-root runner
user in the `docker` group, with the environment a pull_request job gets (tests/test_action.py's
`runner_env`, so both agree on what a runner gives a step):

- the bundled example, the image built through a pip mirror on the loopback that wants a
  password: the index comes in `build_args`, the password only as the netrc secret (the step's
  NETRC), and must not be in the image or its history;
- a failing manifest (tests/test_action.py's), the image built offline from the wheelhouse:
  other build_args, so another content tag;
- the example again (the image is reused), timed side by side with the same run on the host;
- the errors: a failing build, a failing pull, an unreachable engine, a CLI without buildx.
"""

from __future__ import annotations

import argparse
import base64
import grp
import hashlib
import json
import os
import pwd
import re
import secrets
import shutil
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import quote, unquote

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from test_action import (  # noqa: E402  (the runner's environment, as the tests build it)
    BAD_MANIFEST,
    BAD_MODELS,
    KNOWN,
    parse_annotations,
    parse_outputs,
    runner_env,
)

USER = "parity-runner"
ACTION = Path("/tmp/parity-gate-smoke/action")  # replaced in main()
TAG = re.compile(r"parity-gate-action:cpu-[0-9a-f]{16}")


def check(ok: object, what: str, detail: str = "") -> None:
    if not ok:
        raise SystemExit(f"container-smoke: FAILED: {what}\n{detail[-4000:]}")
    print(f"  ok: {what}")


# --------------------------------------------------------------------------
# a pip mirror on the loopback, PEP 503, behind HTTP basic auth


class Mirror:
    """Serves a wheelhouse as /simple/<project>/ pages; records which files it served."""

    def __init__(self, wheelhouse: Path) -> None:
        self.user, self.password = "smoke", secrets.token_hex(16)
        self.files = {p.name: p for p in wheelhouse.glob("*.whl")}
        self.served: set[str] = set()
        self.refused = 0
        mirror = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                expected = base64.b64encode(f"{mirror.user}:{mirror.password}".encode()).decode()
                if self.headers.get("Authorization") != f"Basic {expected}":
                    mirror.refused += 1
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="smoke"')
                    self.end_headers()
                    return
                body = mirror.page(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream"
                                 if self.path.startswith("/files/") else "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @staticmethod
    def project(filename: str) -> str:
        return re.sub(r"[-_.]+", "-", filename.split("-", 1)[0]).lower()

    def page(self, path: str) -> bytes | None:
        path = unquote(path)
        if path.startswith("/files/") and path[7:] in self.files:
            self.served.add(path[7:])
            return self.files[path[7:]].read_bytes()
        m = re.fullmatch(r"/simple/([a-z0-9-]+)/", path)
        if not m:
            return None
        links = [f'<a href="/files/{quote(n)}#sha256={hashlib.sha256(p.read_bytes()).hexdigest()}">'
                 f"{n}</a>" for n, p in sorted(self.files.items())
                 if self.project(n) == m.group(1)]
        return ("<html><body>" + "".join(links) + "</body></html>").encode() if links else None


# --------------------------------------------------------------------------
# the runner user and action.yml's step


def runner_user() -> tuple[int, int]:
    try:
        entry = pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--groups", "docker", USER], check=True)
        entry = pwd.getpwnam(USER)
    if USER not in grp.getgrnam("docker").gr_mem:
        subprocess.run(["usermod", "-aG", "docker", USER], check=True)
    return entry.pw_uid, entry.pw_gid


def action_checkout(dest: Path, wheelhouses: list[Path]) -> Path:
    """The action as a runner checks it out (`_actions/OWNER/REPO/SHA`): a copy of what the
    build context admits, so that edits to the working tree during the run change nothing."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("action.yml", "Dockerfile", ".dockerignore", "pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, dest / name)
    for name in ("parity_gate", "docker"):
        shutil.copytree(REPO / name, dest / name, ignore=skip)
    def link(src: str, dst: str) -> None:  # hard links where it can: the wheels are large
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    for wheels in wheelhouses:
        shutil.copytree(REPO / wheels, dest / wheels, copy_function=link)
    for path in [dest, *dest.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o444 | (0o111 if path.is_dir() else 0))
    return dest


def run_step(tmp: Path, *, workspace_files: dict[str, str] | None = None,
             copy_example: bool = False, extra_env: dict[str, str] | None = None,
             as_host: bool = False,
             **inputs: str) -> SimpleNamespace:
    """action.yml's step as the runner user; or (as_host) the entrypoint on this machine."""
    uid, gid = runner_user()
    if tmp.exists():
        shutil.rmtree(tmp)
    workspace = tmp / "ws"
    workspace.mkdir(parents=True)
    if copy_example:
        shutil.copytree(REPO / "parity_gate" / "example", workspace / "fixtures",
                        ignore=shutil.ignore_patterns("__pycache__"))
    for name, text in (workspace_files or {}).items():
        (workspace / name).parent.mkdir(parents=True, exist_ok=True)
        (workspace / name).write_text(text, encoding="utf-8")
    spec = yaml.safe_load((ACTION / "action.yml").read_text(encoding="utf-8"))
    defaults = {name: str(i.get("default", "")) for name, i in spec["inputs"].items()}
    env = runner_env(tmp, workspace, **{**defaults, **inputs})
    env.update(HOME=pwd.getpwnam(USER).pw_dir, USER=USER, GITHUB_ACTION_PATH=str(ACTION),
               **(extra_env or {}))
    env.pop("PYTHONPATH", None)
    script = tmp / "step.sh"
    script.write_text(spec["runs"]["steps"][0]["run"], encoding="utf-8")
    for path in [tmp, *tmp.rglob("*")]:
        os.lchown(path, uid, gid)
    if as_host:
        cmd = [str(REPO / ".venv" / "bin" / "python"), "-m", "parity_gate.github.action"]
    else:
        cmd = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--init-groups",
               "bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=workspace, env=env, capture_output=True, text=True,
                          timeout=1500)
    wall = time.monotonic() - start
    summary = Path(env["GITHUB_STEP_SUMMARY"]).read_text(encoding="utf-8")
    return SimpleNamespace(proc=proc, env=env, workspace=workspace, tmp=tmp, wall=wall,
                           summary=summary, log=proc.stdout + proc.stderr,
                           outputs=parse_outputs(Path(env["GITHUB_OUTPUT"]).read_text()),
                           notes=parse_annotations(proc.stdout), uid=uid)


def groups_closed(step: SimpleNamespace) -> bool:
    lines = step.proc.stdout.splitlines()
    return sum(x.startswith("::group::") for x in lines) == lines.count("::endgroup::")


def owned_by_runner(step: SimpleNamespace) -> list[str]:
    """Paths under the workspace and RUNNER_TEMP that the runner user does not own."""
    return [str(p) for root in (step.workspace, Path(step.env["RUNNER_TEMP"]))
            for p in [root, *root.rglob("*")] if p.lstat().st_uid != step.uid]


def expect_error(step: SimpleNamespace, title: str, needle: str) -> None:
    errors = [n for n in step.notes if n["level"] == "error"]
    check(step.proc.returncode != 0 and step.outputs == {"result": "error"},
          f"{title}: the step fails with result=error", step.log)
    check([n["title"] for n in errors] == [f"parity-gate: {title}"] and
          needle in errors[0]["message"], f"{title}: one error annotation naming the cause",
          step.log)
    check(f"## ⚠️ parity-gate: {title}" in step.summary, f"{title}: a step summary section",
          step.summary)
    check(groups_closed(step), f"{title}: every ::group:: closed", step.proc.stdout)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--wheelhouse", type=Path, required=True)  # relative to the repo
    parser.add_argument("--empty-wheelhouse", type=Path, required=True)
    parser.add_argument("--base", required=True)
    args = parser.parse_args()
    global ACTION
    work = Path("/tmp/parity-gate-smoke")
    ACTION = action_checkout(work / "action", [args.wheelhouse, args.empty_wheelhouse])
    example = {"manifest": "fixtures/parity.yml", "install": "pwd > install-cwd.txt",
               "fail_on": "any-failure", "gpu": "false"}

    # 1. the example, built through the mirror (build_args + the netrc secret)
    mirror = Mirror(ACTION / args.wheelhouse)
    netrc = work / "netrc"
    work.mkdir(parents=True, exist_ok=True)
    netrc.write_text(f"machine 127.0.0.1 login {mirror.user} password {mirror.password}\n")
    mirror_args = "\n".join([f"PYTHON_IMAGE={args.base}",
                             f"PIP_INDEX_URL=http://127.0.0.1:{mirror.port}/simple/",
                             "TORCH_INDEX=", ""])
    print("example, built through a password-protected mirror:")
    uid, gid = runner_user()
    os.chown(netrc, uid, gid)
    netrc.chmod(0o600)
    a = run_step(work / "a", copy_example=True, build_args=mirror_args,
                 extra_env={"NETRC": str(netrc)}, **example)
    check(a.proc.returncode == 0 and a.outputs.get("result") == "pass", "passes", a.log)
    check(a.outputs["regressions"] == "0" and a.outputs["failures"] == "0", "counts are 0")
    check("parity-gate cache: removed 0 entries" in a.log,
          "the export cache was pruned after the run, in the container", a.log)
    for key in ("json_path", "junit_path", "summary_path"):
        check(Path(a.outputs[key]).is_file(), f"{key} exists")
    check("::group::docker build --target cpu" in a.proc.stdout and groups_closed(a),
          "built the cpu target, log groups closed", a.proc.stdout)
    locked = {line.split("==")[0] for name in ("build", "cpu")
              for line in (ACTION / "docker" / f"{name}.lock").read_text().splitlines()
              if re.match(r"[a-z0-9-]+==", line)}
    check({Mirror.project(f) for f in mirror.served} == locked,
          f"the mirror served every locked wheel ({len(mirror.served)}), behind a password")
    image = TAG.search(a.proc.stdout)
    check(image, "the image has a content tag", a.proc.stdout)
    assert image is not None
    history = subprocess.run(["docker", "history", "--no-trunc", image.group(0)],
                             capture_output=True, text=True, check=True).stdout
    check(mirror.password not in history and f"127.0.0.1:{mirror.port}" in history,
          "the index is in docker history, the password is not")
    leaked = subprocess.run(["docker", "run", "--rm", "--entrypoint", "sh", image.group(0), "-c",
                             "ls /root/.netrc /run/secrets/* 2>/dev/null; "
                             f"grep -rl {mirror.password} /root /opt /etc 2>/dev/null"],
                            capture_output=True, text=True).stdout
    check(leaked == "", "no secret in the image", leaked)
    notes = a.notes
    check(all(n["level"] == "warning" and n["file"] == "fixtures/parity.yml" for n in notes),
          f"annotations: {len(notes)} warnings on the manifest, no error", a.proc.stdout)
    check(a.summary.count("## ✅ parity-gate:") == 1, "the summary says pass, once", a.summary)
    cwd = (a.workspace / "install-cwd.txt").read_text().strip()
    check(Path(cwd) == a.workspace, "install ran in the workspace")
    check(not owned_by_runner(a), "every file is the runner user's", "\n".join(owned_by_runner(a)))
    mirror.server.shutdown()

    # 2. a failing manifest, built offline (other build_args: another content tag)
    print("failing manifest, built offline from the wheelhouse:")
    offline_args = f"PYTHON_IMAGE={args.base}\nWHEELHOUSE={args.wheelhouse}\n"
    b = run_step(work / "b", build_args=offline_args, manifest="gate/parity.yml",
                 baseline="gate/known.yml", out_dir="reports", gpu="false",
                 workspace_files={"gate/bad_models.py": BAD_MODELS,
                                  "gate/parity.yml": BAD_MANIFEST, "gate/known.yml": KNOWN})
    other = TAG.search(b.proc.stdout)
    check(other and other.group(0) != image.group(0), "build_args change the content tag",
          b.proc.stdout)
    check(b.proc.returncode == 1 and b.outputs.get("result") == "fail", "the step fails", b.log)
    check(b.outputs["regressions"] == "1" and b.outputs["failures"] == "2",
          "1 regression, 2 failures")
    check([(n["level"], n["title"]) for n in b.notes] == [
        ("error", "parity-gate: broken/float32/vec/b2/cpu eager_error"),
        ("warning", "parity-gate: noisy/float32/vec/b2/cpu mismatch (not blocking)"),
        ("warning", "parity-gate: noisy constants-in-forward")],
        "an error annotation for the regression, a warning for the known failure", b.proc.stdout)
    check(b.notes[0]["file"] == "gate/parity.yml" and "100% broken" in b.notes[0]["message"],
          "the error points at the manifest and says the cause")
    check(b.summary.count("## ❌ parity-gate:") == 1, "the summary says fail, once", b.summary)
    check(Path(b.outputs["json_path"]).parent == b.workspace / "reports", "reports in out_dir")
    check(not owned_by_runner(b), "every file is the runner user's", "\n".join(owned_by_runner(b)))

    # 3. the example again: the image is reused; timed beside the same run on the host
    print("example again (image reused), and on the host:")
    c = run_step(work / "c", copy_example=True, build_args=mirror_args, **example)
    check(c.proc.returncode == 0 and "reusing image" in c.proc.stdout, "reuses the image", c.log)
    h = run_step(work / "h", copy_example=True, as_host=True, **example)
    check(h.proc.returncode == 0 and h.outputs.get("result") == "pass", "host run passes", h.log)
    print(f"  example wall time: container {c.wall:.1f} s (docker run included), host "
          f"{h.wall:.1f} s, ratio {c.wall / h.wall:.2f}")

    # 4. the errors
    print("errors:")
    e = run_step(work / "e1", build_args=f"PYTHON_IMAGE={args.base}\n"
                 f"WHEELHOUSE={args.empty_wheelhouse}", gpu="false")
    expect_error(e, "docker build failed", "docker build --target cpu")
    check("ERROR" in e.notes[0]["message"] or "error" in e.notes[0]["message"],
          "docker build failed: the annotation quotes the build's error", e.notes[0]["message"])
    e = run_step(work / "e2", image="127.0.0.1:9/parity-gate:{target}", gpu="false")
    expect_error(e, "docker pull failed", "127.0.0.1:9/parity-gate:cpu")
    e = run_step(work / "e3", gpu="false",
                 extra_env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    expect_error(e, "Docker engine unreachable", "did not answer")
    new_cli = [c for c in (Path(d) / "docker" for d in os.environ["PATH"].split(":")[1:])
               if c.is_file() and os.access(c, os.X_OK)
               and subprocess.run([str(c), "buildx", "version"], capture_output=True).returncode
               and int(subprocess.run([str(c), "version", "--format", "{{.Client.Version}}"],
                                      capture_output=True, text=True).stdout.split(".")[0]
                       or 0) >= 23]
    if new_cli:
        bin_dir = work / "new-cli"
        bin_dir.mkdir(exist_ok=True)
        (bin_dir / "docker").unlink(missing_ok=True)
        (bin_dir / "docker").symlink_to(new_cli[0])
        e = run_step(work / "e4", gpu="false", build_args="NO_SUCH_ARG=1",
                     extra_env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
        expect_error(e, "docker buildx missing", "buildx plugin")
    else:
        print("  skipped: no Docker >= 23 CLI without buildx on this machine")
    # The action's tags from this run (the layers stay in the build cache for the next).
    subprocess.run(["docker", "rmi", image.group(0), other.group(0)], capture_output=True)
    print(json.dumps({"example_container_s": round(c.wall, 1), "example_host_s": round(h.wall, 1)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
