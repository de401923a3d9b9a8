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
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pyro
import torch

from . import cli
from .abstention import SIGNALS, Rule, uncertainty
from .trained import Trained, load, shipped_names
from .config import pick_device
from .data import CLASS_NAMES, normalize, white_noise
from .errors import UserError
from .images import load_image
from .ladder import Posterior, posteriors
from .sampling import seeded
from .likelihoods import Categorical
from .ood import drawing, glyph, matplotlib_font

PAGE = Path(__file__).with_name("serve_page.html")
MAX_UPLOAD = 10 * 1024 * 1024  # bytes; a larger upload is refused before it is read whole
BODY_TIMEOUT = 10  # seconds to send an upload whole; a slower one gets 408
MAX_PAGE_SAMPLES = 1000  # per answer on the page: it answers while a person watches
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


class BadRequest(UserError):
    """What a person sent cannot be answered; the message says why (HTTP ``status``)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass
class Model:
    """A loaded classifier: its Bayesian posterior and twin, their rules, its class names."""

    name: str
    trained: Trained
    bayes: Posterior
    twin: Posterior | None
    classes: list[str]

    def defaults(self) -> dict:
        rule = self.trained.rules_for()["bayes"]
        return {"name": self.name, "posterior": self.bayes.label, "classes": self.classes,
                "samples": self.trained.config.abstention.samples, "rule": rule.to_dict()}


class Answerer:
    """Loads the models on first use and answers one image at a time: Pyro's effect handlers are
    process-wide, so concurrent requests take turns; each gets its own result."""

    def __init__(self, default: str, device: str = "auto"):
        self.device = pick_device(device)
        self.names = list(dict.fromkeys([default, *shipped_names()]))
        self.default = default
        self._models: dict[str, Model] = {}
        self._lock = threading.RLock()  # taken by model() on its own and again inside answer()

    def model(self, name: str) -> Model:
        """The model ``name``, loaded on first use under the same lock as the answers (loading runs
        Pyro code too, and two first requests must not load it twice)."""
        if name not in self.names:
            raise BadRequest(f"unknown model {name!r}; choose from {', '.join(self.names)}")
        with self._lock, pyro.settings.context(module_local_params=True):
            if name not in self._models:
                trained = load(name, self.device)
                if not isinstance(trained.model.likelihood, Categorical):
                    raise UserError(f"{name} is a regression run; the page classifies images")
                trained.rules_for()  # a calibration of other weights is refused here, with the command that re-certifies
                found = posteriors(trained)
                self._models[name] = Model(name, trained, found["bayes"], found.get("twin"),
                                           CLASS_NAMES[trained.config.data.name])
            return self._models[name]

    def answer(self, name: str, pixels: torch.Tensor, threshold: float | None = None,
               quantile: float | None = None, samples: int | None = None, seed: int = 0) -> dict:
        """The Bayesian answer and the twin's for uint8 pixels [28, 28], with the model's certified
        rule where a knob is left out (its gate is kept whatever the knobs)."""
        started = time.perf_counter()
        with self._lock, pyro.settings.context(module_local_params=True):  # settings are process-wide too
            model = self.model(name)
            certified = model.trained.rules_for()
            knobs = {"threshold": certified["bayes"].threshold if threshold is None else threshold,
                     "quantile": certified["bayes"].quantile if quantile is None else quantile}
            samples = model.trained.config.abstention.samples if samples is None else samples
            if not 1 <= samples <= MAX_PAGE_SAMPLES:
                raise BadRequest(f"samples must be a whole number from 1 to {MAX_PAGE_SAMPLES}, got {samples}")
            try:
                rules = {part: Rule(knobs["quantile"], knobs["threshold"], r.signal, r.cut)
                         for part, r in certified.items()}
            except ValueError as err:
                raise BadRequest(str(err)) from None
            x = normalize(pixels[None]).to(model.trained.device)
            with seeded(seed, model.trained.device):  # the same drawing gets the same answer, as with predict --seed
                probs = model.bayes.predict(x, samples)
                twin = model.twin.predict(x, samples) if model.twin is not None else None
        found = {"model": name, "posterior": model.bayes.label, "classes": model.classes,
                 **_judged(probs, rules["bayes"], model.classes),
                 "samples": probs[:, 0].cpu().tolist(), "pixels": pixels.tolist()}
        if twin is not None:
            found["twin"] = {"posterior": model.twin.label, **_judged(twin, rules["twin"], model.classes),
                             "probs": twin.mean(0)[0].cpu().tolist()}
        found["seconds"] = round(time.perf_counter() - started, 4)
        return found


def _judged(probs: torch.Tensor, rule: Rule, classes: list[str]) -> dict:
    """One input's decision under ``rule``, with the words the page shows."""
    decision, scores = rule(probs), uncertainty(probs, rule.quantile)
    found = decision.describe(0, rule.signal)
    names = [classes[c] for c in found["accepted"]]
    if found["answer"] is None:
        text = "I don't know"
    else:
        text = " or ".join(names) if len(names) > 1 else names[0]
    reasons = []
    if "quantile" in found["refused_by"]:
        reasons.append(f"no class's {_quantile_name(rule.quantile)} probability reaches {rule.threshold:g}")
    if rule.signal in found["refused_by"]:
        reasons.append(f"{rule.signal.replace('_', ' ')} {float(scores[rule.signal][0]):.3g} bits > "
                       f"{rule.cut:.3g}")
    return {**found, "text": text, "why": "; ".join(reasons), "rule": rule.to_dict(),
            "quantiles": decision.quantile_probs[0].cpu().tolist(),
            "uncertainty": {k: round(float(scores[k][0]), 6) for k in SIGNALS}}


