"""The local page (bnn_zoo.page.app): its handlers through Starlette's test client, its command line,
what keeps it to itself (serve_guard: other sites, slow clients; tests/page/test_guard.py: errors,
the memory of decodes), and the page as a person uses it, in a headless Chromium (skipped where
none is installed)."""
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from helpers import malformed_tiff, read_to_end, running
from PIL import Image

pytest.importorskip("starlette", reason='the page needs the serve extra: pip install -e ".[serve]"')
pytest.importorskip("httpx2", reason="Starlette's test client needs httpx2 (the dev extra)")
from starlette.testclient import TestClient  # noqa: E402

from bnn_zoo.cli.predict import main as predict_main  # noqa: E402
from bnn_zoo.cli.serve import main  # noqa: E402
from bnn_zoo.data.images import load_image  # noqa: E402
from bnn_zoo.page.app import EXAMPLES, MAX_UPLOAD, Answerer, create_app, example_pixels  # noqa: E402
from bnn_zoo.page.guard import allowed_hosts  # noqa: E402
from bnn_zoo.runs.storage.loading import load  # noqa: E402


@pytest.fixture(scope="module")
def answerer():
    return Answerer("lenet", "cpu")


@pytest.fixture(scope="module")
def client(answerer):
    return TestClient(create_app(answerer, max_upload=200_000), base_url="http://localhost:8000")


def png(pixels: torch.Tensor, size: int = 28, ink_on_paper: bool = False) -> bytes:
    """An image file of 28x28 pixels, scaled up, optionally black ink on white paper."""
    img = Image.fromarray((255 - pixels if ink_on_paper else pixels).numpy()).resize((size, size), Image.NEAREST)
    out = io.BytesIO()
    img.save(out, format="PNG")
    return out.getvalue()


def ask(client, body=b"", **query):
    return client.post("/api/answer", params=query, content=body)


def test_the_page_s_stream_holds_its_answers_to_the_after_alarm_rule_once_its_alarm_sounds(shared_data):
    """Digits keep it silent; a run of grey images sounds it, and that answer says so; the stream goes
    on, each answer from then on held to the after-alarm rule (digits it refuses and the certified rule
    answers are refused, by it), until a person starts a new stream; asking the same input again is not
    a new input. Not acting on the alarm, a new stream starts after it sounds, as the rule alone answers."""
    from bnn_zoo.data.sets import load_torchvision

    answerer = Answerer("lenet", "cpu")  # a stream of its own
    images, _ = load_torchvision("mnist", str(shared_data), train=False, download=False)
    for i in range(5):
        reply = answerer.answer("lenet", images[i], samples=20)
    assert reply["shift"]["inputs"] == 5 and reply["shift"]["alarm_at"] is None and not reply["after_alarm"]
    assert reply["shift"]["text"].startswith("no shift alarm: the certified rule refused 0 of 5 inputs")
    assert reply["twin"]["shift"]["inputs"] == 5
    assert answerer.answer("lenet", images[4], samples=10)["shift"]["inputs"] == 5  # the knobs re-ask it
    strange = [torch.full((28, 28), level, dtype=torch.uint8) for level in range(0, 250, 5)]
    for n, pixels in enumerate(strange, 1):
        reply = answerer.answer("lenet", pixels, samples=20)
        if reply["shift"]["alarm_at"] is not None:
            break
    assert reply["shift"]["alarm_at"] == 5 + n and reply["shift"]["text"].startswith(f"shift alarm: by input {5 + n}")
    assert reply["after_alarm"] and reply["shift"]["acting"]
    rule, after = load("lenet").rules["bayes"], load("lenet").after_alarm("bayes")[0]
    held_out = []
    for k, i in enumerate(range(14, 60), 1):  # digits, after the alarm: the after-alarm rule answers them
        reply = answerer.answer("lenet", images[i], samples=20)
        probs = torch.tensor(reply["samples"])[:, None]  # [20, 1, 10]: the draws it answered with
        assert reply["after_alarm"] and reply["rule"] == after.to_dict() and reply["shift"]["inputs"] == 5 + n + k
        assert (reply["answer"] is None) == bool(after(probs).refused[0])
        if reply["refused_by"] == ["after_alarm_rule"]:
            held_out.append(i)
            assert not rule(probs).refused[0]  # a digit the certified rule answers
            assert reply["why"].startswith("since the shift alarm sounded, answers are held to the after-alarm rule")
    assert held_out  # the after-alarm rule is stricter on digits, not only on what sounded the alarm
    fresh = answerer.answer("lenet", images[0], samples=20, new_stream=True)
    assert fresh["shift"]["inputs"] == 1 and not fresh["after_alarm"] and fresh["rule"] != after.to_dict()
    reply = ask(TestClient(create_app(answerer), base_url="http://localhost:8000"), example="digit", new_stream="1")
    assert reply.json()["shift"]["inputs"] == 1  # the page's button asks for a new stream so
    plain = Answerer("lenet", "cpu", act_on_alarm=False)
    for pixels in strange:
        reply = plain.answer("lenet", pixels, samples=20)
        if reply["shift"]["alarm_at"] is not None:
            break
    assert reply["shift"]["alarm_at"] is not None and reply["shift"]["acting"] is False
    assert reply["after_alarm"] and reply["rule"] == load("lenet").rules["bayes"].to_dict()  # the rule alone answers
    assert plain.answer("lenet", images[held_out[0]], samples=20)["shift"]["inputs"] == 1  # a new stream, as before


