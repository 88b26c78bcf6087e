"""Running the hazard rules on one export: the checks, then the manifest's actions.

Worker side only (the checks import onnx and, where they need it, torch).
"""

from __future__ import annotations

from collections.abc import Iterable

from parity_gate.hazards import checks
from parity_gate.hazards.config import HazardSettings
from parity_gate.hazards.context import HazardContext
from parity_gate.hazards.rules import RULES
from parity_gate.model.hazards import Action, Hazard, Severity, Site
from parity_gate.model.text import strip_control


def run_checks(ctx: HazardContext, settings: HazardSettings | None = None) -> list[Hazard]:
    """Every enabled rule's check on a successful export."""
    return _run(ctx, settings, failure=False)


def check_failure(ctx: HazardContext, settings: HazardSettings | None = None) -> list[Hazard]:
    """The rules that read a failed export's error text (`ctx.error`)."""
    return _run(ctx, settings, failure=True)


def module_checks(ctx: HazardContext, settings: HazardSettings | None = None) -> list[Hazard]:
    """The rules that need only the module (training mode): run before any export, so a
    module whose export or binding fails still gets them (merge folds the repeat)."""
    return _run(ctx, settings, failure=False, only=("training-mode",))


def _run(ctx: HazardContext, settings: HazardSettings | None, failure: bool,
         only: tuple[str, ...] = ()) -> list[Hazard]:
    settings = settings or HazardSettings()
    out: list[Hazard] = []
    for rule in RULES:
        if only and rule.id not in only:
            continue
        name = rule.on_failure if failure else rule.check
        if not name or ctx.exporter not in rule.exporters:
            continue
        action, reason = settings.resolve(rule.id)
        if action is Action.OFF:
            continue
        try:
            found = getattr(checks, name)(ctx)
        except Exception as exc:  # a check is advisory: never lose the module's cases
            text = strip_control(f"{type(exc).__name__}: {exc}").splitlines()[0][:300]
            found = [checks.Found(f"the check could not run: {text}", severity=Severity.INFO)]
        out += [Hazard(rule.id, f.severity or rule.severity, action, ctx.module_name, f.message,
                       rule.fix, list(f.sites), [ctx.dtype] if ctx.dtype else [], reason)
                for f in found]
    return out


def merge(hazards: Iterable[Hazard]) -> list[Hazard]:
    """One finding per (module, rule, message, sites), listing every dtype it was seen in;
    table order of the rules, then first seen."""
    folded: dict[tuple[str, str, str, tuple[Site, ...]], Hazard] = {}
    for h in hazards:
        key = (h.module, h.rule, h.message, tuple(h.sites))
        seen = folded.get(key)
        if seen is None:
            folded[key] = h
        else:
            dtypes = list(dict.fromkeys([*seen.dtypes, *h.dtypes]))
            folded[key] = Hazard(seen.rule, seen.severity, seen.action, seen.module,
                                 seen.message, seen.fix, seen.sites, dtypes, seen.reason)
    order = {r.id: i for i, r in enumerate(RULES)}
    return sorted(folded.values(), key=lambda h: order.get(h.rule, len(order)))

