"""The Action's inputs: one table of defaults and checks, read from INPUT_* variables.

Composite actions get no INPUT_* variables from the runner, so action.yml maps
every input into the step's `env:`; only environment variables are read here,
never templated text (no template injection). Stdlib-only: runs before install.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from parity_gate.errors import UserError
from parity_gate.model.policy import FAIL_ON
from parity_gate.model.units import DEFAULT_PRUNE_AGE, parse_age
from parity_gate.plan.providers import EXECUTION_PROVIDERS


@dataclass(frozen=True)
class InputSpec:
    """One action input: its default (== action.yml's) and what a valid value looks like."""

    default: str = ""
    expected: str = ""
    check: Callable[[str], bool] | None = None


COMMENT_MODES = ("always", "on-change", "on-failure", "off")


def _one_of(*choices: str) -> Callable[[str], bool]:
    return lambda v: v in choices


def _is_shard(v: str) -> bool:
    m = re.fullmatch(r"(\d+)/(\d+)", v)
    return m is not None and 1 <= int(m.group(1)) <= int(m.group(2))


def _is_providers(v: str) -> bool:
    return all(p.strip() in EXECUTION_PROVIDERS for p in v.split(","))


def _is_age_or_never(v: str) -> bool:
    try:
        return v == "never" or parse_age(v) >= 0
    except UserError:
        return False


def _is_path(v: str) -> bool:  # a leading '-' would be read as a flag by `parity-gate run`
    return not v.startswith("-")


DEFAULT_BUDGET = "16,45m"
_BUDGET = re.compile(r"\s*(\d+)\s*(m|min|h)?\s*")


def parse_budget(text: str) -> tuple[int | None, float | None]:
    """`bisect_budget`: "16,45m" → (16 probes, 45 minutes); either part may be left out
    ("45m", "16"); ValueError when a part is neither."""
    probes: int | None = None
    minutes: float | None = None
    for part in text.split(","):
        m = _BUDGET.fullmatch(part)
        if m is None or int(m.group(1)) < 1:
            raise ValueError(part)
        if m.group(2) is None:
            probes = int(m.group(1))
        else:
            minutes = int(m.group(1)) * (60 if m.group(2) == "h" else 1)
    return probes, minutes


def is_budget(text: str) -> bool:
    try:
        parse_budget(text)
    except ValueError:
        return False
    return True


INPUTS: dict[str, InputSpec] = {
    "manifest": InputSpec("parity.yml", "a path to parity.yml relative to the workspace",
                          _is_path),
    "baseline": InputSpec("", "a path to a baseline YAML file", _is_path),
    "providers": InputSpec("", f"a comma-separated list of {', '.join(EXECUTION_PROVIDERS)}",
                           _is_providers),
    "shard": InputSpec("", "K/N with 1 <= K <= N, e.g. 2/4", _is_shard),
    "select": InputSpec(),
    "jobs": InputSpec("", "an integer >= 1", lambda v: v.isdigit() and int(v) >= 1),
    "install": InputSpec("auto", "auto, none, or a bash command"),
    "fail_on": InputSpec("regressions", "regressions, any-failure or never", _one_of(*FAIL_ON)),
    "allow_all_skipped": InputSpec("false", "true or false", _one_of("true", "false")),
    "cache_dir": InputSpec(),
    "export_cache": InputSpec("true", "true or false", _one_of("true", "false")),
    "export_cache_max_age": InputSpec(DEFAULT_PRUNE_AGE, "never, or an age: a number and one "
                                      "of s, m, h, d, w, e.g. 30d, 12h", _is_age_or_never),
    "out_dir": InputSpec(),
    # Read by action.yml's shell step; validated here too so one table documents them all.
    "container": InputSpec("docker", "docker or none", _one_of("docker", "none")),
    "image": InputSpec(),
    "build_args": InputSpec("", "one NAME=value a line", lambda v: all(
        re.match(r"[A-Za-z_][A-Za-z0-9_]*=", line.strip()) for line in v.splitlines()
        if line.strip())),
    "forward_env": InputSpec("", "environment variable names separated by spaces",
                             lambda v: all(re.fullmatch(r"[A-Za-z_]\w*", n) for n in v.split())),
    "gpu": InputSpec("auto", "auto, true or false", _one_of("auto", "true", "false")),
    "python": InputSpec("python3", "a Python interpreter"),
    # The pull-request comment and the upstream search (parity_gate/github/post.py): the
    # tokens reach only that step, never `install`, the models or the gate's container.
    "comment": InputSpec("off", f"{', '.join(COMMENT_MODES)}", _one_of(*COMMENT_MODES)),
    "github_token": InputSpec(),
    "upstream": InputSpec("off", "off, search, draft or create",
                          _one_of("off", "search", "draft", "create")),
    "upstream_token": InputSpec(),
    "upstream_api_url": InputSpec("https://api.github.com", "an http(s) URL",
                                  lambda v: re.fullmatch(r"https?://\S+", v) is not None),
    # `parity-gate bisect` after a regression on a pull request that bumps dependencies.
    "bisect": InputSpec("off", "off or on-regression", _one_of("off", "on-regression")),
    "bisect_budget": InputSpec(DEFAULT_BUDGET, "probes and/or minutes, e.g. 16,45m or 30m",
                               lambda v: is_budget(v)),
    "results": InputSpec("", "a path to an earlier run's results.json", _is_path),
    "event_file": InputSpec("", "a path to the pull_request run's uploaded event file",
                            _is_path),
}
class InputError(Exception):
    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def input_env(name: str) -> str:
    """The variable Actions would set for input `name` (`fail_on` → `INPUT_FAIL_ON`)."""
    return "INPUT_" + name.replace(" ", "_").upper()


def read_inputs(env: Mapping[str, str]) -> dict[str, str]:
    """Every input, trimmed (as actions/core does), empty → default; all problems at once."""
    values: dict[str, str] = {}
    problems: list[str] = []
    for name, spec in INPUTS.items():
        value = env.get(input_env(name), "").strip() or spec.default
        if value and spec.check is not None and not spec.check(value):
            problems.append(f"{name}: got {value!r} (expected {spec.expected})")
        values[name] = value
    if problems:
        raise InputError(problems)
    return values
