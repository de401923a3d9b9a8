"""Helpers the tests of several folders share: IDX files written, small file systems mounted, the
scripts loaded as modules, a malformed image, the page served on a free port.

Usage: ``from helpers import load_script, malformed_tiff, running, tmpfs, write_idx``
"""
import gzip
import importlib.util
import socket
import struct
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

SCRIPTS_DIR = Path(__file__).resolve().parents[1] / "scripts"


def first_by_default(values) -> list:
    """Parameters for ``pytest.mark.parametrize``: the first value in the default suite, the others
    marked ``slow`` (left out of ``python -m pytest``, run by ``-m slow`` and CI)."""
    return [pytest.param(value, marks=() if i == 0 else pytest.mark.slow) for i, value in enumerate(values)]


def these_by_default(values, kept) -> list:
    """Parameters for ``pytest.mark.parametrize``: ``kept`` in the default suite, the others ``slow``."""
    return [pytest.param(value, marks=() if value in kept else pytest.mark.slow) for value in values]


def write_idx(path, tensor: torch.Tensor, gz: bool = False):
    header = bytes([0, 0, 0x08, tensor.dim()]) + b"".join(
        s.to_bytes(4, "big") for s in tensor.shape)
    raw = header + tensor.to(torch.uint8).numpy().tobytes()
    with (gzip.open if gz else open)(path, "wb") as f:
        f.write(raw)


def malformed_tiff(side: int = 28) -> bytes:
    """A small gray TIFF whose StripOffsets tag (273) is typed SRATIONAL (10), not LONG: Pillow opens
    it and fails inside its decoder with a TypeError (issue 47), not the OSError of a broken file."""
    tags = [(256, 3, side), (257, 3, side), (258, 3, 8), (259, 3, 1), (262, 3, 1), (273, 10, None), (277, 3, 1),
            (278, 3, side), (279, 4, side * side)]  # width, height, bits, no compression, black is 0, ...
    ifd = 8
    rational = ifd + 2 + 12 * len(tags) + 4  # the SRATIONAL's two numbers, after the directory
    pixels = rational + 8
    out = struct.pack("<2sHIH", b"II", 42, ifd, len(tags))
    for tag, kind, value in tags:
        out += struct.pack("<HHI", tag, kind, 1) + (struct.pack("<I", rational) if kind == 10 else
                                                    struct.pack("<HH", value, 0) if kind == 3 else struct.pack("<I", value))
    return out + struct.pack("<I", 0) + struct.pack("<ii", pixels, 1) + bytes(i % 256 for i in range(side * side))


@contextmanager
def tmpfs(folder, size: str = "2m", readonly: bool = False):
    """A small tmpfs mounted at ``folder`` (a full disk, a read-only folder); skips without the
    right to mount (root in most sandboxes and CI machines)."""
    folder.mkdir(exist_ok=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                      capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root): the full-disk and read-only cases are not run")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


def remount_readonly(folder) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)


def fill(folder) -> None:
    """Leave no free byte on the file system of ``folder``."""
    try:
        with open(folder / "filler", "wb", buffering=0) as f:
            while True:
                f.write(bytes(1 << 12))
    except OSError:  # No space left on device: full
        pass


def load_script(name: str):
    """scripts/NAME.py as a module (scripts/ is not put on sys.path: a script imports the package,
    never another script)."""
    path = SCRIPTS_DIR / f"{name}.py"
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextmanager
def running(app, **limits):
    """``app`` served as the command line serves it (``bnn_zoo.page.guard.server``), on a free port, in
    a thread: the uvicorn server and the port."""
    from bnn_zoo.page.guard import server

    sock = socket.create_server(("127.0.0.1", 0))
    served = server(app, **limits)
    thread = threading.Thread(target=served.run, kwargs={"sockets": [sock]})
    thread.start()
    try:
        end = time.monotonic() + 30
        while not served.started and thread.is_alive() and time.monotonic() < end:
            time.sleep(0.01)
        assert served.started, "the server did not start"
        yield served, sock.getsockname()[1]
    finally:
        served.should_exit = True
        thread.join(30)
        sock.close()


def read_to_end(sock: socket.socket) -> bytes:
    """What the server sends until it closes the connection."""
    found = b""
    while chunk := sock.recv(4096):
        found += chunk
    return found
