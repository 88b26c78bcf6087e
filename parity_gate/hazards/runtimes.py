"""Which opset and IR version each ONNX Runtime release implements, and `target_runtime`.

Source: ONNX Runtime's compatibility page, "ONNX opset support" table
(https://onnxruntime.ai/docs/reference/compatibility.html, docs/reference/compatibility.md
on the onnxruntime gh-pages branch), rows 1.0 to 1.18. A release runs models stamped
with opsets 7 up to its own and IR versions up to its own (the page's backwards
compatibility note); a model stamped newer fails to load there ("Unsupported model
IR version", "Opset N is under development"). Releases after the table's last row
are not guessed: a target beyond it is reported as unchecked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version
from pydantic import AfterValidator

SOURCE = "https://onnxruntime.ai/docs/reference/compatibility.html"


@dataclass(frozen=True)
class Release:
    version: str  # "major.minor" as the table lists it
    opset: int    # ai.onnx opset implemented
    ml_opset: int
    ir_version: int


# (ORT release, ai.onnx opset, ai.onnx.ml opset, IR version), newest first as on the page.
RELEASES: tuple[Release, ...] = tuple(Release(*row) for row in (
    ("1.18", 21, 4, 10), ("1.17", 20, 4, 9), ("1.16", 19, 3, 9), ("1.15", 19, 3, 8),
    ("1.14", 18, 3, 8), ("1.13", 17, 3, 8), ("1.12", 17, 3, 8), ("1.11", 16, 2, 8),
    ("1.10", 15, 2, 8), ("1.9", 15, 2, 8), ("1.8", 14, 2, 7), ("1.7", 13, 2, 7),
    ("1.6", 13, 2, 7), ("1.5", 12, 2, 7), ("1.4", 12, 2, 7), ("1.3", 12, 2, 7),
    ("1.2", 11, 2, 6), ("1.1", 11, 2, 6), ("1.0", 11, 2, 6),
))

_TARGET = re.compile(r"^\s*(onnxruntime(?:-[a-z]+)?)\s*(.*)$")


@dataclass(frozen=True)
class Target:
    """A parsed `target_runtime`: the package and its version specifier."""

    package: str
    spec: SpecifierSet

    @property
    def oldest(self) -> Release | None:
        """The oldest table release the specifier admits (the binding one), if any."""
        admitted = [r for r in RELEASES if self.spec.contains(Version(r.version + ".0"),
                                                              prereleases=True)]
        return min(admitted, key=lambda r: Version(r.version), default=None)

    def beyond_table(self) -> bool:
        """True when the specifier admits only releases newer than the table's last row."""
        newest = Version(RELEASES[0].version)
        later = [Version(f"{newest.major}.{m}.0") for m in range(newest.minor + 1, 100)]
        later += [Version(f"{major}.0.0") for major in range(newest.major + 1, 10)]
        return self.oldest is None and any(self.spec.contains(v) for v in later)

    def __str__(self) -> str:
        return f"{self.package}{self.spec}"


def parse_target(text: str) -> Target:
    """`onnxruntime>=1.16`, `onnxruntime-gpu==1.17.*`, `onnxruntime>=1.14,<1.18` → Target."""
    m = _TARGET.match(text)
    if m is None:
        raise ValueError(f"{text!r}: expected onnxruntime with a version specifier, "
                         "e.g. 'onnxruntime>=1.16'")
    try:
        spec = SpecifierSet(m.group(2).replace(" ", ""))
    except InvalidSpecifier:
        raise ValueError(f"{text!r}: {m.group(2)!r} is not a version specifier "
                         "(expected e.g. '>=1.16' or '==1.17.*')") from None
    if not str(spec):
        raise ValueError(f"{text!r}: give a version, e.g. 'onnxruntime>=1.16'")
    target = Target(m.group(1), spec)
    if target.oldest is None and not target.beyond_table():
        raise ValueError(f"{text!r} admits no ONNX Runtime release")
    return target


def _valid(text: str) -> str:
    parse_target(text)
    return text


TargetRuntime = Annotated[str, AfterValidator(_valid)]
"""The manifest type of `target_runtime` (validated, kept as written)."""
