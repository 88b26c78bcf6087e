"""Token values never reach a file the gate writes: reports, the journal, evidence, logs.

Which values: those of the token variables the gate knows about (`KNOWN`),
of every variable whose name ends in `_TOKEN` or `_SECRET`, and of the names
listed in `PARITY_GATE_MASK_ENV` (spaces or commas), read from the gate's own
environment. Values shorter than `MIN_LENGTH` are left alone: masking every
`1` or `abc` would wreck the reports, and no real token is that short.
Stdlib-only (the Action imports it before the gate's dependencies exist).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from typing import Any, TextIO

KNOWN = ("GITHUB_TOKEN", "INPUT_GITHUB_TOKEN", "INPUT_UPSTREAM_TOKEN",
         "PARITY_GATE_UPSTREAM_TOKEN", "ACTIONS_RUNTIME_TOKEN", "ACTIONS_ID_TOKEN_REQUEST_TOKEN")
SUFFIXES = ("_TOKEN", "_SECRET")
LIST_ENV = "PARITY_GATE_MASK_ENV"
MIN_LENGTH = 8
MASK = "***"

# And no credential of any kind: code the gate did not write (a model, a factory, a repro
# script) runs with none. By name: the Actions runtime's and every Action input (`INPUT_*`
# may hold a token), cloud providers' keys, and any name that says it is a secret.
_CREDENTIAL_PREFIXES = ("ACTIONS_", "INPUT_", "AWS_", "AZURE_", "GOOGLE_", "GCP_", "GCLOUD_",
                        "CLOUDSDK_", "ALIBABA_CLOUD_", "DIGITALOCEAN_", "VAULT_")
_CREDENTIAL_SUFFIXES = ("_TOKEN", "_SECRET", "_KEY", "_PASSWORD", "_PASSWD", "_CREDENTIALS",
                        "_API_KEY", "_PAT", "_AUTH")
_CREDENTIAL_NAMES = frozenset({"GH_TOKEN", "GITHUB_TOKEN", "NPM_TOKEN", "PYPI_TOKEN",
                               "TWINE_PASSWORD", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN",
                               "NETRC", "SSH_AUTH_SOCK", "GOOGLE_APPLICATION_CREDENTIALS",
                               "DOCKER_AUTH_CONFIG", "KUBECONFIG"})


def is_credential(name: str) -> bool:
    """Whether an environment variable's name marks a credential (see above)."""
    upper = name.upper()
    return (name in KNOWN or upper in _CREDENTIAL_NAMES
            or upper.startswith(_CREDENTIAL_PREFIXES) or upper.endswith(_CREDENTIAL_SUFFIXES))


def without_credentials(env: Mapping[str, str]) -> dict[str, str]:
    """`env` less every credential (`is_credential`, and the names `PARITY_GATE_MASK_ENV`
    lists)."""
    listed = set(re.split(r"[\s,]+", env.get(LIST_ENV, "").strip())) - {""}
    return {k: v for k, v in env.items() if not is_credential(k) and k not in listed}


# Secret values this process had in its environment before it dropped them (a worker drops
# every credential before model code runs): still masked in everything it writes.
_REMEMBERED: set[str] = set()


def remember_secrets() -> None:
    """Keep this process's secret values for masking; call before removing them."""
    _REMEMBERED.update(secret_values())


def secret_values(env: Mapping[str, str] | None = None) -> list[str]:
    """The values to mask, longest first (so a token containing another masks whole); for
    this process's own environment, those it had before dropping them too."""
    own = env is None
    env = os.environ if env is None else env
    listed = set(re.split(r"[\s,]+", env.get(LIST_ENV, "").strip())) - {""}
    names = {n for n in env if n in KNOWN or n in listed or n.upper().endswith(SUFFIXES)}
    values = {env[n].strip() for n in names} | (_REMEMBERED if own else set())
    return sorted((v for v in values if len(v) >= MIN_LENGTH), key=len, reverse=True)


class Masker:
    """Replaces every secret value in text, bytes and JSON-like trees."""

    def __init__(self, values: list[str] | None = None) -> None:
        self.values = secret_values() if values is None else values
        self._pattern = (re.compile("|".join(re.escape(v) for v in self.values))
                         if self.values else None)

    def __bool__(self) -> bool:
        return self._pattern is not None

    def text(self, s: str) -> str:
        return s if self._pattern is None else self._pattern.sub(MASK, s)

    def holds(self, data: str | bytes) -> bool:
        """Whether `data` holds a secret value: a binary file (an ONNX graph's names, an
        .npz key) cannot be masked without breaking it, so it is withheld instead."""
        if self._pattern is None:
            return False
        text = data if isinstance(data, str) else data.decode("utf-8", "surrogateescape")
        return self._pattern.search(text) is not None

    def data(self, b: bytes) -> bytes:
        if self._pattern is None:
            return b
        return self.text(b.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")

    def tree(self, obj: Any) -> Any:
        """A copy of a JSON-like value with every string (keys too) masked."""
        if self._pattern is None:
            return obj
        if isinstance(obj, str):
            return self.text(obj)
        if isinstance(obj, dict):
            return {self.text(k) if isinstance(k, str) else k: self.tree(v)
                    for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self.tree(v) for v in obj]
        return obj


class MaskedStream:
    """A console stream that masks what is written to it: a CI job's log is as readable as
    its artifacts, so progress lines (case reasons, finding messages) are masked like
    the reports. Each write is masked whole (print writes each argument in one call)."""

    def __init__(self, stream: TextIO | None = None, masker: Masker | None = None) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.masker = Masker() if masker is None else masker

    def write(self, text: str) -> int:
        return self.stream.write(self.masker.text(text))

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()
