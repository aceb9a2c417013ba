"""Builds the native core: src_c/ (pure C99) wrapped by rtroute/core/_native.pyx.

If the C compiler or Cython is missing the build still succeeds without the extension and
rtroute falls back to its pure-Python twin (rtroute.core.reference); set RTROUTE_REQUIRE_NATIVE=1
to make a missing extension a build error instead (CI does).
"""
import glob
import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    def run(self):
        try:
            super().run()
        except Exception as exc:  # report and fall back, unless asked not to
            if os.environ.get("RTROUTE_REQUIRE_NATIVE") == "1":
                raise
            print(f"rtroute: native core not built ({exc}); using the pure-Python fallback")

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:
            if os.environ.get("RTROUTE_REQUIRE_NATIVE") == "1":
                raise
            print(f"rtroute: native core not built ({exc}); using the pure-Python fallback")


def extensions():
    c_sources = sorted(p for p in glob.glob("src_c/*.c") if not os.path.basename(p).startswith("test_"))
    try:
        from Cython.Build import cythonize
    except ImportError:
        if os.environ.get("RTROUTE_REQUIRE_NATIVE") == "1":
            raise
        return []
    ext = Extension(
        "rtroute.core._native",
        sources=["rtroute/core/_native.pyx", *c_sources],
        # a header change rebuilds the extension (and the sdist ships what it lists)
        depends=sorted(glob.glob("src_c/*.h")),
        include_dirs=["src_c"],
        extra_compile_args=["-O2", "-std=c99"],
    )
    return cythonize([ext], language_level=3)


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
