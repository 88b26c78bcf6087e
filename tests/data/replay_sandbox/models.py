"""Models that crash while the exporter traces them, as a bad extension would, and leave a
record of the process they crashed in: whether it held GITHUB_TOKEN, its memory limit,
and the processes they started, in the replay one in a session of its own too
(PG_REPLAY_RECORD names the file; one JSON line per crash). `hangs_on_replay` crashes
the first time and hangs the next (the gate's replay), until it is killed."""

from __future__ import annotations

import ctypes
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch


def _exporting() -> bool:
    return bool(torch.compiler.is_exporting() or torch.onnx.is_in_onnx_export())


def _record(**facts: object) -> None:
    with open(os.environ["PG_REPLAY_RECORD"], "a") as fh:
        fh.write(json.dumps(facts) + "\n")


class Leaky(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _exporting():
            children = [subprocess.Popen(["sleep", "600"])]
            if sys.argv[0].endswith("repro.py"):  # the replay: one that leaves the group too
                children.append(subprocess.Popen(["sleep", "600"], start_new_session=True))
            _record(pid=os.getpid(), token="GITHUB_TOKEN" in os.environ,
                    data_limit=resource.getrlimit(resource.RLIMIT_DATA)[0],
                    cwd=os.getcwd(), children=[c.pid for c in children])
            ctypes.string_at(0)  # SIGSEGV
        return self.fc(x)


class HangsOnReplay(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _exporting():
            flag = Path(os.environ["PG_REPLAY_RECORD"] + ".hang")
            if flag.exists():
                time.sleep(600)
            flag.write_text("crashed once\n")
            ctypes.string_at(0)
        return self.fc(x)


def leaky() -> torch.nn.Module:
    return Leaky()


def hangs_on_replay() -> torch.nn.Module:
    return HangsOnReplay()