def test_the_page_answers_as_the_predict_command_line(client, tmp_path, capsys):
    path = tmp_path / "seven.png"
    path.write_bytes(png(example_pixels("digit"), 200, ink_on_paper=True))  # a photo of a drawn 7
    assert predict_main(["lenet", str(path), "--json", "--device", "cpu"]) == 0
    expected = json.loads(capsys.readouterr().out)["answers"][0]
    found = ask(client, path.read_bytes()).json()
    assert found["answer"] == expected["answer"] == 7 and found["text"] == "7"
    assert found["accepted"] == {str(c): p for c, p in expected["accepted"].items()}
    assert found["refused_by"] == expected["refused_by"] == []
    assert found["uncertainty_bits"] == pytest.approx(expected["uncertainty_bits"], abs=1e-6)
    assert torch.equal(torch.tensor(found["pixels"], dtype=torch.uint8), load_image(path))  # as the network sees it
    samples = torch.tensor(found["samples"])
    assert samples.shape == (100, 10)  # the shipped rule's 100 samples, every class
    assert found["quantiles"] == pytest.approx(samples.quantile(0.5, dim=0).tolist(), abs=1e-6)
    assert found["twin"]["text"] == "7" and found["twin"]["probs"][7] > 0.5


def test_the_examples_and_the_rule_s_knobs(client):
    blank = ask(client, example="blank").json()
    assert blank["answer"] is None and blank["text"] == "I don't know"
    assert blank["refused_by"] == ["quantile", "mutual_information"]  # its members disagree on a blank page too
    assert blank["why"] == "no class's median probability reaches 0.85; mutual information 0.783 bits > 0.464"
    letter = ask(client, example="letter").json()  # no class is sure, and the ensemble's members disagree on it
    assert letter["refused_by"] == ["quantile", "mutual_information"] and "; mutual information 1.2" in letter["why"]
    strict = ask(client, example="overlaid", threshold=1.0, samples=7).json()
    assert strict["refused_by"] == ["quantile"] and "median probability reaches 1" in strict["why"]
    assert len(strict["samples"]) == 7 and strict["rule"]["threshold"] == 1.0
    loose = ask(client, example="digit", threshold=0.0, quantile=0.9).json()
    assert len(loose["accepted"]) == 10 and loose["text"].startswith("7 or ")  # a set answer, best first
    assert loose["quantiles"] == pytest.approx(torch.tensor(loose["samples"]).quantile(0.9, dim=0).tolist(), abs=1e-6)
    for name in EXAMPLES:  # each thumbnail is the example's own pixels
        thumbnail = client.get(f"/api/example/{name}.png")
        assert thumbnail.headers["content-type"] == "image/png"
        assert torch.equal(load_image(io.BytesIO(thumbnail.content), invert="no"), example_pixels(name))


