"""The one compiled module: the pull-record decoder (nodes/client/_record_decode.c).

Everything else about the project is in pyproject.toml. The extension is optional: without a
C compiler the install still succeeds and the client decodes with its Python loop
(nodes/client/pull_decode.py), which gives the same messages, slower.
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("nodes.client._record_decode", ["nodes/client/_record_decode.c"], optional=True),
])
