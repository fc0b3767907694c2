"""The shipped studies and example configs, as package data (`infralab.locations.experiments_dir()`
finds this folder); nothing here is imported as code except a study's optional hook, by path."""
