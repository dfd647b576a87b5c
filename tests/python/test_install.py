"""pip install . works offline, with Debian's setuptools and no build isolation, and installs a
package that imports and computes outside the build tree. The build directory the suite runs in
(WEFT_BUILD_DIR) is reused, so that the test does not compile weft a second time."""
import os
import subprocess
import sys

import pytest

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.skipif("WEFT_BUILD_DIR" not in os.environ, reason="run by ctest, which names its build directory")
def test_pip_install_offline_gives_an_importable_package(tmp_path):
    target = tmp_path / "site"
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--quiet",
                           "--target", str(target), SOURCE], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    names = {p.name for p in (target / "weft").iterdir()}
    assert {"__init__.py", "nn.py"} <= names and any(n.startswith("_weft.") and n.endswith(".so") for n in names), names
    check = subprocess.run([sys.executable, "-c", "import weft; m = weft.nn.Linear(3, 2); "
                            "print(weft.__file__, m(weft.ones(4, 3)).shape)"],
                           env=dict(env, PYTHONPATH=str(target)), cwd=tmp_path, capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    assert check.stdout.startswith(str(target / "weft" / "__init__.py")) and check.stdout.rstrip().endswith("(4, 2)")
