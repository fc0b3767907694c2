"""Shipped specs (TOML data, read with importlib.resources): accelerators/, links/, models/.

The folders are packages so that setuptools ships their *.toml files in a regular install."""
