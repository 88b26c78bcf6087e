"""The masking of secret values, as the reports import it (it lives in `model.secrets`, so
that the export cache and the repro folders, below the reports, mask with the same one)."""

from parity_gate.model.secrets import (
    KNOWN,
    LIST_ENV,
    MASK,
    MIN_LENGTH,
    SUFFIXES,
    MaskedStream,
    Masker,
    secret_values,
)

__all__ = ["KNOWN", "LIST_ENV", "MASK", "MIN_LENGTH", "SUFFIXES", "MaskedStream", "Masker",
           "secret_values"]
