"""Write the measured GPU table that ``--step_mode auto`` and the time estimates read, from gpu_check's JSON files.

    python benchmarks/gpu_measured.py benchmarks/results/gpu_check_h100_2026-11-28a.json \
        benchmarks/results/gpu_check_h100_2026-11-28b.json --out hf_treelang/train/gpu_measured.json

Every rate is a throughput row of the files (TF32, CUDA graph, root task); where several files measured one case, the
last file named wins. A lever's compile seconds are the largest, over the files, of a compiled case's wall time less
the fastest plain case of the same size and member count (the first compilation in a process costs the most; later
ones reuse inductor's caches). Nothing is typed by hand: rerun this after a new gpu_check.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hf_treelang.jsonio import write_json_atomic  # noqa: E402

# the table's keys for the throughput variants (single: steps/s; stacked: member-steps/s)
KEYS = {"": "{}", "fused": "fused_{}", "compiled fused": "compiled_{}", "compiled fused math": "compiled_math_{}"}


def table(files: list) -> dict:
    rows, seconds, environment = {}, {}, {}
    for path in files:
        results = json.loads(Path(path).read_text())
        environment = results["environment"]
        for entry in results["throughput"]:
            if "error" in entry or entry.get("mode") != "cuda_graph" or entry.get("precision") != "tf32":
                continue
            key = (entry["size"], entry["members"])
            wall = results.get("case_seconds", {}).get(f"throughput/{entry['name']}")
            if wall is not None:  # every compiled variant compiles, whether or not the table keeps its rate
                seconds.setdefault(key, {}).setdefault(entry["variant"], []).append(wall)
            if entry["variant"] not in KEYS:
                continue
            row = rows.setdefault(key, {"parameters": entry["parameters_per_member"], "members": entry["members"]})
            rate = entry["steps_per_s"] if entry["members"] == 1 else entry["member_steps_per_s"]
            name = "steps_per_s" if entry["members"] == 1 else "member_steps_per_s"
            row[KEYS[entry["variant"]].format(name)] = rate
    for key, walls in seconds.items():
        plain = min(walls.get("", walls.get("fused", [None])) or [None])
        compiled = [w for variant, values in walls.items() if variant.startswith("compiled") for w in values]
        if plain is not None and compiled and key in rows:
            rows[key]["compile_seconds"] = max(compiled) - plain
    for row in rows.values():  # a stacked compiled step takes the math attention (auto's rule): its rate is that one
        if row["members"] > 1 and "compiled_math_member_steps_per_s" in row:
            row["compiled_member_steps_per_s"] = row.pop("compiled_math_member_steps_per_s")
    single = sorted((row for row in rows.values() if row["members"] == 1), key=lambda row: row["parameters"])
    stacked = sorted((row for row in rows.values() if row["members"] > 1), key=lambda row: row["members"])
    for row in single:
        row.pop("members")
        row.pop("compiled_math_steps_per_s", None)
    return {
        "about": "Steps/s of one GPU, measured by `python benchmarks/gpu_check.py` (root classification, batch 32, "
                 "2**4 leaves, TF32, CUDA graph) and tabulated by `python benchmarks/gpu_measured.py` from "
                 + ", ".join(Path(path).name for path in files) + " (benchmarks/results/). Keys: the plain graph "
                 "step, fused_ (fused AdamW), compiled_ (torch.compile with fused AdamW; stacked: with the math "
                 "attention), compile_seconds (a compilation's wall time). Read by hf_treelang.train.levers "
                 "(--step_mode auto) and hf_treelang.sweep.estimate.",
        "device": environment.get("device"), "torch": environment.get("torch"), "cuda": environment.get("cuda"),
        "date": max(Path(path).stem.split("_")[-1][:10] for path in files),
        "mode": "cuda_graph, TF32", "compiled_tasks": ["root"], "single": single, "stacked": stacked,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="gpu_check.json files, oldest first")
    parser.add_argument("--out", required=True, help="the table to write (hf_treelang/train/gpu_measured.json)")
    args = parser.parse_args(argv)
    write_json_atomic(args.out, table(args.files))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
