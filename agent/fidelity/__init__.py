"""The fidelity study (issue 9): the real engine and the simulator's mirror of it on the same cases,
with the real engine's own run-to-run spread beside every error (docs/fidelity.md, "Fidelity study").

    infralab fidelity run experiments/fidelity/full.toml --out DIR

`spec` reads the study file, `sim_side` is the one module that imports the simulator (workloads,
metrics, the mirror run), `compare` does the error and spread arithmetic, `runner` drives the
engine, `report` writes fidelity.json, the table and the figures.
"""
