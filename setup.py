"""Only the compiled extensions live here; everything else is in pyproject.toml.

The extensions are optional: if they cannot be built, the pure-Python code paths are used
instead (the record codec in msgstore/record/codec.py, the protobuf paths of the Send RPC).
``msgstore.wire._native`` cimports the record codec's shared declarations (record/_native.pxd).
"""

from setuptools import Extension, setup

try:
    from Cython.Build import cythonize
except ImportError:  # building without Cython: the pure-Python fallbacks are used
    ext_modules = []
else:
    ext_modules = cythonize(
        [Extension("msgstore.record._native", ["server/msgstore/record/_native.pyx"], optional=True, extra_compile_args=["-O2"]),
         Extension("msgstore.wire._native", ["server/msgstore/wire/_native.pyx"], optional=True, extra_compile_args=["-O2"])],
        language_level=3,
        include_path=["server"],
        compiler_directives={"embedsignature": True},
    )

setup(ext_modules=ext_modules)
