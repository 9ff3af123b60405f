"""Builds libsoma and libsoma_torch with CMake and puts them in the wheel beside the Python
package (soma/lib/), where soma/_library.py finds them. pyproject.toml has the metadata and the
install command. SOMA_PYTHON_BUILD_DIR: the CMake build directory (default build/python, kept
between installs so that a second install rebuilds only what changed)."""

import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = os.path.dirname(os.path.abspath(__file__))
# (folder in the build tree, file name in soma/lib)
LIBRARIES = ((os.path.join("src", "capi"), "libsoma.so.0"),
             (os.path.join("integrations", "torch"), "libsoma_torch.so"))


class BuildWithLibraries(build_py):
    """build_py, then CMake: a Release build of the two shared libraries only, linked to find
    each other in the folder they are installed in ($ORIGIN)."""

    def run(self):
        super().run()
        build_dir = os.environ.get("SOMA_PYTHON_BUILD_DIR", os.path.join(ROOT, "build", "python"))
        subprocess.check_call([
            "cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
            "-DSOMA_BUILD_TESTS=OFF", "-DSOMA_BUILD_BENCHMARKS=OFF", "-DSOMA_BUILD_TOOLS=OFF",
            "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON"])
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "soma", "soma_torch",
                               "--parallel", jobs])
        target = os.path.join(self.build_lib, "soma", "lib")
        os.makedirs(target, exist_ok=True)
        for folder, name in LIBRARIES:
            shutil.copyfile(os.path.realpath(os.path.join(build_dir, folder, name)),
                            os.path.join(target, name))


class WithNativeLibraries(Distribution):
    """A wheel for this platform, not a pure-Python one: it carries shared libraries."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithLibraries}, distclass=WithNativeLibraries)
