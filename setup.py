"""Only the optional compiled parts; everything else about the package is in pyproject.toml.

Two hot spots of loading a group log, each also written in Python: storage._speedups (storage/_speedups.c),
the inner loop of the log's parser, and coordinator._speedups (coordinator/_speedups.c), the reading of an
offset commit record. They are optional: without a C compiler (the slim container image) the install goes on
and the Python versions are used.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("storage._speedups", ["storage/_speedups.c"], optional=True),
        Extension("coordinator._speedups", ["coordinator/_speedups.c"], optional=True),
    ]
)