def test_each_model_answers_in_its_own_classes(client):
    found = client.get("/api/models").json()
    assert found["default"] == "lenet" and [m["name"] for m in found["models"]] == ["lenet", "lenet_fashion", "mnist_mlp"]
    fashion = ask(client, png(example_pixels("digit")), model="lenet_fashion").json()
    assert fashion["classes"][1] == "Trouser" and fashion["model"] == "lenet_fashion"
    assert fashion["rule"]["threshold"] == next(m for m in found["models"] if m["name"] == "lenet_fashion")["rule"]["threshold"]


@pytest.mark.parametrize("body, query, status, message", [
    (b"", {}, 400, "nothing was sent"),
    (b"not an image at all", {}, 400, "not a readable image"),
    (malformed_tiff(), {}, 400, "cannot use this file: not a readable image (TypeError)"),  # Pillow's decoder fails
    (b"x" * 200_001, {}, 413, "the upload is over"),
    (None, {"threshold": "abc"}, 400, "threshold must be a number"),
    (None, {"threshold": 2}, 400, "threshold must lie in [0, 1]"),
    (None, {"samples": 0}, 400, "samples must be a whole number from 3 to 1000"),
    (None, {"samples": 2}, 400, "samples must be a whole number from 3 to 1000, got 2 (lenet is an ensemble of 3 "
                                "members: a sample of each at least)"),  # was a 500
    (None, {"samples": 0, "model": "mnist_mlp"}, 400, "samples must be a whole number from 1 to 1000, got 0"),
    (None, {"samples": 1.5}, 400, "samples must be a whole number from 3 to 1000, got 1.5 (lenet is an ensemble of 3 "
                                  "members: a sample of each at least)"),  # issue 51: "must be a number"
    (None, {"samples": "nan", "model": "mnist_mlp"}, 400, "samples must be a whole number from 1 to 1000, got nan"),
    (None, {"model": "resnet"}, 400, "unknown model 'resnet'; choose from lenet, lenet_fashion, mnist_mlp"),
    (None, {"example": "cat"}, 400, "unknown example 'cat'"),
])
def test_bad_input_gets_a_message_not_a_trace(client, body, query, status, message):
    reply = ask(client, png(example_pixels("digit")) if body is None else body, **query)
    assert reply.status_code == status and message in reply.json()["error"]
    assert set(reply.json()) == {"error"}


def test_a_decompression_bomb_is_refused(client):
    out = io.BytesIO()
    Image.new("1", (20000, 20000)).save(out, format="PNG")  # a few KB, 400 million pixels
    reply = ask(client, out.getvalue())
    assert reply.status_code == 400 and "too large" in reply.json()["error"]


@pytest.mark.slow
def test_concurrent_users_get_their_own_answers(client):
    inputs = ["digit", "blank", "letter", "noise", "overlaid"] * 3
    alone = {name: ask(client, example=name).json() for name in set(inputs)}
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda name: ask(client, example=name).json(), inputs))
    for name, found in zip(inputs, together):
        assert found["pixels"] == alone[name]["pixels"] and found["samples"] == alone[name]["samples"]
        assert found["text"] == alone[name]["text"]


