# SPDX-License-Identifier: BSD-2-Clause
"""Build the procreg extension against libprocreg.

Where libprocreg is found, first match wins:
  PROCREG_BUILD_DIR   a CMake build tree of procreg (its libprocreg.so and
                      generated headers, this checkout's include/); the
                      module then loads that library by its run path
  pkg-config procreg  an installed libprocreg
  otherwise           the compiler's default paths
"""
import os
import shlex
import subprocess

from setuptools import Extension, setup

here = os.path.dirname(os.path.abspath(__file__))
include_dirs, library_dirs, rpath, extra = [], [], [], []
build = os.environ.get("PROCREG_BUILD_DIR")
if build:
    build = os.path.abspath(build)
    include_dirs = [os.path.join(here, "..", "..", "include"), os.path.join(build, "generated")]
    library_dirs = rpath = [build]
else:
    try:
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", "procreg"],
                               check=True, capture_output=True, text=True).stdout
        extra = shlex.split(flags)
    except (OSError, subprocess.CalledProcessError):
        pass

setup(
    ext_modules=[
        Extension(
            "procreg",
            sources=["procreg.c"],
            include_dirs=include_dirs,
            library_dirs=library_dirs,
            runtime_library_dirs=rpath,
            libraries=["procreg"],
            # Warnings are errors against a build tree (developers, CI),
            # as in the C build; never for an installed library's users.
            extra_compile_args=["-std=gnu11", "-Wall", "-Wextra",
                                "-Wno-missing-field-initializers", "-Wno-cast-function-type"]
            + (["-Werror"] if build else [])
            + [f for f in extra if not f.startswith("-l")],
            extra_link_args=[f for f in extra if f.startswith("-L")],
        )
    ],
)
