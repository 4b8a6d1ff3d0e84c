"""Only the compiled extensions live here; everything else is in pyproject.toml.

The extensions are required: a build without Cython or a C compiler fails, loudly, rather than
install a server that silently runs (and tests) only the pure-Python paths. Those paths stay
(the record codec in msgstore/record/codec.py, the protobuf paths of the Send RPC) as the
reference the compiled code is tested against, and run when ``MSGSTORE_PURE_PYTHON=1`` asks;
the server says at start which one it runs. ``msgstore.wire._native`` cimports the record
codec's shared declarations (record/_native.pxd).
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

ext_modules = cythonize(
    [
        Extension("msgstore.record._native", ["server/msgstore/record/_native.pyx"], extra_compile_args=["-O2"]),
        Extension("msgstore.wire._native", ["server/msgstore/wire/_native.pyx"], extra_compile_args=["-O2"]),
    ],
    language_level=3,
    include_path=["server"],
    compiler_directives={"embedsignature": True},
)

setup(ext_modules=ext_modules)
