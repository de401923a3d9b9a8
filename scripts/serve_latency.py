"""How quickly the page answers: starts ``python -m bnn_zoo.serve`` as a person would, then times
start-up to the first answer and each drawn input (PNG strokes of a 280 x 280 canvas, as the page
sends them), over the same HTTP requests the page makes.

Usage: python scripts/serve_latency.py [lenet] [--drawings 30] [--device cpu]
"""
import argparse
import io
import json
import random
import re
import statistics
import subprocess
import sys
import time
import urllib.request

from PIL import Image, ImageDraw


def drawing(rng: random.Random) -> bytes:
    """A 7 drawn with a jittery hand on the page's canvas: white 22-pixel strokes on black."""
    canvas = Image.new("L", (280, 280))
    draw = ImageDraw.Draw(canvas)
    jitter = lambda x, y: (x + rng.uniform(-15, 15), y + rng.uniform(-15, 15))  # noqa: E731
    draw.line([jitter(50, 45), jitter(230, 45), jitter(120, 250)], fill=255, width=22, joint="curve")
    out = io.BytesIO()
    canvas.save(out, format="PNG")
    return out.getvalue()


def post(url: str, body: bytes) -> dict:
    with urllib.request.urlopen(urllib.request.Request(url, data=body, method="POST"), timeout=120) as reply:
        return json.loads(reply.read())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", default="lenet")
    parser.add_argument("--drawings", type=int, default=30)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    server = subprocess.Popen([sys.executable, "-m", "bnn_zoo.serve", args.model, "--port", "0",
                               "--device", args.device], stdout=subprocess.PIPE, text=True)
    try:
        url = re.search(r"http://\S+/", server.stdout.readline()).group(0)
        listening = time.perf_counter() - started
        rng = random.Random(0)
        first = post(url + "api/answer", drawing(rng))
        first_answer = time.perf_counter() - started
        seconds, inside, answers = [], [], []
        for _ in range(args.drawings):
            t = time.perf_counter()
            reply = post(url + "api/answer", drawing(rng))
            seconds.append(time.perf_counter() - t)
            inside.append(reply["seconds"])
            answers.append(reply["text"])
    finally:
        server.terminate()
        server.wait()
    print(f"{args.model}, {len(first['samples'])} posterior samples, device {args.device}")
    print(f"start-up to listening: {listening:.2f} s; to the first answer ({first['text']}): {first_answer:.2f} s")
    print(f"per drawn input ({args.drawings} drawings): median {statistics.median(seconds):.3f} s, "
          f"max {max(seconds):.3f} s; of which sampling and the rule, median {statistics.median(inside):.3f} s")
    print("answers: " + ", ".join(f"{a} x{answers.count(a)}" for a in sorted(set(answers))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
