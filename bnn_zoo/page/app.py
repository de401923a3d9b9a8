"""The page's Starlette app: the page to draw a digit, or upload an image, and watch the posterior
answer it or say "I don't know" (each class's sampled probabilities, the rule's threshold, the
signal that refused, the deterministic twin's answer beside it), its examples and its answers.

Usage: ``app = create_app(Answerer("lenet"))  # python -m bnn_zoo.serve serves it``
"""
from __future__ import annotations

import io
import logging
from pathlib import Path

import torch

from ..core.errors import UserError
from ..data.images import load_image, pixel_count
from ..data.shifted.ood_sets import drawing, glyph, matplotlib_font, white_noise
from ..data.own import pixels_of, resized
from ..data.sets import profile_of
from .answers import Answerer, BadRequest

PAGE = Path(__file__).with_name("page.html")
MAX_UPLOAD = 10 * 1024 * 1024  # bytes; a larger upload is refused (413), its rest read and dropped
MAX_FORM_FIELDS = 10  # a multipart upload's fields besides its one file
BODY_TIMEOUT = 10  # seconds to send an upload whole; a slower one gets 408
log = logging.getLogger("bnn_zoo.page.app")

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


def read_image(body: bytes, as_mnist: bool = True, lane=None) -> tuple[torch.Tensor, list[int] | None]:
    """Uploaded or drawn image bytes as the predict command line reads a file: uint8 [28, 28]; for
    a run on your own images (not ``as_mnist``) as it and predict read them (``pixels_of``: the
    whole image resized, neither inverted nor centred), with the size [height, width] it had where
    that was not 28x28 (None where it was, or for a MNIST run, whose digits are centred as MNIST's).
    ``lane``: decoded where a ``bnn_zoo.page.guard.DecodeLane`` decodes an image of its size."""
    if not body:
        raise BadRequest("nothing was sent: draw a digit on the canvas, choose an image file, or click an example")

    def decode():
        if as_mnist:
            return load_image(io.BytesIO(body)), None
        pixels = pixels_of(io.BytesIO(body), None, 1)
        return resized(pixels, (28, 28)), None if pixels.shape == (28, 28) else list(pixels.shape)

    try:
        return lane.run(pixel_count(io.BytesIO(body)), decode) if lane else decode()
    except ValueError as err:
        raise BadRequest(f"cannot use this file: {err}") from None


async def uploaded(request) -> bytes:
    """The image a request sends: its body as it is (``curl --data-binary @digit.png``, the page's
    canvas), or the one file of a multipart form (``curl -F file=@digit.png``, a browser's form),
    either within the upload limit the server read the body under."""
    body = await request.body()
    if not request.headers.get("content-type", "").lower().startswith("multipart/form-data"):
        return body
    from starlette.exceptions import HTTPException

    try:
        async with request.form(max_files=1, max_fields=MAX_FORM_FIELDS) as form:
            files = [value for _, value in form.multi_items() if not isinstance(value, str)]
            if len(files) != 1:
                raise BadRequest(f"a multipart upload holds one image file (curl -F file=@digit.png); this one holds "
                                 f"{len(files)}")
            return await files[0].read()
    except (HTTPException, AssertionError) as err:  # the form's own refusal; no multipart parser installed
        why = getattr(err, "detail", None) or "this server has no multipart parser: pip install python-multipart"
        raise BadRequest(f"cannot read this multipart upload ({why}); send the image file as the body "
                         "(curl --data-binary @digit.png) or as one file of a form (curl -F file=@digit.png)") from None


def create_app(answerer: Answerer, max_upload: int = MAX_UPLOAD, hosts: list[str] | None = None,
               body_timeout: float = BODY_TIMEOUT, lane=None):
    """The Starlette app: the page, the examples and the answers (JSON), to requests for ``hosts``
    (default the loopback names) from no other site, whose uploads arrive within ``body_timeout`` s
    and are decoded in ``lane`` (default a ``bnn_zoo.page.guard.DecodeLane()`` of its own)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, JSONResponse, Response
    from starlette.routing import Route

    from .guard import LOOPBACK, DecodeLane, middleware

    lane = lane or DecodeLane()

    def _number(request: Request, key: str):
        text = request.query_params.get(key)
        if text in (None, ""):
            return None
        try:
            return float(text)
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
                 "samples": _number(request, "samples"),  # 1.5 too: the answerer says it is no count
                 "new_stream": request.query_params.get("new_stream") in ("1", "true", "yes")}
        example = request.query_params.get("example")
        body = None if example else await uploaded(request)  # whole and within max_upload: the middleware read it

        def work():  # decoding an upload takes a while too: in the thread pool, beside the answer
            as_mnist = profile_of(answerer.model(name).trained.data) is None  # else read as its own images were
            pixels, resized_from = (example_pixels(example), None) if example else read_image(body, as_mnist, lane)
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
                     middleware=middleware(LOOPBACK if hosts is None else hosts, body_timeout, max_upload, failed),
                     exception_handlers={UserError: refused})


async def _in_thread(work):
    from starlette.concurrency import run_in_threadpool

    return await run_in_threadpool(work)
