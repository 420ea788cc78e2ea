"""Installs the chorus Python package (pure Python over ctypes) and bundles libchorus.so next
to it when one is found: $CHORUS_LIBRARY, else the repository's build directory. Without a
bundled library the package looks for one at import time (see chorus/_lib.py).

    /usr/bin/python3 -m pip install ./python          (add --break-system-packages on Debian)
"""

import glob
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
LIBRARY_BASENAME = "libchorus.so"


def find_built_library():
    explicit = os.environ.get("CHORUS_LIBRARY")
    if explicit:
        path = os.path.join(explicit, LIBRARY_BASENAME) if os.path.isdir(explicit) else explicit
        if not os.path.exists(path):
            raise SystemExit(f"CHORUS_LIBRARY={explicit}: no such library")
        return path
    repo = os.path.dirname(HERE)
    candidates = [os.path.join(repo, "build", LIBRARY_BASENAME)]
    candidates += sorted(glob.glob(os.path.join(repo, "build*", LIBRARY_BASENAME)),
                         key=os.path.getmtime, reverse=True)
    return next((path for path in candidates if os.path.exists(path)), None)


class BuildPyWithLibrary(build_py):
    """build_py, plus a copy of libchorus.so (the file, not the symlink) inside the package."""

    def run(self):
        super().run()
        library = find_built_library()
        if library is None:
            print("chorus setup: no libchorus.so found; set CHORUS_LIBRARY at run time")
            return
        target = os.path.join(self.build_lib, "chorus", LIBRARY_BASENAME)
        shutil.copyfile(os.path.realpath(library), target)
        print(f"chorus setup: bundled {library}")


class BinaryDistribution(Distribution):
    """The wheel carries a native library, so it is platform specific."""

    def has_ext_modules(self):
        return True


setup(
    name="chorus",
    version="0.1.0",
    description="Chorus collective communication for Python: numpy, torch, torch.distributed",
    packages=["chorus", "chorus.torch"],
    python_requires=">=3.8",
    install_requires=["numpy"],
    extras_require={"torch": ["torch>=1.13"]},
    cmdclass={"build_py": BuildPyWithLibrary},
    distclass=BinaryDistribution,
    zip_safe=False,
)
