"""pip install --no-build-isolation . : weft's Python module, built by CMake as `make build` builds it.

The library and the module are compiled in build-python/ (or the configured build directory named
by WEFT_BUILD_DIR, whose module is then taken as it is), and the package is python/weft/ with the
module beside it. No download: the build needs what scripts/setup installs.
"""
import glob
import os
import re
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

SOURCE = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = os.environ.get("WEFT_BUILD_DIR") or os.path.join(SOURCE, "build-python")
        subprocess.run(["cmake", "-S", SOURCE, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                        f"-DPYTHON_EXECUTABLE={sys.executable}"], check=True)
        subprocess.run(["cmake", "--build", build, "--target", "weft_python"], check=True)
        built = glob.glob(os.path.join(build, "python", "weft", "_weft*.so"))
        if len(built) != 1:
            sys.exit(f"setup.py: expected one _weft module in {build}/python/weft, found {built}")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built[0], target)


# setuptools' own build files go beside CMake's, not into the CMake build directory build/.
SETUPTOOLS_DIR = os.path.join(SOURCE, "build-python")
os.makedirs(SETUPTOOLS_DIR, exist_ok=True)

with open(os.path.join(SOURCE, "CMakeLists.txt")) as f:
    version = re.search(r"project\(weft VERSION ([0-9.]+)", f.read()).group(1)

setup(
    name="weft",
    version=version,
    description="weft's tensors, ops, autograd, models and optimizers from Python",
    packages=["weft"],
    package_dir={"": "python"},
    ext_modules=[Extension("weft._weft", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": os.path.join(SETUPTOOLS_DIR, "setuptools")}, "egg_info": {"egg_base": SETUPTOOLS_DIR}},
    python_requires=">=3.9",
)
