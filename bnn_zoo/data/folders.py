"""Folders of images as a data set reads them: every image file once, hidden entries skipped, and
no symbolic link followed (one leading out of the folder would read files that are not the data's,
one inside it files twice or around a loop for ever): a link is refused, naming it.

Usage::

    classes, files = class_files(Path("my_pngs"))   # ["cat", "dog"], [(path, 0), ...]
    files = image_files(Path("letters"))            # every image in it and its subfolders
"""
from __future__ import annotations

import os
from pathlib import Path

from ..core.errors import DataError

# The files a folder's images are read from: torchvision's ImageFolder's suffixes, so a folder holds
# the same images here as there (each one is decoded by bnn_zoo.data.images, which refuses other formats).
SUFFIXES = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def _entries(folder: Path) -> list[os.DirEntry]:
    """``folder``'s entries that are not hidden, sorted by name; a symbolic link is refused."""
    try:
        with os.scandir(folder) as found:
            entries = sorted((e for e in found if not e.name.startswith(".")), key=lambda e: e.name)
    except OSError as err:
        raise DataError(f"cannot read the folder {folder} ({err.strerror or type(err).__name__})") from None
    for entry in entries:
        if entry.is_symlink():
            raise DataError(f"{entry.path} is a symbolic link (to {os.readlink(entry.path)}); a data folder's "
                            "images are read from the folder itself, never through a link: copy what it links "
                            "to into the folder, or remove the link")
    return entries


def _images_under(folder: Path) -> list[Path]:
    """The image files in ``folder`` (sorted), then those of each subfolder (in sorted order), as
    torchvision's ImageFolder orders them."""
    entries = _entries(folder)
    files = [Path(e.path) for e in entries
             if e.is_file(follow_symlinks=False) and Path(e.name).suffix.lower() in SUFFIXES]
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            files += _images_under(Path(entry.path))
    return files


def _folder(folder: Path, what: str) -> Path:
    if folder.is_symlink():  # the data's own folder may be a link: it is read where it leads
        folder = folder.resolve()
    if not folder.is_dir():
        raise DataError(f"no folder at {folder}: {what}")
    return folder


def image_files(folder: Path) -> list[Path]:
    """The image files in a folder and its subfolders, sorted by path."""
    files = _images_under(_folder(folder, "give a folder of images"))
    if not files:
        raise DataError(f"no images ({'/'.join(SUFFIXES)}) in {folder}")
    return files


def class_files(folder: Path) -> tuple[list[str], list[tuple[Path, int]]]:
    """The classes of a folder with a subfolder of images per class (ImageFolder's layout), sorted
    by name, and each image file with its class's index."""
    folder = _folder(folder, "data.path names a folder with a subfolder of images per class")
    classes = [e.name for e in _entries(folder) if e.is_dir(follow_symlinks=False)]
    if not classes:
        raise DataError(f"{folder} holds no class folders: give it a subfolder of images per class")
    files = []
    for index, name in enumerate(classes):
        found = _images_under(folder / name)
        if not found:
            raise DataError(f"{folder / name} holds no images ({'/'.join(SUFFIXES)}): add some, or remove "
                            "the folder")
        files += [(path, index) for path in found]
    return classes, files
