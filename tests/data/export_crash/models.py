"""A model whose code kills the process only while the exporter traces it (a native
crash under tracing, as a bad custom op or extension would), taking a structured input:
the gate's repro must rebuild it, bind the list the same way and crash the same way."""

from __future__ import annotations

import ctypes

import torch


class CrashesUnderExport(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(6, 3)

    def forward(self, parts: list[torch.Tensor]) -> torch.Tensor:
        if torch.compiler.is_exporting() or torch.onnx.is_in_onnx_export():
            ctypes.string_at(0)  # SIGSEGV: reads address 0
        return self.fc(parts[0] + parts[1])


def crashes_under_export() -> torch.nn.Module:
    return CrashesUnderExport()
