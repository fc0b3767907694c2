"""Shipped accelerators specs (TOML files beside this one)."""
