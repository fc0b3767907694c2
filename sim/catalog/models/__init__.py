"""Shipped models specs (TOML files beside this one)."""
