"""Report writers; each is a function of a RunResult and never re-runs anything."""
