"""Benchmarks run by `rtroute bench ...`: each measures rtroute against a baseline in one run."""
