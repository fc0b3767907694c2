"""Drivers of real serving engines (the ladder's top rung for cluster hypotheses): Hugging Face
transformers' continuous-batching engine on a random-weight Llama-architecture model, an open-loop
load generator, a per-step trace of the engine's own loop, a step-speed fingerprint and a step-time
profile written as a calibration table. Never imports infralab.sim or infralab.agent."""
