"""The fidelity study (issue 9): the real engine and the simulator's mirror of it on the same cases,
with the real engine's own run-to-run spread beside every error (docs/fidelity.md, "Fidelity study").

    infralab fidelity run experiments/fidelity/full.toml --out DIR

`spec` reads the study file, `sim_side` is the one module that imports the simulator (workloads,
metrics, the mirror run), `step_times` chooses the step table the mirror charges (the profile, or
it scaled or a model fitted on calibration replays), `compare` does the error and spread
arithmetic, `runner` drives the engine, `report` writes fidelity.json, the table and the figures.
"""
