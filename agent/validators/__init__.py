"""The validator ladder, cheapest first: kernel-check, microbench, sim, real (see ladder.py)."""
