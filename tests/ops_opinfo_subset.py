"""A handful of OpInfo-derived variants for the fast tests (`ops_opinfo_subset:VARIANTS`).

Built once per torch version into the cache that `XDG_CACHE_HOME` names (the
tests point it at a temporary folder; workers inherit it) and read from there
in the parent and in every worker.
"""

from __future__ import annotations

from parity_gate.ops.opinfo import variants

# Families the hand-written catalogue never tried (convolution, cat, gather), a binary
# ufunc with special-value pairs, an integer-only op (its samples are made in int64), and
# expand and where (lambdas in OpInfo, spelled as the Tensor method giving their answer).
SUBSET = ("atan2", "bitwise_and", "cat", "expand", "gather", "nn.functional.conv2d", "where")
VARIANTS = [v for v in variants(SUBSET) if int(v.id.rsplit(".", 1)[1]) < 3]