def _quantile_name(q: float) -> str:
    return "median" if q == 0.5 else f"{q:g} quantile of its sampled"


def example_pixels(name: str) -> torch.Tensor:
    if name not in EXAMPLES:
        raise BadRequest(f"unknown example {name!r}; choose from {', '.join(EXAMPLES)}")
    return EXAMPLES[name][1]()


def read_image(body: bytes) -> torch.Tensor:
    """Uploaded or drawn image bytes as the predict command line reads a file: uint8 [28, 28]."""
    if not body:
        raise BadRequest("nothing was sent: draw a digit on the canvas, choose an image file, or click an example")
    try:
        return load_image(io.BytesIO(body))
    except ValueError as err:
        raise BadRequest(f"cannot use this file: {err}") from None


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
        found = await _in_thread(lambda: [answerer.model(n).defaults() for n in answerer.names])
        return JSONResponse({"default": answerer.default, "models": found,
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
        body = None if example else await _body(request, max_upload)

        def work():  # decoding an upload takes a while too: in the thread pool, beside the answer
            return answerer.answer(name, example_pixels(example) if example else read_image(body), **knobs)

        return JSONResponse(await _in_thread(work))

    async def refused(request: Request, err: UserError):
        status = getattr(err, "status", 400)
        close = {"Connection": "close"} if status in (408, 413) else None  # the upload's rest is not read
        return JSONResponse({"error": str(err)}, status_code=status, headers=close)

    async def failed(request: Request, err: Exception):
        log.exception("answering %s failed", request.url.path)
        return JSONResponse({"error": f"the server could not answer ({err.__class__.__name__}); "
                                      "its log has the details"}, status_code=500)

    return Starlette(routes=[Route("/", page), Route("/api/models", models),
                             Route("/api/example/{name}.png", example),
                             Route("/api/answer", answer, methods=["POST"])],
                     middleware=middleware(LOOPBACK if hosts is None else hosts, body_timeout),
                     exception_handlers={UserError: refused, Exception: failed})


async def _in_thread(work):
    from starlette.concurrency import run_in_threadpool

    return await run_in_threadpool(work)


async def _body(request, limit: int) -> bytes:
    """The request's body, refused (413) as soon as it is known to exceed ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BadRequest(_too_large(int(declared), limit), 413)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise BadRequest(_too_large(len(body), limit), 413)
    return bytes(body)


def _too_large(size: int, limit: int) -> str:
    return f"the upload is over {limit / 2 ** 20:g} MB ({size:,} bytes or more); send a smaller image"


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
