"""benchmarks/gpu_check.py runs everywhere: on the CPU its tiny mode measures what a CPU can (eager resume, eager
throughput, the authors' loop) and names every graph case it skips, so that the GPU's command cannot rot."""

import json
import runpy
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def test_the_gpu_check_runs_at_a_tiny_size_and_writes_its_json_and_tables(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["gpu_check.py", "--out", str(tmp_path), "--tiny", "--budget", "120",
                                      "--paper-steps", "12"])
    check = runpy.run_path(str(ROOT / "benchmarks" / "gpu_check.py"), run_name="gpu_check")
    assert check["main"]() == 0
    results = json.loads((tmp_path / "gpu_check.json").read_text())
    assert results["environment"]["torch"] == torch.__version__
    resumed = {entry["name"]: entry for entry in results["resume"]}
    for name in ("eager -> eager", "fused: eager -> eager"):
        assert resumed[name]["passed"] and resumed[name]["steps_compared"] == 20
    measured = [entry for entry in results["throughput"] if "error" not in entry]
    assert measured and all(entry["steps_per_s"] > 0 and entry["tflops"] > 0 for entry in measured)
    assert results["authors_loop"]["steps_per_s"] > 0
    assert results["paper_run"]["steps"] == 12 and results["paper_run"]["closest_bp"]
    if not torch.cuda.is_available():
        assert any("equivalence/root: no CUDA device" in line for line in results["skipped"])
        assert any("cuda_graph" in line and "needs a CUDA device" in line for line in results["skipped"])
    (profiled,) = results["kernels"]  # the tiny mode profiles the plain single model
    assert profiled["kernels_per_step"] > 10 and profiled["kernel_ms_per_step"] > 0
    if not torch.cuda.is_available():
        assert profiled["device"] == "cpu" and profiled["busiest"][0]["name"].startswith("aten::")
    table = (tmp_path / "gpu_check.md").read_text()
    assert "| eager -> eager | 20 |" in table and "Authors' loop" in table and "| paper x1 |" in table


def test_the_gpu_check_runs_only_the_sections_asked_for(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["gpu_check.py", "--out", str(tmp_path), "--tiny", "--sections", "kernels"])
    check = runpy.run_path(str(ROOT / "benchmarks" / "gpu_check.py"), run_name="gpu_check")
    assert check["main"]() == 0
    results = json.loads((tmp_path / "gpu_check.json").read_text())
    assert results["environment"]["torch"] == torch.__version__ and len(results["kernels"]) == 1
    assert not results["equivalence"] and not results["resume"] and not results["throughput"]
    assert not results["authors_loop"] and not results["sync"]
