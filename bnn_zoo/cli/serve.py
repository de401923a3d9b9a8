"""``python -m bnn_zoo.serve [RUN_OR_NAME]``: the local page to draw a digit and watch the posterior
answer it or say "I don't know" (``bnn_zoo.page``). Needs the optional extra: pip install -e ".[serve]".

Usage::

    python -m bnn_zoo.serve                      # the shipped lenet at http://127.0.0.1:8000
    python -m bnn_zoo.serve runs/lenet --port 0  # a run of your own, on any free port
"""
from __future__ import annotations

import argparse
import math
import socket
import sys

from ..core.errors import UserError
from ..page.answers import Answerer
from ..page.app import MAX_UPLOAD, create_app
from ..runs.storage.loading import shadowed
from . import options as cli


def main(argv: list[str] | None = None) -> int:
    """Serve the page that draws a digit and shows the posterior's answer."""
    parser = cli.command_parser("python -m bnn_zoo.serve", __doc__)
    parser.add_argument("model", nargs="?", default="lenet",
                        help="a shipped posterior (lenet, mnist_mlp, lenet_fashion) or a trained run directory "
                             "(default lenet); the page offers the shipped ones too")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=_port, default=8000,
                        help="port (default 8000; 0: any free port)")
    parser.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda, cuda:N")
    parser.add_argument("--max-upload-mb", type=_megabytes, default=MAX_UPLOAD / 2 ** 20,
                        help=f"largest upload accepted (default {MAX_UPLOAD / 2 ** 20:g} MB)")
    cli.add_alarm_option(parser, help="once a model's shift alarm sounds, hold its answers to the stricter "
                                      "after-alarm rule until a new stream starts (default; --no-act-on-alarm: the "
                                      "certified rule alone, and a new stream after each alarm)")
    args = parser.parse_args(argv)
    return cli.run(lambda: _serve(args))


def _port(text: str) -> int:
    port = cli.count(text, least=0)
    if port > 65535:
        raise argparse.ArgumentTypeError(f"a port is at most 65535, got {port}")
    return port


def _megabytes(text: str) -> float:
    try:
        size = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of MB, got {text!r}") from None
    if not (math.isfinite(size) and size > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number of MB, got {text!r}")
    return size


def _serve(args) -> int:
    try:
        from ..page.guard import allowed_hosts, server
    except ImportError:
        raise UserError('the page needs the serve extra: pip install "bnn-zoo[serve]" '
                        '(pip install -e ".[serve]" in a checkout)') from None
    cli.note(shadowed(args.model))
    answerer = Answerer(args.model, args.device, args.act_on_alarm)
    answerer.model(args.model)  # a bad name or run fails here, before the server starts
    sock = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((args.host, args.port))
    except OSError as err:
        raise UserError(f"cannot listen on {args.host}:{args.port} ({err.strerror}): "
                        "choose another --port, or 0 for any free one") from None
    sock.listen(128)  # connections wait in the backlog until the server accepts: the address works once printed
    host, port = sock.getsockname()[:2]
    app = create_app(answerer, int(args.max_upload_mb * 2 ** 20), allowed_hosts(args.host))
    print(f"bnn-zoo: {args.model} at http://{host if ':' not in host else f'[{host}]'}:{port}/ (Ctrl+C stops)",
          flush=True)
    server(app).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
