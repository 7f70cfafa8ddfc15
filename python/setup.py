"""Build step of the detcoll Python package: libdetcoll.so from the Go sources.

`pip install ./python` (from a checkout of the repository) runs build_py,
which builds the C library with

    go build -buildmode=c-shared -o <build>/detcoll/libdetcoll.so ./capi

in the repository root (the directory above this one) and ships it inside
the package, where detcoll finds it first (after $DETCOLL_LIB). Go (the
version go.mod names) and a C compiler for cgo are needed. Environment:

    DETCOLL_PREBUILT_LIB=/path/libdetcoll.so   ship that library, build nothing
    DETCOLL_GO=/path/to/go                     the go command (default: go on PATH)
"""

import os
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LIB = "libdetcoll.dylib" if sys.platform == "darwin" else "libdetcoll.so"


class NeedGo(SystemExit):
    pass


def _fail(msg):
    sys.stderr.write("\n" + "=" * 72 + "\ndetcoll: " + msg + "\n" + "=" * 72 + "\n\n")
    raise NeedGo(1)


def build_library(dest):
    prebuilt = os.environ.get("DETCOLL_PREBUILT_LIB", "").strip()
    if prebuilt:
        if not os.path.isfile(prebuilt):
            _fail(f"DETCOLL_PREBUILT_LIB={prebuilt} is not a file")
        shutil.copyfile(prebuilt, dest)
        return
    if not (os.path.isfile(os.path.join(ROOT, "go.mod")) and os.path.isdir(os.path.join(ROOT, "capi"))):
        _fail(f"the Go sources of detcoll are not in {ROOT} (go.mod and capi/ expected above python/).\n"
              "Install from a checkout of the repository (pip install ./python), or build the library\n"
              "yourself and set DETCOLL_PREBUILT_LIB=/path/to/libdetcoll.so.")
    go = os.environ.get("DETCOLL_GO") or shutil.which("go")
    if not go:
        _fail("building libdetcoll.so needs Go (the version in go.mod) and a C compiler (cgo),\n"
              "and no `go` command is on PATH. Install Go from https://go.dev/dl/ (or set DETCOLL_GO),\n"
              "or build the library elsewhere with\n"
              "    go build -buildmode=c-shared -o libdetcoll.so ./capi\n"
              "and set DETCOLL_PREBUILT_LIB=/path/to/libdetcoll.so.")
    env = dict(os.environ, CGO_ENABLED="1")
    env.setdefault("GOFLAGS", "-buildvcs=false")
    cmd = [go, "build", "-buildmode=c-shared", "-o", dest, "./capi"]
    print("detcoll: " + " ".join(cmd) + f"  (in {ROOT})", flush=True)
    try:
        subprocess.run(cmd, cwd=ROOT, env=env, check=True)
    except subprocess.CalledProcessError as e:
        _fail(f"`{' '.join(cmd)}` failed (exit status {e.returncode}); see its output above.\n"
              "It needs cgo: a C compiler (gcc or clang) on PATH.")
    header = os.path.splitext(dest)[0] + ".h"
    if os.path.exists(header):
        os.remove(header)  # the generated cgo header; include/detcoll.h is the API's


class BuildPyWithGo(build_py):
    def run(self):
        super().run()
        if self.dry_run:
            return
        dest = os.path.abspath(os.path.join(self.build_lib, "detcoll", LIB))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        build_library(dest)

    def get_outputs(self, include_bytecode=1):
        return super().get_outputs(include_bytecode) + [os.path.join(self.build_lib, "detcoll", LIB)]


class BinaryDistribution(Distribution):
    # The wheel carries a native library: platform-specific, not pure.
    def has_ext_modules(self):
        return True


cmdclass = {"build_py": BuildPyWithGo}
try:
    from wheel.bdist_wheel import bdist_wheel

    class BdistWheel(bdist_wheel):
        # ctypes, no CPython extension: any Python 3, one platform.
        def get_tag(self):
            _, _, plat = super().get_tag()
            return "py3", "none", plat

    cmdclass["bdist_wheel"] = BdistWheel
except ImportError:
    pass

setup(cmdclass=cmdclass, distclass=BinaryDistribution)
