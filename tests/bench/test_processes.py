"""A measurement in a process of its own (``bnn_zoo.bench.processes``): the JSON of its last line
back, and a failure, a timeout or an answer without JSON as ``ChildFailed`` with its last line."""
import pytest

from bnn_zoo.bench.processes import ChildFailed, in_own_process

SCRIPT = '''import json, os, sys, time
spec = json.loads(sys.argv[sys.argv.index("--child") + 1])
print("a line before the figures")
if spec.get("fail"):
    sys.exit("RuntimeError: " + spec["fail"])
if spec.get("sleep"):
    time.sleep(spec["sleep"])
print(json.dumps({"pid": os.getpid(), "twice": 2 * spec["n"]}) if "n" in spec else "no figures")
'''


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "measure.py"
    path.write_text(SCRIPT)
    return str(path)


def test_the_figures_come_back_from_a_process_of_its_own(script):
    import os

    found = in_own_process(script, {"n": 21})
    assert found["twice"] == 42 and found["pid"] != os.getpid()


@pytest.mark.parametrize("spec, timeout, last", [
    ({"fail": "out of memory"}, None, "RuntimeError: out of memory"),
    ({"n": 1, "sleep": 60}, 3, "timed out after 3 s:"),
    ({}, None, "no JSON on its last line of output: 'a line before the figures\\nno figures'"),
])
def test_a_measurement_that_fails_says_why_in_its_last_line(script, spec, timeout, last):
    with pytest.raises(ChildFailed) as failed:
        in_own_process(script, spec, timeout)
    assert failed.value.last == last and failed.value.timed_out is (timeout is not None)
    assert str(spec) in str(failed.value)