@pytest.mark.slow
def test_first_visitors_load_each_model_once_beside_the_answers(monkeypatch):
    import bnn_zoo.page.answers

    alone = {m: Answerer(m, "cpu").answer(m, example_pixels("digit"))["samples"] for m in ("lenet", "mnist_mlp")}
    loads = []
    monkeypatch.setattr(bnn_zoo.page.answers, "load", lambda name, device: loads.append(name) or load(name, device))
    client = TestClient(create_app(Answerer("lenet", "cpu")), base_url="http://localhost")  # nothing loaded yet

    def visit(i):  # page loads (every model's defaults) interleaved with answers
        if i % 2:
            return client.get("/api/models").json()["default"]
        return ask(client, example="digit", model=("lenet", "mnist_mlp")[i // 2 % 2]).json()

    with ThreadPoolExecutor(6) as pool:
        found = list(pool.map(visit, range(12)))
    assert found[1::2] == ["lenet"] * 6
    assert all(reply["samples"] == alone[reply["model"]] for reply in found[::2])
    assert sorted(loads) == ["lenet", "lenet_fashion", "mnist_mlp"]  # each loaded once


def start_server(*args: str) -> tuple[subprocess.Popen, str]:
    """``python -m bnn_zoo.serve ARGS --port 0`` and the address it printed."""
    server = subprocess.Popen([sys.executable, "-m", "bnn_zoo.serve", *args, "--port", "0", "--device", "cpu"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = server.stdout.readline()
    match = re.search(r"http://\S+/", line)
    if not match:
        server.kill()
        raise AssertionError(f"no address printed: {line!r} {server.stderr.read()}")
    return server, match.group(0)


@pytest.mark.slow  # a few seconds; CI runs it under -m slow
def test_the_command_line_serves_the_page_and_refuses_a_bad_model():
    import httpx2 as httpx

    server, url = start_server("mnist_mlp")
    try:
        assert url.startswith("http://127.0.0.1:")
        page = httpx.get(url).text
        assert '<canvas id="pad"' in page and 'id="plot"' in page
        assert httpx.get(url + "api/models").json()["default"] == "mnist_mlp"
    finally:
        server.terminate()
        server.wait(timeout=30)
    done = subprocess.run([sys.executable, "-m", "bnn_zoo.serve", "no_such_model"], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1].startswith("error: no_such_model is neither a run directory nor a shipped posterior")
    done = subprocess.run([sys.executable, "-m", "bnn_zoo.serve", "--port", "70000"], capture_output=True, text=True)
    assert done.returncode == 2 and "a port is at most 65535" in done.stderr


@pytest.mark.parametrize("size", ["inf", "nan", "0", "-1", "ten"])
def test_the_upload_limit_is_a_positive_size(size, capsys):
    with pytest.raises(SystemExit) as done:
        main(["--max-upload-mb", size])
    assert done.value.code == 2
    message = "expected a number of MB" if size == "ten" else "must be a positive number of MB"
    assert capsys.readouterr().err.strip().splitlines()[-1] == \
        f"error: argument --max-upload-mb: {message}, got {size!r} (see --help)"


# -- what keeps the page to itself (bnn_zoo.page.guard) ------------------------------------------

@pytest.mark.parametrize("host, allowed", [("localhost:8000", True), ("127.0.0.1", True), ("[::1]:8000", True),
                                           ("LocalHost:8000", True), ("evil.example", False),
                                           ("evil.example:8000", False), ("localhost.evil.example", False)])
def test_only_the_server_s_own_host_names_are_answered(client, host, allowed):
    reply = client.get("/", headers={"Host": host, "Origin": f"http://{host}"})  # as after DNS rebinding
    if allowed:
        assert reply.status_code == 200 and '<canvas id="pad"' in reply.text
    else:
        assert (reply.status_code, reply.text) == (400, "Invalid host header")


def test_the_host_names_follow_the_address_listened_on(answerer):
    assert allowed_hosts("127.0.0.1") == allowed_hosts("::1") == ["127.0.0.1", "localhost", "[::1]"]
    assert allowed_hosts("192.168.1.5") == ["192.168.1.5"] and allowed_hosts("fe80::1") == ["[fe80::1]"]
    assert allowed_hosts("0.0.0.0") == ["*"]  # every address: the names it is reached by are not known
    lan = TestClient(create_app(answerer, hosts=["192.168.1.5"]), base_url="http://192.168.1.5:8000")
    assert lan.get("/").status_code == 200 and lan.get("/", headers={"Host": "localhost"}).status_code == 400


@pytest.mark.parametrize("method, path, headers, status", [
    ("POST", "/api/answer?example=digit", {"Origin": "http://evil.example"}, 403),
    ("POST", "/api/answer?example=digit", {"Origin": "http://localhost:3000"}, 403),  # another port: another site
    ("POST", "/api/answer?example=digit", {"Origin": "null"}, 403),  # a sandboxed frame, a file
    ("POST", "/api/answer?example=digit", {"Sec-Fetch-Site": "cross-site"}, 403),
    ("POST", "/api/answer?example=digit", {"Sec-Fetch-Site": "same-site"}, 403),
    ("GET", "/api/models", {"Sec-Fetch-Site": "cross-site"}, 403),
    ("GET", "/api/example/digit.png", {"Origin": "http://evil.example"}, 403),
    ("POST", "/api/answer?example=digit", {"Origin": "http://localhost:8000", "Sec-Fetch-Site": "same-origin"}, 200),
    ("POST", "/api/answer?example=digit", {}, 200),  # curl, scripts
    ("GET", "/api/models", {"Sec-Fetch-Site": "none"}, 200),  # typed in the address bar
    ("GET", "/", {"Sec-Fetch-Site": "cross-site"}, 200),  # a link to the page from elsewhere
])
def test_other_sites_cannot_use_the_api(client, method, path, headers, status):
    reply = client.request(method, path, headers=headers)
    assert reply.status_code == status
    if status == 403:
        sender = headers.get("Origin") or f"Sec-Fetch-Site: {headers['Sec-Fetch-Site']}"
        assert reply.json() == {"error": f"refused a request from another site ({sender}): "
                                         "this server answers its own page only"}


def test_a_slow_upload_does_not_hold_up_the_page(answerer, monkeypatch):
    import httpx2 as httpx

    import bnn_zoo.page.app

    decoding, release = threading.Event(), threading.Event()

    def slow_decode(file, **options):
        decoding.set()
        release.wait(30)
        return load_image(file, **options)

    monkeypatch.setattr(bnn_zoo.page.app, "load_image", slow_decode)
    with running(create_app(answerer)) as (_, port), ThreadPoolExecutor(1) as pool:
        url = f"http://127.0.0.1:{port}/"
        try:
            upload = pool.submit(httpx.post, url + "api/answer", content=png(example_pixels("digit")), timeout=60)
            assert decoding.wait(30)
            page = httpx.get(url, timeout=30)  # answered while the upload is held in its decoding
            assert page.status_code == 200 and not upload.done()
        finally:
            release.set()
        assert upload.result().json()["text"] == "7"


def test_slow_clients_are_cut_off_and_connections_are_bounded(answerer):
    import httpx2 as httpx

    with running(create_app(answerer, body_timeout=1), head_timeout=1, max_connections=8) as (served, port):
        url, host = f"http://127.0.0.1:{port}/", f"Host: 127.0.0.1:{port}\r\n"
        kept = socket.create_connection(("127.0.0.1", port), timeout=10)  # answered, then half a second head
        kept.sendall(f"GET /nowhere HTTP/1.1\r\n{host}\r\n".encode())
        answered = b""
        while not answered.endswith(b"Not Found"):  # the head and the body may come apart
            chunk = kept.recv(4096)
            assert chunk, f"the server closed the connection after {answered!r}"
            answered += chunk
        assert answered.startswith(b"HTTP/1.1 404")
        opened = time.monotonic()
        kept.sendall(b"GET / HTTP/1.1\r\n")
        stalled = [kept]
        for sent in (b"", b"GET / HT", f"GET / HTTP/1.1\r\n{host}".encode(),  # nothing; half a line; half a head
                     f"POST /api/answer HTTP/1.1\r\n{host}Content-Length: 1000\r\n\r\n0123456789".encode(), b"", b""):
            stalled.append(socket.create_connection(("127.0.0.1", port), timeout=10))
            stalled[-1].sendall(sent)
        end = time.monotonic() + 10
        while len(served.server_state.connections) < 7 and time.monotonic() < end:
            time.sleep(0.01)
        refused = httpx.get(url, timeout=5)  # the 8th connection
        assert refused.status_code == 503 and refused.text == "Service Unavailable"
        sent = [read_to_end(sock) for sock in stalled]  # each one closed by the server, within the sockets' 10 s
        assert time.monotonic() - opened > 0.9  # not before its timeout (a lower bound: load cannot break it)
        upload = sent.pop(4)
        assert sent == [b""] * 6
        assert upload.startswith(b"HTTP/1.1 408") and b"connection: close" in upload.lower()
        assert json.loads(upload.split(b"\r\n\r\n", 1)[1]) == {"error": "the upload did not arrive within 1 s; send it again"}
        assert httpx.get(url, timeout=5).status_code == 200  # room again
        for sock in stalled:
            sock.close()


def test_a_too_large_upload_is_answered_not_reset(answerer):
    """Clients send a body whole before they read the answer: the server reads and drops the rest,
    else the kernel resets the connection it closes with bytes unread, and the 413 is lost."""
    import http.client

    big = b"x" * (MAX_UPLOAD + 2 ** 20)  # 11 MB
    refusal = {"error": f"the upload is over 10 MB ({len(big):,} bytes or more); send a smaller image"}
    with running(create_app(answerer)) as (_, port):
        for body in (big, (big[i:i + 2 ** 16] for i in range(0, len(big), 2 ** 16))):  # declared; chunked
            client = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            client.request("POST", "/api/answer", body=body)
            reply = client.getresponse()
            assert (reply.status, json.loads(reply.read())) == (413, refusal)
            client.close()
        waiting = socket.create_connection(("127.0.0.1", port), timeout=60)  # sends only after "100 Continue"
        waiting.sendall(f"POST /api/answer HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {len(big)}\r\n"
                        "Expect: 100-continue\r\n\r\n".encode())
        answered = read_to_end(waiting)
        assert answered.startswith(b"HTTP/1.1 413") and json.loads(answered.split(b"\r\n\r\n", 1)[1]) == refusal
        waiting.close()


def test_a_stalled_body_is_cut_off_where_no_handler_reads_it(answerer, monkeypatch):
    """An example's answer, a 404 and a 405 never read a body: a request that declared one and sent
    half of it still gets 408 when the body timeout passes, not a connection held while they work."""
    release = threading.Event()
    monkeypatch.setattr(answerer, "answer", lambda *args, **knobs: release.wait(30))  # answers queued behind others
    with running(create_app(answerer, body_timeout=1), head_timeout=30) as (_, port):
        stalled = []
        try:
            for path in ["/api/answer?example=digit"] * 3 + ["/", "/nowhere"]:
                stalled.append(socket.create_connection(("127.0.0.1", port), timeout=10))
                stalled[-1].sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 1000\r\n\r\n"
                                    .encode() + b"x" * 500)
            for sock in stalled:  # each closed by the server, well within the socket's 10 s
                answered = read_to_end(sock)
                assert answered.startswith(b"HTTP/1.1 408") and b"connection: close" in answered.lower()
                assert json.loads(answered.split(b"\r\n\r\n", 1)[1]) == \
                    {"error": "the upload did not arrive within 1 s; send it again"}
        finally:
            release.set()
            for sock in stalled:
                sock.close()


# -- the page in a browser ---------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
CHROMEDRIVER = shutil.which("chromedriver")


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="the browser test needs Selenium (the dev extra)")
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("no Chromium and chromedriver on this machine (Debian: apt-get install chromium chromium-driver)")
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must not try to download a driver
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=1000,860"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=webdriver.ChromeService(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def wait_for(driver, condition, what: str, seconds: float = 60):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        found = driver.execute_script(condition)
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}; error shown: {driver.find_element('id', 'error').text!r}")


def answer_after(driver, act, what: str) -> str:
    """Blank the answer, act, and wait for the next one."""
    driver.execute_script("document.getElementById('answer').textContent = ''")
    act()
    return wait_for(driver, "return document.getElementById('answer').textContent.trim()", what)


@pytest.mark.slow  # a browser, about 12 s; CI runs it under -m slow
def test_a_person_draws_clicks_and_uploads(browser, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.support.ui import Select

    server, url = start_server("lenet")
    try:
        browser.get(url)
        wait_for(browser, "return document.body.dataset.ready", "the page to load its models")
        by_id = lambda name: browser.find_element("id", name)  # noqa: E731
        assert by_id("answer").text == "Draw a digit" and "click an example" in by_id("why").text  # not a blank screen

        def draw_seven():  # the strokes of a 7, with the mouse, on the 280 x 280 pad
            pad = by_id("pad")
            strokes = [[(-90, -95), (90, -95), (-20, 110)], [(-45, 10), (50, 10)]]
            for points in strokes:
                chain = ActionChains(browser).move_to_element_with_offset(pad, *points[0]).click_and_hold()
                for (x0, y0), (x1, y1) in zip(points, points[1:]):
                    for t in range(1, 11):
                        chain.move_by_offset((x1 - x0) / 10, (y1 - y0) / 10)
                chain.release().perform()

        assert answer_after(browser, draw_seven, "the answer to the drawing") == "7"
        assert by_id("twin-answer").text == "7"
        assert by_id("shift").text.startswith("no shift alarm: the certified rule refused 0 of 1 input (0%), where it refused")
        dots = browser.execute_script("return document.querySelectorAll('#plot circle.sample').length")
        assert dots == 100 * 10  # every sample of every class
        assert browser.execute_script("return document.querySelectorAll('#threshold-line').length") == 1
        seen = browser.execute_script("return Array.from(document.getElementById('seen').getContext('2d')"
                                      ".getImageData(0, 0, 28, 28).data).filter((v, i) => i % 4 == 0)")
        assert 40 < sum(v > 128 for v in seen) < 300  # the 28 x 28 input shows the strokes

        assert answer_after(browser, by_id("example-letter").click, "the letter example") == "I don't know"
        assert by_id("why").text.startswith("refused: no class") and "; mutual information 1.2" in by_id("why").text
        assert browser.execute_script("return strokes") == 0  # the drawing went with the click
        assert answer_after(browser, by_id("example-digit").click, "the digit example") == "7"

        photo = tmp_path / "photo.png"
        photo.write_bytes(png(example_pixels("digit"), 240, ink_on_paper=True))
        assert answer_after(browser, lambda: by_id("upload").send_keys(str(photo)), "the uploaded file") == "7"

        def choose_fashion():
            Select(by_id("model")).select_by_value("lenet_fashion")
        answer_after(browser, choose_fashion, "the clothing model's answer")
        labels = browser.execute_script("return Array.from(document.querySelectorAll('#plot text'), t => t.textContent)")
        assert "Trouser" in labels and "Ankle boot" in labels
        Select(by_id("model")).select_by_value("lenet")

        broken = tmp_path / "broken.png"
        broken.write_text("this is not a picture")
        by_id("upload").send_keys(str(broken))
        assert "not a readable image" in wait_for(
            browser, "const e = document.getElementById('error'); return e.style.display == 'block' && e.textContent",
            "the message about the broken file")
        assert by_id("answer").text == "" and by_id("twin-answer").text == ""  # no earlier answer beside the error
        by_id("clear").click()
        by_id("send").click()
        assert by_id("error").text.startswith("The canvas is empty")

        # the picture for the README: a letter the Bayesian MLP refuses and its twin calls an 8
        Select(by_id("model")).select_by_value("mnist_mlp")
        assert answer_after(browser, by_id("example-letter").click, "the letter example") == "I don't know"
        assert by_id("twin-answer").text == "8"
        shot = Path(os.environ.get("BNN_ZOO_SCREENSHOT") or tmp_path / "page.png")
        assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.slow
def test_the_page_refuses_a_calibration_of_other_weights(certified_run, tmp_path):
    from bnn_zoo.runs.storage.checkpoint import CHECKPOINT, read, save_atomic

    run = tmp_path / "run"
    shutil.copytree(certified_run, run)
    state = read(run / CHECKPOINT)
    state["guide"] = {k: v * 1.01 for k, v in state["guide"].items()}  # weights a resumed run moved on
    save_atomic(state, run / CHECKPOINT)
    done = subprocess.run([sys.executable, "-m", "bnn_zoo.serve", str(run), "--port", "0"], capture_output=True,
                          text=True, timeout=120)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2 and "calibration.json certified other weights" in last
    assert f"python -m bnn_zoo.certify {run}" in last


def test_an_accepted_drawing_is_answered_with_the_run_s_certified_set(certified_run, shared_data, tmp_path, capsys):
    """The page shows the conformal set predict prints for the same image, in the model's class names."""
    from bnn_zoo.data.sets import load_torchvision

    images, _ = load_torchvision("mnist", str(shared_data), train=False, download=False)
    path = tmp_path / "seven.png"
    Image.fromarray(images[0].numpy()).save(path)
    assert predict_main([str(certified_run), str(path), "--json", "--device", "cpu", "--samples", "4"]) == 0
    expected = json.loads(capsys.readouterr().out)["answers"][0]
    client = TestClient(create_app(Answerer(str(certified_run), "cpu"), max_upload=200_000),
                        base_url="http://localhost:8000")
    found = ask(client, path.read_bytes(), model=str(certified_run), samples=4).json()  # as certified
    assert found["answer"] == expected["answer"] == 7  # accepted: answered with a set
    assert found["set"] == {"classes": [str(c) for c in expected["set"]["classes"]], "coverage": 0.99}
    # other knobs or another sample count than the sets were certified with: no set, no promise
    for knobs in ({"samples": 5}, {"samples": 4, "threshold": 0.3}):
        assert "set" not in ask(client, path.read_bytes(), model=str(certified_run), **knobs).json()


def test_where_no_rule_is_certified_the_page_answers_with_the_conformal_set(uncertified_run, shared_data, tmp_path,
                                                                           capsys):
    """The page answers as predict does where no rule is certified: with the image's set, and the
    line that says why; the knobs of the quantile rule still give the quantile rule."""
    from bnn_zoo.data.sets import load_torchvision

    images, _ = load_torchvision("mnist", str(shared_data), train=False, download=False)
    client = TestClient(create_app(Answerer(str(uncertified_run), "cpu"), max_upload=200_000),
                        base_url="http://localhost:8000")
    for i in range(6):
        path = tmp_path / f"{i}.png"
        Image.fromarray(images[i].numpy()).save(path)
        assert predict_main([str(uncertified_run), str(path), "--json", "--device", "cpu", "--samples", "4"]) == 0
        expected = json.loads(capsys.readouterr().out)["answers"][0]
        found = ask(client, path.read_bytes(), model=str(uncertified_run), samples=4).json()
        assert found["set"] == {"classes": [str(c) for c in expected["set"]["classes"]], "coverage": 0.8}
        assert found["answer"] == expected["answer"] and found["note"].startswith("no rule is certified for bayes, so ")
        if found["answer"] is None:
            assert found["why"] == "its 80% conformal set holds every class"
        assert found["twin"]["note"].startswith("no rule is certified for twin") and "set" in found["twin"]
        knobbed = ask(client, path.read_bytes(), model=str(uncertified_run), samples=4, threshold=0.3).json()
        assert "note" not in knobbed and "set" not in knobbed and knobbed["rule"]["threshold"] == 0.3


def test_a_density_gate_says_its_score_in_nats():
    import torch

    from bnn_zoo.abstain.rule import DENSITY, Rule
    from bnn_zoo.page.answers import _judged

    probs = torch.tensor([[[0.9] + [0.1 / 9] * 9]])
    judged = _judged(probs, Rule(signal=DENSITY, cut=2.0), [str(c) for c in range(10)], torch.tensor([5.0]))
    assert judged["answer"] is None and judged["refused_by"] == [DENSITY]
    assert judged["why"] == "feature density 5 nats > 2"
    assert _judged(probs, Rule(signal=DENSITY, cut=2.0), [str(c) for c in range(10)], torch.tensor([1.0]))["answer"] == 0
