"""Only the optional compiled part; everything else about the package is in pyproject.toml.

storage._speedups (storage/_speedups.c) is the inner loop of the group log's parser. It is optional: without a
C compiler (the slim container image) the install goes on and storage.format uses its pure-Python loop.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("storage._speedups", ["storage/_speedups.c"], optional=True)])
