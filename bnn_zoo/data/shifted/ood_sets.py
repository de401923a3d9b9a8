"""Out-of-distribution sets as uint8 images [n, 28, 28], white on black like MNIST: the far ones
(notMNIST, FashionMNIST, MNIST for a FashionMNIST model, uniform noise) and near ones built here
from MNIST test digits and the fonts on the machine, each seeded:

- ``letters``: letters that look like no digit, in every font matplotlib finds, centred like digits
- ``rotated``: digits other than 0, 1 and 8 turned 90 degrees
- ``overlaid``: two digits of different classes on top of each other
- ``inverted``: black digits on white
- ``constant``: images of one grey level (0, all black, included)
- ``scribbles``: a few random pen strokes, as a person might draw on a canvas
- ``blank``: the all-black image

and the check of a set of your own, NAME=FOLDER of images (``own_set_problem``), which evaluate's
--ood and a run's data.ood pass before any work.

Usage: ``images = ood_images("rotated", root, size=2000)``
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Optional

import torch
from PIL import Image, ImageDraw, ImageFont

from ...core.errors import DataError
from ..folders import class_files, image_files
from ..images import centred, pixel_count
from ..own import read_images
from ..sets import DATA_ENV, data_root, find_idx, load_torchvision, read_idx

FAR = ("notmnist", "fashion_mnist", "mnist", "noise")
NEAR = ("letters", "rotated", "overlaid", "inverted", "constant", "scribbles", "blank")
OOD_SETS = FAR + NEAR
# Letters that no font draws like a digit (O, I, l, S, Z, B, G, q, g, b left out).
LETTERS = "ACEFHKMNPRTUVWXYackmnprtuvwxy"


def ood_entry_problem(entry: str) -> Optional[str]:
    """What is wrong with an OOD entry (evaluate's ``--ood``, ``evaluate_run``'s ``ood``): a built-in
    set's name, or NAME=FOLDER of images checked as ``own_set_problem`` checks it; None where nothing is."""
    name, _, folder = entry.partition("=")
    if name not in OOD_SETS and not (folder and name):
        return f"{entry!r} is neither an OOD set ({', '.join(OOD_SETS)}) nor NAME=FOLDER"
    problem = own_set_problem(name, folder) if folder else None
    return problem and f"{entry!r}: {problem}"


def own_set_problem(name: str, folder: str, spelled: str = "{name}={folder}") -> Optional[str]:
    """What is wrong with an OOD set of your own, ``name`` for the images in ``folder`` (and its
    subfolders), its fix written as ``spelled`` spells an entry (evaluate's NAME=FOLDER, a config's
    mapping); None where nothing is. Said before the work, not skipped after it."""
    if not name or "=" in name:  # evaluate reads NAME=FOLDER up to the first '='
        return f"{name!r} is no name for a set; give {spelled.format(name='NAME', folder=folder)}, NAME without '='"
    if name in OOD_SETS:  # its figures would be stored as the built-in set's
        return (f"{name} is a built-in OOD set's name; pick another name for your folder (for example "
                f"{spelled.format(name=f'my_{name}', folder=folder)})")
    fix = f"give {spelled.format(name='NAME', folder='FOLDER')}, FOLDER a folder of images"
    if not folder or not Path(folder).expanduser().is_dir():
        return f"there is no folder {folder or repr(folder)}; {fix} (in subfolders or not)"
    try:
        files = image_files(Path(folder).expanduser())
    except DataError as err:
        return f"{err}; {fix}"
    return _unreadable(files)


def _unreadable(files: list[Path]) -> Optional[str]:
    """What is wrong with the first file of ``files`` that is no image evaluate reads (its header
    alone is read), and how many such there are; None where every one is an image."""
    bad = []
    for file in files:
        try:
            pixel_count(file)
        except ValueError as err:
            bad.append((file, err))
    if not bad:
        return None
    file, why = bad[0]
    if len(bad) == 1:
        return f"{file} cannot be read as an image ({why}): delete or replace it"
    return (f"{len(bad)} of its {len(files)} files cannot be read as images, the first {file} ({why}): delete or "
            "replace them")


def ood_images(name: str, root: Optional[str], size: int, seed: int = 0) -> torch.Tensor:
    """The OOD set ``name`` as uint8 images [n, 28, 28], n = ``size`` (at most, for notMNIST and the
    data sets; ``blank`` is one image)."""
    if name == "notmnist":
        return load_notmnist(root)[:size]
    if name in ("fashion_mnist", "mnist"):
        return load_torchvision(name, root, train=False, download=False)[0][:size]
    if name == "noise":
        return white_noise(size, seed)
    g = torch.Generator().manual_seed(seed)
    if name == "letters":
        return letters(size, g)
    if name == "constant":
        levels = torch.randint(0, 256, (size,), generator=g, dtype=torch.uint8)
        levels[0] = 0
        return levels[:, None, None].expand(size, 28, 28).clone()
    if name == "blank":
        return torch.zeros(1, 28, 28, dtype=torch.uint8)
    if name == "scribbles":
        return scribbles(size, g)
    if name not in NEAR:
        raise ValueError(f"unknown out-of-distribution set {name!r}; choose from {', '.join(OOD_SETS)}")
    if name == "overlaid":
        return overlaid_digits(root, size, seed)[0]
    images, labels = load_torchvision("mnist", root, train=False, download=False)
    if name == "inverted":
        return 255 - images[torch.randperm(len(images), generator=g)[:size]]
    keep = ~torch.isin(labels, torch.tensor([0, 1, 8]))  # rotated
    picked = images[keep][torch.randperm(int(keep.sum()), generator=g)[:size]]
    return torch.rot90(picked, 1, dims=(1, 2)).contiguous()


