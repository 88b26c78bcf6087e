"""Export hazard checks: the known ways an export succeeds and is still wrong.

Static checks of one export's artifacts, run in the module worker right where
the export happens (`run_checks` after it, `check_failure` on its error text).
The rules are one table (`rules.RULES`); the manifest's `hazards:` settings
(`config.HazardSettings`) promote, keep or silence each per module.

This package file imports nothing, so the manifest can import `hazards.config`
(the settings model and the rule table: no torch, no onnx) without loading the
checks; the worker imports `hazards.run`.
"""
