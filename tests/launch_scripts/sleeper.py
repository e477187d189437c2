"""Prints READY on each rank, then sleeps (the signal tests stop it).

With ``--fail-rank N`` rank N exits 3 at once instead.
"""
import os
import sys
import time

if sys.argv[1:2] == ["--fail-rank"] and os.environ["RANK"] == sys.argv[2]:
    sys.exit(3)
print(f"READY {os.environ['RANK']} {os.getpid()}", flush=True)
time.sleep(120)
