"""Installs the chorus Python package (pure Python over ctypes) and ties it to a libchorus.

The library is looked for, in order:
  1. $CHORUS_LIBRARY (a file, or a directory holding libchorus.so): bundled into the package;
  2. $CHORUS_PREFIX (an install prefix, as in cmake --install --prefix): recorded;
  3. the repository's build directories (build/, then the newest build*/): bundled;
  4. an installed Chorus: `pkg-config --variable=libdir chorus`, then each prefix of
     $CMAKE_PREFIX_PATH: recorded.
"Bundled" copies the library into the package; "recorded" writes its path into the generated
module chorus/_install_info.py, which chorus/_lib.py reads at import time. Without either, the
package looks for the library at import time (see chorus/_lib.py).

    /usr/bin/python3 -m pip install ./python          (add --break-system-packages on Debian)
    CHORUS_PREFIX=/opt/chorus pip install ./python    (an installed Chorus)
"""

import glob
import os
import shutil
import subprocess
import sysconfig

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
LIBRARY_BASENAME = "libchorus.so"
LIBRARY_SONAME = "libchorus.so.0"  # what an installed library is loaded by (its SONAME)
INFO_MODULE = "_install_info.py"


class Found:
    """A library and how it was found; bundle: copy it into the package, else record it."""

    def __init__(self, path, how, bundle, prefix=None):
        self.path, self.how, self.bundle, self.prefix = path, how, bundle, prefix


def library_in(libdir):
    """libdir's libchorus.so.0 (or, failing that, libchorus.so), or None."""
    for name in (LIBRARY_SONAME, LIBRARY_BASENAME):
        path = os.path.join(libdir, name)
        if os.path.exists(path):
            return path
    return None


def prefix_libdirs(prefix):
    """The library directories an install prefix may have: GNUInstallDirs' lib/<multiarch>
    (Debian), lib64 (Fedora), lib."""
    multiarch = sysconfig.get_config_var("MULTIARCH")
    subdirs = ([os.path.join("lib", multiarch)] if multiarch else []) + ["lib64", "lib"]
    return [os.path.join(prefix, sub) for sub in subdirs]


def library_in_prefix(prefix):
    for libdir in prefix_libdirs(prefix):
        path = library_in(libdir)
        if path:
            return path
    return None


def library_from_pkg_config():
    """(libdir, prefix) of the chorus pkg-config knows, or None when pkg-config is absent or
    knows no chorus."""
    libdir = run_pkg_config("libdir")
    return (libdir, run_pkg_config("prefix")) if libdir else None


def run_pkg_config(variable):
    """`pkg-config --variable=<variable> chorus`, or "" when pkg-config is absent or fails."""
    try:
        done = subprocess.run(["pkg-config", f"--variable={variable}", "chorus"],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def find_library():
    explicit = os.environ.get("CHORUS_LIBRARY")
    if explicit:
        path = os.path.join(explicit, LIBRARY_BASENAME) if os.path.isdir(explicit) else explicit
        if not os.path.exists(path):
            raise SystemExit(f"CHORUS_LIBRARY={explicit}: no such library")
        return Found(path, "CHORUS_LIBRARY", bundle=True)
    prefix = os.environ.get("CHORUS_PREFIX")
    if prefix:
        path = library_in_prefix(prefix)
        if path is None:
            raise SystemExit(f"CHORUS_PREFIX={prefix}: no {LIBRARY_SONAME} or {LIBRARY_BASENAME} "
                             f"in any of {', '.join(prefix_libdirs(prefix))}")
        return Found(path, "CHORUS_PREFIX", bundle=False, prefix=os.path.abspath(prefix))
    repo = os.path.dirname(HERE)
    candidates = [os.path.join(repo, "build", LIBRARY_BASENAME)]
    candidates += sorted(glob.glob(os.path.join(repo, "build*", LIBRARY_BASENAME)),
                         key=os.path.getmtime, reverse=True)
    path = next((path for path in candidates if os.path.exists(path)), None)
    if path:
        return Found(path, "the repository's build directory", bundle=True)
    from_pkg_config = library_from_pkg_config()
    if from_pkg_config:
        libdir, pc_prefix = from_pkg_config
        path = library_in(libdir)
        if path is None:
            raise SystemExit(f"pkg-config: chorus's libdir {libdir} has no {LIBRARY_SONAME} "
                             "(a broken install? check PKG_CONFIG_PATH)")
        return Found(path, "pkg-config", bundle=False, prefix=pc_prefix or None)
    for prefix in filter(None, os.environ.get("CMAKE_PREFIX_PATH", "").split(os.pathsep)):
        path = library_in_prefix(prefix)
        if path:
            return Found(path, "CMAKE_PREFIX_PATH", bundle=False, prefix=os.path.abspath(prefix))
    return None


def info_module_text(found):
    recorded = None if found is None or found.bundle else os.path.abspath(found.path)
    prefix = None if found is None else found.prefix
    how = "nothing (found at import time)" if found is None else found.how
    return (
        '"""Written by chorus\'s setup.py at build time: the libchorus this package was built\n'
        'against. LIBRARY_PATH is None when the library is bundled next to the package (or was\n'
        'not found at build time)."""\n\n'
        f"LIBRARY_PATH = {recorded!r}\n"
        f"PREFIX = {prefix!r}\n"
        f"FOUND_BY = {how!r}\n"
    )


class BuildPyWithLibrary(build_py):
    """build_py, plus a copy of libchorus.so (the file, not the symlink) inside the package or
    the path of an installed one, in chorus/_install_info.py."""

    def run(self):
        super().run()
        found = find_library()
        package_dir = os.path.join(self.build_lib, "chorus")
        with open(os.path.join(package_dir, INFO_MODULE), "w", encoding="utf-8") as info:
            info.write(info_module_text(found))
        if found is None:
            print("chorus setup: no libchorus.so found (CHORUS_LIBRARY, CHORUS_PREFIX, build "
                  "directory, pkg-config, CMAKE_PREFIX_PATH); set CHORUS_LIBRARY at run time")
            return
        if found.bundle:
            target = os.path.join(package_dir, LIBRARY_BASENAME)
            shutil.copyfile(os.path.realpath(found.path), target)
            print(f"chorus setup: bundled {found.path} (from {found.how})")
        else:
            print(f"chorus setup: recorded {found.path} (from {found.how})")


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
