"""Shipped vision-encoder specs (TOML files beside this one)."""
