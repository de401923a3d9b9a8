"""The installed wheel (not the source tree) answers right after install: the shipped lenet loads,
predict answers a digit (a drawn one, and the example digit the wheel carries) and refuses noise,
and the page serves its HTML and an answer.

Usage (from a folder outside the source tree): python wheel_smoke.py
"""
import json
import subprocess
import sys
import time
import urllib.request

import numpy as np
from PIL import Image

import bnn_zoo
import bnn_zoo.runs.plans.config

assert "site-packages" in bnn_zoo.__file__, f"bnn_zoo comes from {bnn_zoo.__file__}, not the installed wheel"
trained = bnn_zoo.load("lenet")
assert len(trained.members) == 2 and "bayes" in trained.rules and "bayes" in trained.sets, "the shipped lenet is incomplete"
seven = np.zeros((28, 28), dtype=np.uint8)
seven[6:8, 8:21], seven[8:23, 18:20] = 255, 255  # a 7's bar and stroke
Image.fromarray(seven).save("seven.png")
Image.fromarray(np.random.default_rng(0).integers(0, 256, (28, 28), dtype=np.uint8)).save("noise.png")
from bnn_zoo.shipped import EXAMPLE, FASHION_EXAMPLE  # MNIST's first test digit, a 7, and a sneaker, as package data

for example in (EXAMPLE, FASHION_EXAMPLE):
    assert "site-packages" in str(example) and example.is_file(), f"the example image is not in the wheel ({example})"
done = subprocess.run([sys.executable, "-m", "bnn_zoo.predict", "lenet", "seven.png", "noise.png", str(EXAMPLE),
                       "--json"], capture_output=True, text=True, check=True)
found = json.loads(done.stdout)  # {"answers": [...], "errors": [...], "alarm": {...}}
assert found["errors"] == [] and found["alarm"]["alarm_at"] is None, (found["errors"], found["alarm"])
seven_answer, noise_answer, example_answer = found["answers"]
assert seven_answer["answer"] == 7 and noise_answer["answer"] is None, (seven_answer, noise_answer)
assert example_answer["answer"] == 7, example_answer
assert bnn_zoo.runs.plans.config.load_config("lenet").arch == "lenet", "the configs are not in the wheel"
print("predict:", seven_answer["label"], "for the seven;", "refused", noise_answer["refused_by"], "for the noise")

server = subprocess.Popen([sys.executable, "-m", "bnn_zoo.serve", "--port", "8765"], stdout=subprocess.PIPE, text=True)
try:
    assert "http://127.0.0.1:8765/" in server.stdout.readline(), "the page did not start"
    page = urllib.request.urlopen("http://127.0.0.1:8765/", timeout=60).read().decode()
    assert "<canvas" in page, "the page has no canvas"
    request = urllib.request.Request("http://127.0.0.1:8765/api/answer?example=digit", method="POST")
    started = time.perf_counter()
    answer = json.loads(urllib.request.urlopen(request, timeout=120).read())
    print(f"the page: answered the example digit {answer['text']!r} in {time.perf_counter() - started:.2f} s")
    assert answer["text"] == "7", answer["text"]
finally:
    server.terminate()
    server.wait(30)
print("the wheel", bnn_zoo.__version__, "answers right after install")
