"""The C extension only (ember.record._v2codec); pyproject.toml holds all the metadata."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("ember.record._v2codec", ["platform/record/_v2codec.c"], extra_compile_args=["-O2"])])
