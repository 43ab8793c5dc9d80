"""Builds the trainer's C++ kernels (the ``*.cc`` files of this package) into one shared
library against the installed TensorFlow, and says where that library is.

TensorFlow 2.21 has no op for what some features need (a table on local disk), so the
trainer has kernels of its own: compiled with ``tf.sysconfig``'s flags and g++, loaded with
``tf.load_op_library`` (``library``). A library is only good for the sources it was built
from and the TensorFlow it was built against (TensorFlow's C++ ABI is not stable across
versions), so each build goes to a directory named by the hash of both (and of the
compiler's flags): ``$ETJ_KERNELS_DIR`` if set (the trainer image sets it to the library
it built), else ``~/.cache/etj/kernels``. A changed source or TensorFlow looks for another
directory; nothing stale is ever loaded.

``python -m etj_trainer.kernels.build`` (``make kernels``, the image's build, the tests'
fixture) builds when the library is missing and prints its path. Builds of the same key
take a lock, so two test lanes build once.

This module never loads a library (``library`` does) and never builds at a trainer's
start-up: a trainer without its library stops with ``library.KernelsError``.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
LIBRARY = "libetj_kernels.so"
# Bumped when the command below changes in a way the flags do not show.
RECIPE = "1"
# Optimized, and no contraction of a * b + c into one rounding (an FMA): the optimizer
# math must round as TensorFlow's kernels do.
OPTIMIZE = ["-O2", "-ffp-contract=off"]
# AddressSanitizer (the tests' one sanitized build): loaded with libasan preloaded.
VARIANTS = {"": [], "asan": ["-O1", "-g", "-fsanitize=address", "-fno-omit-frame-pointer"]}
# A compile of the library takes ~30 s on two cores; under a busy CI, several times that.
BUILD_TIMEOUT = 1200


def sources() -> list[Path]:
    """The kernels' C++ sources, in a fixed order."""
    return sorted([*HERE.glob("*.cc"), *HERE.glob("*.h")])


def cache_root() -> Path:
    """Where built libraries are kept, one directory per key."""
    env = os.environ.get("ETJ_KERNELS_DIR")
    return Path(env) if env else Path.home() / ".cache" / "etj" / "kernels"


def _flags() -> tuple[list[str], list[str], str]:
    import tensorflow as tf

    return tf.sysconfig.get_compile_flags(), tf.sysconfig.get_link_flags(), tf.__version__


def build_key(variant: str = "") -> str:
    """The hash of the sources, TensorFlow's version and the build's flags."""
    compile_flags, link_flags, version = _flags()
    digest = hashlib.sha256()
    for part in [RECIPE, version, variant, *compile_flags, *link_flags, *VARIANTS[variant]]:
        digest.update(part.encode() + b"\0")
    for source in sources():
        digest.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
    return f"{digest.hexdigest()[:16]}{'-' + variant if variant else ''}"


def library_path(variant: str = "") -> Path:
    """Where the library of these sources and this TensorFlow is (built or not)."""
    return cache_root() / build_key(variant) / LIBRARY


def command(out: Path, variant: str = "") -> list[str]:
    """The compiler's command line that builds the library into ``out``."""
    compile_flags, link_flags, _ = _flags()
    cxx = os.environ.get("CXX", "g++")
    return [
        cxx,
        "-shared",
        "-fPIC",
        *OPTIMIZE,
        *VARIANTS[variant],
        *compile_flags,
        *map(str, sources()),
        "-o",
        str(out),
        *link_flags,
    ]


def build(variant: str = "") -> Path:
    """The library's path, built first if missing (one builder per key at a time)."""
    path = library_path(variant)
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists():
            return path
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".so.tmp")
        os.close(fd)
        try:
            done = subprocess.run(
                command(Path(tmp), variant), capture_output=True, text=True, timeout=BUILD_TIMEOUT
            )
            if done.returncode != 0:
                raise RuntimeError(
                    f"building the etj kernels failed ({' '.join(command(Path(tmp), variant))}):\n"
                    + done.stderr[-4000:]
                )
            # Readable by every user (mkstemp makes it the builder's only): the image
            # builds as root and runs as another user.
            os.chmod(tmp, 0o755)
            # Atomic: a loader never sees half a library.
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", choices=sorted(VARIANTS), default="")
    print(build(parser.parse_args(argv).variant))


if __name__ == "__main__":
    main()
