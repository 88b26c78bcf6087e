"""Follow-up checks on failing cases: the questions an expert asks before filing a bug.

Runs after the gate has its verdicts, in the same warm workers, one job per
(module, dtype) with failing cases. Each check is cheap-first and fails on its
own; the case's outcome never changes, it only gains a `Localisation` record.
"""
