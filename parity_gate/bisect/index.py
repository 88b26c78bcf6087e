"""Released versions between the good and the bad one, from the package index.

`between` is pure (a release list in, the candidates out); `releases` reads PyPI's
JSON API (`<index>/<name>/json`), the one shape every PyPI mirror with a JSON API
serves. Only versions the index serves are probed: pre-releases and yanked releases
are left out unless asked for, and so are releases with no files.
"""

from __future__ import annotations

from dataclasses import dataclass

import requests
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from parity_gate.errors import UserError

PYPI_JSON = "https://pypi.org/pypi"


@dataclass(frozen=True)
class Release:
    version: str
    yanked: bool = False
    uploaded: str = ""   # ISO time of its first file (the upstream search's date range)


def parse_releases(data: dict[str, object]) -> list[Release]:
    """The `releases` of a PyPI JSON document, as records (unparseable versions dropped)."""
    out = []
    releases = data.get("releases")
    for version, files in (releases.items() if isinstance(releases, dict) else []):
        if not isinstance(files, list) or not files:
            continue
        try:
            Version(version)
        except InvalidVersion:
            continue
        times = sorted(str(f.get("upload_time_iso_8601") or f.get("upload_time") or "")
                       for f in files if isinstance(f, dict))
        out.append(Release(version, yanked=all(bool(f.get("yanked")) for f in files
                                               if isinstance(f, dict)),
                           uploaded=times[0] if times else ""))
    return out


def base(version: str) -> Version:
    """The version without its local label (`2.13.0+cpu` is release 2.13.0 on the index)."""
    return Version(Version(version).public)


def released(releases: list[Release], version: str) -> bool:
    """Whether the index has `version` as a release with files (pip's comparison: a local
    label is the same release, `2.13.0+cpu` is 2.13.0)."""
    want = base(version)
    return any(base(r.version) == want for r in releases)


def newest(releases: list[Release]) -> str:
    """The highest final release the index lists ("none" when it lists none)."""
    final = [Version(r.version) for r in releases if not Version(r.version).is_prerelease]
    return str(max(final)) if final else "none"


def uploaded(releases: list[Release], version: str) -> str:
    """When `version`'s first file was uploaded ("" when the index does not say)."""
    want = base(version)
    return next((r.uploaded for r in releases if base(r.version) == want), "")


def between(releases: list[Release], good: str, bad: str, pre: bool = False,
            yanked: bool = False) -> list[str]:
    """The versions after `good` up to and including `bad`, ordered from good to bad (a
    downgrade runs downwards). `bad` is always last, listed or not: it was installed."""
    g, b = base(good), base(bad)
    lo, hi = min(g, b), max(g, b)
    keep = []
    for r in releases:
        v = Version(r.version)
        if not (lo < v < hi) or (v.is_prerelease and not pre) or (r.yanked and not yanked):
            continue
        keep.append(v)
    ordered = sorted(set(keep), reverse=b < g)
    return [str(v) for v in ordered] + [bad]


def releases(name: str, index: str = PYPI_JSON, timeout: float = 30.0) -> list[Release]:
    """The index's releases of `name`; a clear error when the index cannot answer."""
    url = f"{index.rstrip('/')}/{canonicalize_name(name)}/json"
    try:
        response = requests.get(url, timeout=timeout)
    except requests.RequestException as exc:
        raise UserError(f"{url}: the package index did not answer ({type(exc).__name__}); "
                        "bisect lists the versions between good and bad from it") from None
    if response.status_code == 404:
        raise UserError(f"{url}: {name} is not on the index (404)")
    if response.status_code != 200:
        raise UserError(f"{url}: the package index answered HTTP {response.status_code}")
    try:
        data = response.json()
    except ValueError:
        raise UserError(f"{url}: not a PyPI JSON document") from None
    return parse_releases(data if isinstance(data, dict) else {})
