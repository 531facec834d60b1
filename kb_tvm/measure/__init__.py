"""Measurement: targets that describe the machine, and the build-and-run pipeline."""
