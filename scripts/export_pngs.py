"""Write MNIST or FashionMNIST images as a folder of labelled PNGs (OUT/train/CLASS/N.png and
OUT/test/CLASS/N.png), the layout ``data.name=folder`` reads: a stand-in for a person's own images,
to try the four commands of docs/guides/own_data.md's "Your own data" on.

Usage: python scripts/export_pngs.py fashion_mnist pngs/fashion [--per-class 600] [--test-per-class 100]
"""
import sys
from pathlib import Path

from PIL import Image

from bnn_zoo.cli import options as cli
from bnn_zoo.data.sets import CLASS_NAMES, TORCHVISION_SETS, load_torchvision


def export(name: str, out: Path, per_class: int, test_per_class: int, root: str | None = None) -> dict[str, int]:
    """The PNGs written, per part; class folders are the data set's class names ("/" made "_")."""
    written = {}
    for part, count in (("train", per_class), ("test", test_per_class)):
        images, labels = load_torchvision(name, root, train=part == "train", download=False)
        written[part] = 0
        for k, class_name in enumerate(CLASS_NAMES[name]):
            folder = out / part / class_name.replace("/", "_")
            folder.mkdir(parents=True, exist_ok=True)
            for i in (labels == k).nonzero()[:count, 0].tolist():
                Image.fromarray(images[i].numpy()).save(folder / f"{i}.png")
                written[part] += 1
    return written


def main(argv=None) -> int:
    parser = cli.command_parser(None, __doc__)
    parser.add_argument("name", choices=list(TORCHVISION_SETS))
    parser.add_argument("out")
    parser.add_argument("--per-class", type=cli.count, default=600)
    parser.add_argument("--test-per-class", type=cli.count, default=100)
    parser.add_argument("--data-root", default=None, help="data folder (default: $BNN_ZOO_DATA, then ./data)")
    args = parser.parse_args(argv)

    def command() -> int:
        written = export(args.name, Path(args.out), args.per_class, args.test_per_class, args.data_root)
        print(f"{args.out}: {written['train']} training and {written['test']} test PNGs")
        return 0

    return cli.run(command)


if __name__ == "__main__":
    sys.exit(main())
