"""Modules for tests/test_hardening_files.py: secrets that reach what the gate writes, and a
module that fills the disk its reports go to.

- `token_output`: returns a dict whose key holds the secret and adds 1 only while
  `torch.export` traces, so it mismatches, is localised and gets a repro folder whose
  output names (case.json, the ONNX graph, the .npz keys) hold the secret.
- `token_export`: eager works; its export raises an error quoting the secret.

The gate holds the secret as $PG_HARDEN_TOKEN, which no model sees (no credential reaches a
worker); a model can still know the value another way, here from the file
$PG_HARDEN_SECRET_FILE names, and the gate must keep it out of what it writes.
- `filler(path, spare)`: a passing module whose factory fills the filesystem holding
  `path` and then frees `spare` bytes: the run's own writes to that disk then fail.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch


def secret() -> str:
    assert "PG_HARDEN_TOKEN" not in os.environ, "a credential reached the model"
    return Path(os.environ["PG_HARDEN_SECRET_FILE"]).read_text().strip()


class TokenOutput(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        y = self.fc(x)
        if torch.compiler.is_exporting():
            y = y + 1.0
        return {f"logits_{secret()}": y}


class TokenExport(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_exporting():
            raise ValueError(f"cannot reach the hub with token={secret()}")
        return x * 2


class Small(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def token_output() -> torch.nn.Module:
    return TokenOutput()


def token_export() -> torch.nn.Module:
    return TokenExport()


def filler(path: str, spare: int) -> torch.nn.Module:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:  # full
        pass
    os.ftruncate(fd, max(0, os.fstat(fd).st_size - spare))
    os.close(fd)
    return Small()


def sleeper(seconds: float) -> torch.nn.Module:
    """Holds its run open for `seconds`: a second run into the same out folder meanwhile."""
    import time

    time.sleep(seconds)
    return Small()
