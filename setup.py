"""Packages are discovered, not listed by hand: a new package below kb_tvm cannot be left out of the
wheel. The top-level schedules/ and workloads/ ship inside it as kb_tvm.schedules and kb_tvm.workloads
(pyproject.toml's package-dir); everything else is configured there."""

from setuptools import find_packages, setup

setup(packages=find_packages(include=["kb_tvm", "kb_tvm.*"]) + ["kb_tvm.schedules", "kb_tvm.workloads"])
