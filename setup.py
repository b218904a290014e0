"""The C extensions only (ember.record._v2codec, ember.client._append); pyproject.toml holds all the metadata."""
from setuptools import Extension, setup

setup(ext_modules=[
    Extension("ember.record._v2codec", ["platform/record/_v2codec.c"], extra_compile_args=["-O2"]),
    Extension("ember.client._append", ["platform/client/_append.c"], extra_compile_args=["-O2"]),
])
