"""Regenerate the excerpt of GitHub's OpenAPI description that the GitHub tests validate against.

    cd "$(mktemp -d)" && npm pack @octokit/openapi@23.0.2 && tar xzf octokit-openapi-*.tgz
    python tests/data/github-openapi/regenerate.py package/

Keeps only the operations parity-gate calls and the components they reference
(examples dropped), so the vendored file stays small.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
OPERATIONS = {  # path → methods parity-gate calls
    "/repos/{owner}/{repo}/issues/{issue_number}/comments": ["get", "post"],
    "/repos/{owner}/{repo}/issues/comments/{comment_id}": ["patch"],
    "/repos/{owner}/{repo}/pulls/{pull_number}": ["get"],
    "/repos/{owner}/{repo}/issues": ["post"],
    "/search/issues": ["get"],
}


def _strip(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in ("examples", "x-github")}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def excerpt(spec: dict[str, Any]) -> dict[str, Any]:
    components: dict[str, dict[str, Any]] = {}

    def visit(obj: Any) -> None:
        if isinstance(obj, dict):
            ref = obj.get("$ref")
            if isinstance(ref, str):
                _, _, section, name = ref.split("/")
                if name not in components.setdefault(section, {}):
                    components[section][name] = _strip(spec["components"][section][name])
                    visit(components[section][name])
            for v in obj.values():
                visit(v)
        elif isinstance(obj, list):
            for v in obj:
                visit(v)

    paths = {p: {m: _strip(spec["paths"][p][m]) for m in ms} for p, ms in OPERATIONS.items()}
    visit(paths)
    return {"openapi": spec["openapi"], "info": spec["info"], "paths": paths,
            "components": {s: dict(sorted(c.items())) for s, c in sorted(components.items())}}


def main(package: str) -> None:
    root = Path(package)
    spec = json.loads((root / "generated" / "api.github.com.json").read_text(encoding="utf-8"))
    version = json.loads((root / "package.json").read_text(encoding="utf-8"))["version"]
    out = excerpt(spec)
    out["info"]["x-excerpt-of"] = f"@octokit/openapi {version} generated/api.github.com.json"
    (HERE / "api.github.com.excerpt.json").write_text(json.dumps(out, indent=0) + "\n",
                                                     encoding="utf-8")
    shutil.copy(root / "LICENSE", HERE / "LICENSE")


if __name__ == "__main__":
    main(sys.argv[1])
