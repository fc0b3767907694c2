"""Shipped links specs (TOML files beside this one)."""
