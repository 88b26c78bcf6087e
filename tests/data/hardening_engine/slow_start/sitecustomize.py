"""Put on PYTHONPATH by tests/test_hardening_engine.py: a worker process (multiprocessing's
spawn child) starts HARDENING_SLOW_START_S seconds late, as on a loaded machine where the
torch import is slow. The gate itself and other processes start as usual."""

import os
import sys
import time

if "--multiprocessing-fork" in sys.argv:
    time.sleep(float(os.environ.get("HARDENING_SLOW_START_S", "0")))
