#!/usr/bin/env python3
"""Write the generated blocks of docs/reference/*.md from the code they describe.

`python scripts/gen_reference.py` rewrites every block between its markers
(`<!-- generated:NAME:start ... -->` … `<!-- generated:NAME:end -->`; the manifest keys keep
`parity_gate.manifest.docs`'s markers) and leaves the prose around them alone;
`--check` changes nothing and exits 1 naming the stale pages. tests/test_docs_tree.py runs
the same comparison in memory. Sources: the manifest models (`manifest.docs`), the argparse
parser (`cli.build_parser`), action.yml's inputs and outputs, the outcome records
(`model.outcomes`), the hazard rule table (`hazards.rules`) and the results schema.

A script, not a module of the package: it reads `cli`, the top import layer, and the
package must not depend on its own documentation.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "reference"
COMMAND = "python scripts/gen_reference.py"


def _cell(text: Any) -> str:
    """One markdown table cell: a single line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def manifest_keys() -> str:
    from parity_gate.manifest.docs import render
    return render()


def _actions(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    for action in parser._actions:
        if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) \
                and action.help != argparse.SUPPRESS:  # kept for old callers, not documented
            yield action


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, Any]]:
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            out += [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return out


def _argument(action: argparse.Action) -> str:
    if not action.option_strings:
        name = action.metavar or action.dest
        return f"`{name}`" + (" …" if action.nargs in ("+", "*") else "")
    flags = ", ".join(action.option_strings)
    if action.nargs == 0:
        return f"`{flags}`"
    value = action.metavar or (
        "{" + ",".join(map(str, action.choices)) + "}" if action.choices else action.dest.upper())
    return f"`{flags} {value}`"


def _default(action: argparse.Action) -> str:
    default = action.default
    if action.nargs == 0 or default in (None, [], argparse.SUPPRESS):
        return ""
    if isinstance(default, list):
        return ", ".join(f"`{d}`" for d in default)
    return f"`{default}`"


def cli() -> str:
    from parity_gate import cli as module
    from parity_gate.engine.environment import usable_cores

    # Help texts that name this machine: its cores (--jobs), the installed package (--example).
    local = {f", {usable_cores()} here": "",
             str(module.EXAMPLE): "…/site-packages/parity_gate/example/parity.yml"}

    def helped(action: argparse.Action) -> str:
        text = action.help or ""
        for mine, general in local.items():
            text = text.replace(mine, general)
        return _cell(text)

    parser = module.build_parser()
    out: list[str] = []

    def walk(prog: str, help_text: str, parser: argparse.ArgumentParser, depth: int) -> None:
        subs = _subcommands(parser)
        actions = [a for a in _actions(parser) if a.dest != "version"]
        out.extend(["", f"{'#' * depth} `{prog}`", ""])
        if help_text:
            out.extend([_cell(help_text[0].upper() + help_text[1:]) + ".", ""])
        if actions:
            out.extend(["| argument | default | meaning |", "|---|---|---|"])
            out.extend(f"| {_argument(a)} | {_default(a)} | "
                       f"{helped(a)} |" for a in actions)
        for name, sub_help, sub in subs:
            walk(f"{prog} {name}", sub_help, sub, min(depth + 1, 4) if subs else depth)

    for name, help_text, sub in _subcommands(parser):
        walk(f"parity-gate {name}", help_text, sub, 3)
    return "\n".join(out).strip("\n")


def _action_yml() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))


def action_inputs() -> str:
    out = ["| input | default | meaning |", "|---|---|---|"]
    for name, spec in _action_yml()["inputs"].items():
        default = spec.get("default", "")
        out.append(f"| `{name}` | {f'`{default}`' if default != '' else ''} | "
                   f"{_cell(spec.get('description', ''))} |")
    return "\n".join(out)


def action_outputs() -> str:
    out = ["| output | value |", "|---|---|"]
    for name, spec in _action_yml()["outputs"].items():
        out.append(f"| `{name}` | {_cell(spec.get('description', ''))} |")
    return "\n".join(out)


def outcomes() -> str:
    from parity_gate.model.outcomes import Outcome

    out = ["| outcome | JUnit | fails the case | severity | meaning |", "|---|---|---|---|---|"]
    for outcome in Outcome:
        info = outcome.info
        out.append(f"| `{outcome.value}` | {info.junit or '—'} | "
                   f"{'yes' if info.failed else 'no'} | {info.severity} | "
                   f"{_cell(info.description)} |")
    return "\n".join(out)