def overlaid_digits(root: Optional[str], size: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``overlaid`` set: uint8 images [size, 28, 28] of two MNIST test digits of different
    classes on top of each other, and those classes [size, 2]."""
    images, labels = load_torchvision("mnist", root, train=False, download=False)
    g = torch.Generator().manual_seed(seed)
    first = torch.randint(0, len(images), (size,), generator=g)
    second = torch.randint(0, len(images), (size,), generator=g)
    clash = labels[first] == labels[second]
    while clash.any():  # redraw partners of the same class
        second[clash] = torch.randint(0, len(images), (int(clash.sum()),), generator=g)
        clash = labels[first] == labels[second]
    return torch.maximum(images[first], images[second]), torch.stack([labels[first], labels[second]], 1)


@lru_cache(maxsize=1)
def font_files() -> tuple[str, ...]:
    """Every TrueType font matplotlib finds on the machine, and its own DejaVu Sans. The letters set
    depends on them: the scoreboard records their names."""
    from matplotlib import font_manager

    fonts = {f for f in font_manager.findSystemFonts(fontext="ttf") if f.lower().endswith(".ttf")}
    fonts.add(matplotlib_font("DejaVu Sans"))
    return tuple(sorted(fonts))


def matplotlib_font(family: str) -> str:
    """The file of a font family as matplotlib resolves it (its own copy of DejaVu Sans is always there)."""
    from matplotlib import font_manager

    return font_manager.findfont(family)


def glyph(text: str, font_file: str, angle: float = 0.0) -> torch.Tensor:
    """``text`` written in a font, turned ``angle`` degrees, centred like a digit."""
    font = ImageFont.truetype(font_file, 96)
    canvas = Image.new("L", (160, 160))
    ImageDraw.Draw(canvas).text((30, 10), text, fill=255, font=font)
    return centred(canvas.rotate(angle, resample=Image.BILINEAR))


def drawing(strokes: list[list[tuple[float, float]]]) -> torch.Tensor:
    """Pen strokes (points on a 112 x 112 pad) drawn 9 wide, as on a canvas, centred like a digit."""
    canvas = Image.new("L", (112, 112))
    draw = ImageDraw.Draw(canvas)
    for points in strokes:
        draw.line(points, fill=255, width=9, joint="curve")
    return centred(canvas)


def letters(size: int, g: torch.Generator) -> torch.Tensor:
    fonts = font_files()
    images = []
    for _ in range(size):
        letter = LETTERS[int(torch.randint(len(LETTERS), (1,), generator=g))]
        font_file = fonts[int(torch.randint(len(fonts), (1,), generator=g))]
        angle = float(torch.empty(1).uniform_(-12, 12, generator=g))
        images.append(glyph(letter, font_file, angle))
    return torch.stack(images)


def scribbles(size: int, g: torch.Generator) -> torch.Tensor:
    images = []
    for _ in range(size):
        strokes = [[tuple(p) for p in (torch.rand(int(torch.randint(2, 5, (1,), generator=g)), 2,
                                                  generator=g) * 112).tolist()]
                   for _ in range(int(torch.randint(1, 4, (1,), generator=g)))]
        images.append(drawing(strokes))
    return torch.stack(images)


def load_notmnist(root: Optional[str] = None, skip_unreadable: bool = False) -> torch.Tensor:
    """notMNIST letters as uint8 [N, 28, 28] (white glyph on black).

    Reads ``ROOT/notMNIST/raw/t10k-images-idx3-ubyte[.gz]`` (MNIST's format), or the original
    layout: folders ``A``..``J`` of PNG images under ``ROOT/notMNIST`` or ROOT itself.
    """
    base = data_root(root)
    for folder in (base / "notMNIST" / "raw", base / "notMNIST", base):
        idx_file = find_idx(folder, "t10k-images-idx3-ubyte")
        if idx_file:
            return read_idx(idx_file)
        if (folder / "A").is_dir():
            return read_png_folders(folder, skip_unreadable)
    raise DataError(f"notMNIST not found under {base.resolve()}: expected "
                    "notMNIST/raw/t10k-images-idx3-ubyte[.gz] or folders A..J of PNG images. "
                    f"Point at DIR, the folder that holds notMNIST, with --data-root DIR or {DATA_ENV}=DIR.")


def read_png_folders(folder: Path, skip_unreadable: bool = False) -> torch.Tensor:
    """Images from class folders (``A``..``J``), as grayscale 28x28 uint8."""
    _, files = class_files(folder)
    images = read_images([path for path, _ in files], (28, 28), 1, folder, skip_unreadable)
    return images.mul_(255).round_().to(torch.uint8).reshape(-1, 28, 28)


def white_noise(n: int, seed: int = 0) -> torch.Tensor:
    """Seeded uniform noise with MNIST's shape and value range: uint8 [n, 28, 28]."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, 28, 28), dtype=torch.uint8, generator=g)
