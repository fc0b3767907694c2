"""The validator ladder, cheapest first: kernel-check, microbench, sim, real (see ladder.py); each
validator is one module here declaring `VALIDATOR`, discovered by registry.py."""
