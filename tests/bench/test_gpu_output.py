"""What scripts/gpu_check.py reads from its processes' output (``bnn_zoo.bench.gpu_output``)."""
import pytest

from bnn_zoo.bench.gpu_output import PYTEST_RESULT, failures, last_json

PYTEST_OUT = """tests/a.py::ok PASSED
=================================== FAILURES ===================================
___________________________________ test_off ___________________________________
tests/b.py:3: in test_off
    assert gap < 1e-6
E   AssertionError: gap 0.25
=============================== warnings summary ===============================
a warning
=========================== short test summary info ============================
FAILED tests/b.py::test_off - AssertionError: gap 0.25
========================= 1 failed, 1 passed in 3.02s ==========================
"""


def test_the_failures_section_without_what_follows_it():
    tail = failures(PYTEST_OUT)
    assert tail.startswith("=" * 35 + " FAILURES") and "E   AssertionError: gap 0.25" in tail
    assert "short test summary info" not in tail and "FAILED tests/b.py" not in tail and "1 passed" not in tail
    assert PYTEST_RESULT.search(PYTEST_OUT.splitlines()[-1]).group(0) == "1 failed"
    crashed = "x" * 3000 + "Segmentation fault"  # no summary: the output's end
    assert failures(crashed, most=100) == crashed[-100:]


def test_the_last_json_line_is_the_figures():
    assert last_json('{"first": 1}\nlog line\n{"steps_per_s": 12.5}\ndone\n') == {"steps_per_s": 12.5}
    with pytest.raises(ValueError, match="no JSON line in its output: .*Traceback"):
        last_json("Traceback (most recent call last):\n  ...\nRuntimeError: CUDA error")