def hazard_rules() -> str:
    from parity_gate.hazards.rules import RULES

    out = ["| rule | severity | default | exporters | finds | the fix |",
           "|---|---|---|---|---|---|"]
    for rule in RULES:
        out.append(f"| `{rule.id}` | {rule.severity.value} | {rule.action.value} | "
                   f"{', '.join(rule.exporters)} | {_cell(rule.title)} | {_cell(rule.fix)} |")
    return "\n".join(out)


def _type(spec: dict[str, Any]) -> str:
    if "$ref" in spec:
        return spec["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in spec:
        return " or ".join(_type(s) for s in spec["anyOf"])
    if "const" in spec:
        return f"`{spec['const']}`"
    kind = spec.get("type", "any")
    if kind == "array" and "items" in spec:
        return f"list of {_type(spec['items'])}"
    if kind == "object" and isinstance(spec.get("additionalProperties"), dict):
        return f"map → {_type(spec['additionalProperties'])}"
    return str(kind)


def _meaning(spec: dict[str, Any], defs: dict[str, Any]) -> str:
    """The key's own description, else that of the record it holds (first paragraph)."""
    text = spec.get("description", "")
    refs = [s["$ref"] for s in [spec, *spec.get("anyOf", []), spec.get("items", {})]
            if isinstance(s, dict) and "$ref" in s]
    if not text and refs:
        text = defs.get(refs[0].rsplit("/", 1)[-1], {}).get("description", "")
    return text.split("\n\n")[0]


def _properties(schema: dict[str, Any], defs: dict[str, Any]) -> list[str]:
    required = set(schema.get("required", []))
    out = ["| key | type | always present | meaning |", "|---|---|---|---|"]
    for name, spec in schema["properties"].items():
        meaning = _meaning(spec, defs)
        out.append(f"| `{name}` | {_cell(_type(spec))} | {'yes' if name in required else 'no'} "
                   f"| {_cell(meaning)} |")
    return out


def results_json() -> str:
    from parity_gate.model.schema import RESULTS_SCHEMA_FILE

    schema = json.loads(RESULTS_SCHEMA_FILE.read_text(encoding="utf-8"))
    defs = schema["$defs"]
    out = ["**top level**", "", *_properties(schema, defs)]
    for name in ("RunVerdict", "CaseResult", "CaseKey"):
        out += ["", f"**`{name}`** (in `{'verdict' if name == 'RunVerdict' else 'cases[]'}`"
                f"{'.key' if name == 'CaseKey' else ''})", "", *_properties(defs[name], defs)]
    return "\n".join(out)


# page → the blocks it holds, by name
PAGES: dict[str, dict[str, Callable[[], str]]] = {
    "manifest.md": {"manifest-keys": manifest_keys},
    "cli.md": {"cli": cli},
    "action.md": {"action-inputs": action_inputs, "action-outputs": action_outputs},
    "outcomes.md": {"outcomes": outcomes},
    "hazard-rules.md": {"hazard-rules": hazard_rules},
    "results-json.md": {"results-json": results_json},
}


def markers(name: str) -> tuple[str, str]:
    if name == "manifest-keys":
        from parity_gate.manifest.docs import END, START
        return START, END
    return f"<!-- generated:{name}:start ({COMMAND}) -->", f"<!-- generated:{name}:end -->"


def regenerate(page: str, text: str) -> str:
    """`text` with every generated block of `page` rendered afresh."""
    for name, render in PAGES[page].items():
        start, end = markers(name)
        if start not in text or end not in text:
            raise SystemExit(f"docs/reference/{page}: the markers of block {name!r} are "
                             f"missing ({start} … {end})")
        head, rest = text.split(start, 1)
        tail = rest.split(end, 1)[1]
        body = render()
        if name == "manifest-keys":  # render() brings its own markers
            body = body[len(start):-len(end)].strip("\n")
        text = f"{head}{start}\n\n{body}\n\n{end}{tail}"
    return text


def stale_pages() -> list[str]:
    """The pages whose generated blocks differ from what the code says now."""
    return [page for page in PAGES
            if (REFERENCE / page).read_text(encoding="utf-8")
            != regenerate(page, (REFERENCE / page).read_text(encoding="utf-8"))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 naming the pages that are stale")
    args = parser.parse_args(argv)
    stale = stale_pages()
    if args.check:
        for page in stale:
            print(f"docs/reference/{page} is stale: run {COMMAND}")
        return 1 if stale else 0
    for page in stale:
        path = REFERENCE / page
        path.write_text(regenerate(page, path.read_text(encoding="utf-8")), encoding="utf-8")
        print(f"updated docs/reference/{page}")
    if not stale:
        print("docs/reference is up to date")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
