"""Installs the package with pip into a temporary directory (from a copy of python/, so the
source tree stays clean) and checks that the installed package carries libchorus.so next to
itself, finds it without CHORUS_LIBRARY and runs a collective with it.
    CHORUS_LIBRARY=build/libchorus.so /usr/bin/python3 python/tests/test_install.py
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PIP_TIMEOUT_SEC = 240
RUN_TIMEOUT_SEC = 60

CHECK_SCRIPT = r"""
import os, sys, numpy as np, chorus
assert "CHORUS_LIBRARY" not in os.environ
print(chorus.__file__)
print(chorus.library_path)
comm = chorus.Communicator.from_unique_id(1, 0, chorus.UniqueId.new())
x = np.arange(6, dtype=np.float64)
comm.allreduce(x, op="max")
assert x.tolist() == [0, 1, 2, 3, 4, 5], x
comm.destroy()
print("installed package works")
"""


class InstallTest(unittest.TestCase):
    def test_pip_install_bundles_and_finds_the_library(self):
        library = os.environ.get("CHORUS_LIBRARY")
        if not library:
            self.skipTest("CHORUS_LIBRARY must name the built library to bundle")
        with tempfile.TemporaryDirectory(prefix="chorus-install-") as tmp:
            source = os.path.join(tmp, "src")
            os.makedirs(source)
            shutil.copy(os.path.join(PYTHON_DIR, "setup.py"), source)
            shutil.copytree(os.path.join(PYTHON_DIR, "chorus"), os.path.join(source, "chorus"),
                            ignore=shutil.ignore_patterns("__pycache__", "*.so*"))
            site = os.path.join(tmp, "site")
            pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                   "--no-index", "--disable-pip-version-check", "--target", site, source]
            done = subprocess.run(pip, capture_output=True, text=True, timeout=PIP_TIMEOUT_SEC)
            self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
            self.assertTrue(os.path.exists(os.path.join(site, "chorus", "libchorus.so")))

            env = {k: v for k, v in os.environ.items() if k not in ("CHORUS_LIBRARY", "PYTHONPATH")}
            env["PYTHONPATH"] = site
            run = subprocess.run([sys.executable, "-c", CHECK_SCRIPT], capture_output=True,
                                 text=True, timeout=RUN_TIMEOUT_SEC, env=env, cwd=tmp)
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
            package_file, library_path = run.stdout.splitlines()[:2]
            self.assertTrue(package_file.startswith(site), package_file)
            self.assertEqual(os.path.dirname(library_path), os.path.join(site, "chorus"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
