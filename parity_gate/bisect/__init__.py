"""`parity-gate bisect`: which package, which version broke the failing cases.

search (pure: the order of probes, skips, the bound) · judge (pure: signatures) ·
index / sets (the versions in between; the good and bad sets) · probe (the side
effects: environments, installs, runs) · upstream (merged PRs between releases).
"""
