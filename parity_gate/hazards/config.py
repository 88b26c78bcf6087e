"""Manifest control of the hazard rules: per rule `fail`, `warn` or `off` (with a reason).

In `parity.yml`, under `defaults` or a module (the module's keys override the
defaults' key by key):

    hazards:
      baked-dim: fail
      constants-in-forward: {action: off, reason: "3-element normalisation constants"}

`off` stops the check for that module and always needs a reason, so a silenced rule
says why in review. YAML 1.1 reads a bare `off` as false; it is read back as "off"
so the error says what is missing (the reason) rather than "expected a string".
"""

from __future__ import annotations

import difflib
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    RootModel,
    WithJsonSchema,
)

from parity_gate.hazards.rules import BY_ID, RULE_IDS
from parity_gate.model.hazards import Action

ActionName = Literal["fail", "warn", "off"]


def _yaml_bool(value: Any) -> Any:
    return "off" if value is False else value


class RuleSetting(BaseModel):
    """One rule's action, with the reason (required for `off`)."""

    model_config = ConfigDict(extra="forbid")

    action: Annotated[ActionName, BeforeValidator(_yaml_bool)] = Field(
        description="fail: the finding blocks the merge; warn: reported only; off: not checked")
    reason: str | None = Field(None, min_length=1, description="why; required for off")

    def model_post_init(self, _context: Any) -> None:
        if self.action == "off" and not (self.reason or "").strip():
            raise ValueError("action off needs a reason: {action: off, reason: \"why\"}")


def _setting(value: Any) -> Any:
    """The short form `rule: fail` is `{action: fail}`; a bare `off` lacks its reason."""
    value = _yaml_bool(value)
    if value == "off":
        raise ValueError("off needs a reason: write {action: off, reason: \"why\"}")
    return {"action": value} if isinstance(value, str) else value


def _known_rule(rule: str) -> str:
    if rule not in BY_ID:
        close = difflib.get_close_matches(rule, RULE_IDS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"unknown hazard rule {rule!r}{hint}; rules: {', '.join(RULE_IDS)}")
    return rule


RuleId = Annotated[str, AfterValidator(_known_rule)]
_RULE_VALUE_SCHEMA = {"anyOf": [
    {"enum": ["fail", "warn"]},
    {"type": "object", "additionalProperties": False, "required": ["action"],
     "properties": {"action": {"enum": ["fail", "warn", "off"]},
                    "reason": {"type": "string", "minLength": 1}}},
], "description": "fail | warn | {action: fail|warn|off, reason: why} (off needs a reason)"}
RuleValue = Annotated[RuleSetting, BeforeValidator(_setting), WithJsonSchema(_RULE_VALUE_SCHEMA)]


class HazardSettings(RootModel[dict[RuleId, RuleValue]]):
    """Per-rule actions; a rule not named keeps its default (rules.py)."""

    root: dict[RuleId, RuleValue] = Field(
        default_factory=dict,
        json_schema_extra={"propertyNames": {"enum": list(RULE_IDS)}},
        description="hazard rule id → fail | warn | {action: fail|warn|off, reason}",
    )

    def resolve(self, rule: str) -> tuple[Action, str]:
        """The action for `rule` and the manifest's reason ("" when it kept the default)."""
        value = self.root.get(rule)
        if value is None:
            return BY_ID[rule].action, ""
        return Action(value.action), value.reason or ""

    def over(self, base: HazardSettings | None) -> HazardSettings:
        """These settings laid over `base` (a module's over the defaults'), key by key."""
        return HazardSettings({**(base.root if base else {}), **self.root})


def merge(*layers: HazardSettings | None) -> HazardSettings:
    """Defaults first, the module last."""
    out = HazardSettings()
    for layer in layers:
        if layer is not None:
            out = layer.over(out)
    return out
