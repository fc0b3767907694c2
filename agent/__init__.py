"""The dense-feedback loop: hypotheses, validators, findings, attribution, search and reproduce."""
