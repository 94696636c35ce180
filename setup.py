"""Builds memwire._memwire with the project's CMake and ships libmemwire beside it: the offline path
(pip install --no-build-isolation without scikit-build-core; python/backend picks it).

Environment: MEMWIRE_CMAKE_ARGS (extra configure arguments), MEMWIRE_BUILD_JOBS (default: CPUs),
MEMWIRE_CMAKE_BUILD_DIR (the CMake build folder; default: under setuptools' build_temp).
"""

import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
# setuptools' own folders: not build/, where the C++ builds live. Made here, before setuptools
# checks them (egg_info refuses a missing egg_base, and a fresh clone has no such folder).
BUILD_BASE = os.path.join(ROOT, "build-python")
os.makedirs(BUILD_BASE, exist_ok=True)


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        # python/test names a folder beside build/: at the same depth, the compile lines match
        # the Release build's and a compiler cache serves them.
        build_dir = os.path.abspath(
            os.environ.get("MEMWIRE_CMAKE_BUILD_DIR") or os.path.join(self.build_temp, "cmake"))
        os.makedirs(build_dir, exist_ok=True)
        configure = [
            "cmake",
            "-S", ROOT,
            "-B", build_dir,
            "-DCMAKE_BUILD_TYPE=Release",
            "-DMEMWIRE_PARTS=sdk;sideband",
            "-DMEMWIRE_BUILD_TESTS=OFF",
            "-DMEMWIRE_BUILD_PYTHON=ON",
            f"-DPython3_EXECUTABLE={sys.executable}",
            # Installed, the libraries lie beside the extension: no build paths in the RPATH.
            "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",
            "-DCMAKE_INSTALL_RPATH=$ORIGIN",
        ] + shlex.split(os.environ.get("MEMWIRE_CMAKE_ARGS", ""))
        jobs = os.environ.get("MEMWIRE_BUILD_JOBS", str(os.cpu_count() or 1))
        subprocess.run(configure, check=True)
        subprocess.run(["cmake", "--build", build_dir, "--target", "_memwire", "-j", jobs], check=True)

        target = self.get_ext_fullpath(ext.name)
        package_out = os.path.dirname(target)
        os.makedirs(package_out, exist_ok=True)
        built = os.path.join(build_dir, "python", "memwire")
        module = [f for f in os.listdir(built) if f.startswith("_memwire") and f.endswith(".so")]
        if len(module) != 1:
            raise RuntimeError(f"expected one _memwire*.so in {built}, found {module}")
        shutil.copyfile(os.path.join(built, module[0]), target)
        for library, folder in (("libmemwire.so.0", "sdk"), ("libmemwire-sideband.so.0", "sideband")):
            # The soname (a symlink in the build tree) as a plain file.
            shutil.copyfile(os.path.realpath(os.path.join(build_dir, folder, library)),
                            os.path.join(package_out, library))


setup(
    ext_modules=[CMakeExtension("memwire._memwire")],
    cmdclass={"build_ext": CMakeBuild},
    package_data={"memwire": ["libmemwire.so.0", "libmemwire-sideband.so.0"]},
    zip_safe=False,
    options={"build": {"build_base": BUILD_BASE}, "egg_info": {"egg_base": BUILD_BASE}},
)
