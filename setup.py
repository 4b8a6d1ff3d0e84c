"""Only the compiled extension lives here; everything else is in pyproject.toml.

The extension is optional: if it cannot be built, the pure-Python codec is used instead.
"""

from setuptools import Extension, setup

try:
    from Cython.Build import cythonize
except ImportError:  # building without Cython: the pure-Python fallback is used
    ext_modules = []
else:
    ext_modules = cythonize(
        [Extension("msgstore.store._native", ["server/msgstore/store/_native.pyx"], optional=True,
                   extra_compile_args=["-O2"])],
        language_level=3,
        compiler_directives={"embedsignature": True},
    )

setup(ext_modules=ext_modules)
