"""A local web page to draw a digit, or upload an image, and watch the posterior answer it or say
"I don't know": each class's sampled probabilities, the rule's threshold, the signal that refused,
and the deterministic twin's answer beside it. Needs the optional extra: pip install -e ".[serve]".

Usage::

    python -m bnn_zoo.serve                      # the shipped lenet at http://127.0.0.1:8000
    python -m bnn_zoo.serve runs/lenet --port 0  # a run of your own, on any free port
"""
from __future__ import annotations

import argparse
import io
import logging
import math
import socket
import sys
from pathlib import Path

import torch

from . import cli
from .data import found_of
from .ood import white_noise
from .errors import UserError
from .images import load_image
from .own_data import pixels_of, resized
from .ood import drawing, glyph, matplotlib_font
from .serve_answers import Answerer, BadRequest
from .trained import shadowed

PAGE = Path(__file__).with_name("serve_page.html")
MAX_UPLOAD = 10 * 1024 * 1024  # bytes; a larger upload is refused (413), its rest read and dropped
BODY_TIMEOUT = 10  # seconds to send an upload whole; a slower one gets 408
log = logging.getLogger("bnn_zoo.serve")

SEVEN = [[(18, 22), (92, 22), (48, 98)], [(38, 60), (74, 60)]]
THREE = [[(26, 24), (70, 16), (86, 36), (54, 56), (88, 76), (66, 98), (22, 90)]]
EXAMPLES = {  # the strip of examples to click: name -> (label, the 28x28 image, white on black)
    "digit": ("a digit", lambda: drawing(SEVEN)),
    "letter": ("a letter", lambda: glyph("K", matplotlib_font("DejaVu Sans"))),
    "noise": ("noise", lambda: white_noise(1, seed=0)[0]),
    "blank": ("a blank image", lambda: torch.zeros(28, 28, dtype=torch.uint8)),
    "overlaid": ("two digits overlaid", lambda: torch.maximum(drawing(SEVEN), drawing(THREE))),
}


def example_pixels(name: str) -> torch.Tensor:
    if name not in EXAMPLES:
        raise BadRequest(f"unknown example {name!r}; choose from {', '.join(EXAMPLES)}")
    return EXAMPLES[name][1]()


def read_image(body: bytes, as_mnist: bool = True) -> tuple[torch.Tensor, list[int] | None]:
    """Uploaded or drawn image bytes as the predict command line reads a file: uint8 [28, 28]; for
    a run on your own images (not ``as_mnist``) as it and predict read them (``pixels_of``: the
    whole image resized, neither inverted nor centred), with the size [height, width] it had where
    that was not 28x28 (None where it was, or for a MNIST run, whose digits are centred as MNIST's)."""
    if not body:
        raise BadRequest("nothing was sent: draw a digit on the canvas, choose an image file, or click an example")
    try:
        if as_mnist:
            return load_image(io.BytesIO(body)), None
        pixels = pixels_of(io.BytesIO(body), None, 1)
    except ValueError as err:
        raise BadRequest(f"cannot use this file: {err}") from None
    return resized(pixels, (28, 28)), None if pixels.shape == (28, 28) else list(pixels.shape)


def create_app(answerer: Answerer, max_upload: int = MAX_UPLOAD, hosts: list[str] | None = None,
               body_timeout: float = BODY_TIMEOUT):
    """The Starlette app: the page, the examples and the answers (JSON), to requests for ``hosts``
    (default the loopback names) from no other site, whose uploads arrive within ``body_timeout`` s."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, JSONResponse, Response
    from starlette.routing import Route

    from .serve_guard import LOOPBACK, middleware

    def _number(request: Request, key: str, kind=float):
        text = request.query_params.get(key)
        if text in (None, ""):
            return None
        try:
            return kind(text)
        except ValueError:
            raise BadRequest(f"{key} must be a number, got {text!r}") from None

    async def page(request: Request):
        return HTMLResponse(PAGE.read_text())

    async def models(request: Request):
        defaults = await _in_thread(lambda: [answerer.model(n).defaults() for n in answerer.names])
        return JSONResponse({"default": answerer.default, "models": defaults,
                             "examples": {k: label for k, (label, _) in EXAMPLES.items()}})

    async def example(request: Request):
        from PIL import Image

        pixels = example_pixels(request.path_params["name"])
        out = io.BytesIO()
        Image.fromarray(pixels.numpy()).save(out, format="PNG")
        return Response(out.getvalue(), media_type="image/png")

    async def answer(request: Request):
        name = request.query_params.get("model") or answerer.default
        knobs = {"threshold": _number(request, "threshold"), "quantile": _number(request, "quantile"),
                 "samples": _number(request, "samples", int)}
        example = request.query_params.get("example")
        body = None if example else await request.body()  # whole and within max_upload: the middleware read it

        def work():  # decoding an upload takes a while too: in the thread pool, beside the answer
            as_mnist = found_of(answerer.model(name).trained.config) is None  # else read as its own images were
            pixels, resized_from = (example_pixels(example), None) if example else read_image(body, as_mnist)
            answered = answerer.answer(name, pixels, **knobs)
            return {**answered, "resized_from": resized_from} if resized_from else answered  # said, not silent

        return JSONResponse(await _in_thread(work))

    async def refused(request: Request, err: UserError):
        return JSONResponse({"error": str(err)}, status_code=getattr(err, "status", 400))

    async def failed(request: Request, err: Exception):
        log.exception("answering %s failed", request.url.path)
        return JSONResponse({"error": f"the server could not answer ({err.__class__.__name__}); "
                                      "its log has the details"}, status_code=500)

    return Starlette(routes=[Route("/", page), Route("/api/models", models),
                             Route("/api/example/{name}.png", example),
                             Route("/api/answer", answer, methods=["POST"])],
                     middleware=middleware(LOOPBACK if hosts is None else hosts, body_timeout, max_upload),
                     exception_handlers={UserError: refused, Exception: failed})


async def _in_thread(work):
    from starlette.concurrency import run_in_threadpool

    return await run_in_threadpool(work)


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
        from .serve_guard import allowed_hosts, server
    except ImportError:
        raise UserError('the page needs the serve extra: pip install "bnn-zoo[serve]" '
                        '(pip install -e ".[serve]" in a checkout)') from None
    cli.note(shadowed(args.model))
    answerer = Answerer(args.model, args.device)
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
