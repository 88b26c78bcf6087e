"""`parity-gate ops`: the op-level differential sweep that hunts exporter bugs.

Each op-and-argument variant (catalogue.py) runs on every dtype it accepts in
eager and on several input classes (inputs.py); many variants are exported as
one module and run in one ORT session (worker.py), and failures are isolated
by bisection (isolate.py) so one bad op never hides the others.
"""
