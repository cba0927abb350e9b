"""The compiled conv kernels (ge/ops/csrc/conv.c -> ge.ops._native), an *optional* extension:
if gcc or Python.h is missing the build goes on without it and the numpy path runs
(ge/ops/native.py, ARCHITECTURE.md "ge/ops/csrc").  Everything else lives in setup.cfg."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("ge.ops._native", ["ge/ops/csrc/conv.c"], optional=True,
                             extra_compile_args=["-O3", "-std=gnu99", "-fno-math-errno", "-Wno-psabi",
                                                 # short row copies stay inline loops, not libc calls
                                                 "-fno-tree-loop-distribute-patterns"])])
