"""Drivers of real serving engines (the ladder's top rung for cluster hypotheses). Never imports
infralab.sim or infralab.agent (tests/test_layering.py); docs/fidelity.md describes the engine.

The parts, one module each:
- `model_shape`: `ModelShape` (the simulator catalog's field names, or a transformers Llama
  config.json), `TINY`, `SMALL`.
- `engine`: `EngineSettings`, `RealEngine` (transformers' continuous-batching manager on a
  random-weight Llama, CPU; `submit`, `next_result`, `quiet`, `resolved`), `build_model`.
- `step_trace`: `StepRecord`, `BatchShape`, `StepTrace`, `install_step_hooks` (every real step).
- `step_shape`, `synthetic_step`: `StepShape`, `time_step` (one step of a chosen shape, timed).
- `fingerprint`: `fingerprint`, `drift` (the step-speed reference taken around every run).
- `load_generator`: `ReplayRequest`, `replay`, `warm_up`, `Replay`, `RequestTiming` (open loop).
- `contention`: `CpuSampler`, `judge`, `Contention` (other work on the cores during a replay).
- `step_fit`: `fit_steps`, `StepFit`, `step_errors`, `write_step_table` (a step-time model fitted
  on replay steps, cross-validated, written as a step table).
- `profile`: `ProfileGrid`, `profile`, `calibration_rows`, `write_profile` (calibration rows).
- `step_work`: static flops and bytes of a step.
- `schedule_trace`: `schedule_without_forward` (the engine's exact schedule, no forward, no clock).
- `config`: `load_real_config`, `real_config_from_doc`, `engine_settings` (a simulation config as the
  real side reads it: `[workload]`, `[engine]` under the mirror's names, `[real]`).
- `machine`: `memory_need`, `check_fits_machine` (a model too large for this machine is refused).
- `run_record`: a replay as the shared `RunRecord` (what the metrics read).
- `run`, `profile_run`, `cli`: `infralab real run` and `infralab real profile`.
"""
