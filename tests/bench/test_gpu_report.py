"""scripts/gpu_check.py's report as markdown (``bnn_zoo.bench.gpu_report``): each target met or missed
from the figures measured, one not measured said so, each section's figures or why it failed."""
from bnn_zoo.bench.gpu_report import markdown, targets

REPORT = {"device": "a made-up GPU", "torch": "2.11", "commit": "abc1234", "command": "python scripts/gpu_check.py",
          "machine": "16 CPU cores", "wall_s": 320.0, "budget_s": 285.0,
          "sections": {"mnist_mlp": "done", "draws": "failed", "lenet": "skipped: 20 s left"},
          "mnist_mlp": {"compile": {"ok": True, "epoch_seconds": [9.0, 0.15, 0.25], "losses": [2.0, 1.0, 0.5],
                                    "test_accuracy": 0.97, "wall_s": 40.0},
                        "resumed": {"ok": True, "epoch_seconds": [9.0, 0.15, 0.17, 4.5]},
                        "loss_gap": 2e-4, "predict_seconds": 0.25},
          "peers": {"steps_per_s": {"mnist_mlp": {"zoo_compiled": 300.0, "twin": 100.0, "twin_compiled": 600.0}}},
          "draws": {"error": "Traceback ...\nRuntimeError: CUDA error: an illegal memory access"},
          "tests": {"ok": False, "failed": ["FAILED tests/b.py::off"], "summary": "1 failed, 9 passed"}}


def test_each_target_is_met_or_missed_from_its_figures():
    found = {what: (value, met) for what, value, _, met in targets(REPORT)}
    assert found["mnist_mlp epoch, compiled (s)"] == (0.2, True)  # the median after the first: of 0.15 and 0.25
    assert found["mnist_mlp first epoch after resume (s)"] == (4.5, False)  # over 3 s
    assert found["mnist_mlp compiled step over the plain twin's eager step (x)"] == (3.0, True)
    assert found["mnist_mlp compiled twin's step over the compiled step (x)"] == (2.0, False)  # over 1.5
    assert found["lenet epoch, compiled (s)"] == (None, None)  # not measured: neither met nor missed
    assert found["python -m pytest -m cuda: failed"] == (1, False)
    assert found["gpu_check wall (s)"] == (320.0, False)


def test_the_markdown_shows_the_targets_and_each_section():
    text = markdown(REPORT)
    assert text.startswith("# gpu_check: a made-up GPU, torch 2.11, commit abc1234\n")
    assert "| mnist_mlp first epoch after resume (s) | 4.500 | <= 3.0 | NO |" in text
    assert "| lenet epoch, compiled (s) | not measured | <= 0.3 | - |" in text
    assert "| lenet | skipped: 20 s left |" in text
    assert "## draws\n\nFAILED: Traceback ...\nRuntimeError: CUDA error: an illegal memory access" in text
    assert "| compile | yes | 9.00, 0.15, 0.25 | 2.00, 1.00, 0.50 | 0.9700 | 40 |" in text
