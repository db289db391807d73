"""bench/training/kernel_gaps.py: steps cut at the end of each AdamW update, busy time as the union of every
stream's intervals, the gap between two steps counted in the later one."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "bench", "training", "kernel_gaps.py")
sys.path.insert(0, os.path.dirname(SCRIPT))
import kernel_gaps  # noqa: E402


def write_trace(path, steps, host_gap_ns):
    """Each step: a host gap, then on stream 7 ten 1 ms kernels 2 us apart, a copy on stream 8 overlapping the
    third kernel, then two AdamW kernels back to back (one run of updates)."""
    rows = ["kind,start_ns,end_ns,stream,name"]
    t = 0
    for _ in range(steps):
        t += host_gap_ns
        for k in range(10):
            rows.append(f"K,{t},{t + 1_000_000},7,_Z6matmulv")
            if k == 2:
                rows.append(f"C,{t + 500_000},{t + 1_500_000},8,copy kind 1 131072 B")
            t += 1_000_000 + 2_000
        rows.append(f"K,{t},{t + 200_000},7,_Z12adamw_kernelv")
        t += 200_000
        rows.append(f"K,{t},{t + 100_000},7,_Z16adamw_vec4_kernelv")
        t += 100_000
    with open(path, "w") as f:
        f.write("\n".join(rows) + "\n")


def test_steps_and_idle_time(tmp_path):
    trace = str(tmp_path / "trace.csv")
    write_trace(trace, steps=6, host_gap_ns=50_000)
    rows = kernel_gaps.load(trace)
    ends = kernel_gaps.step_ends(rows)
    assert len(ends) == 6  # one end a step: the two AdamW kernels are one run
    w = kernel_gaps.analyse_window(rows, ends[2], ends[3])
    # 50 us host gap + 10 x 1.002 ms + 0.3 ms of updates
    assert w["step_ns"] == 50_000 + 10 * 1_002_000 + 300_000
    # Idle: the host gap and ten 2 us gaps; the copy on the other stream lies inside a kernel except for the 2 us
    # gap after the third kernel, which it covers.
    assert w["idle_ns"] == 50_000 + 9 * 2_000
    assert w["kernels"] == 12
    # The compute stream alone (the updates' stream): the copy on stream 8 no longer covers a gap.
    assert kernel_gaps.update_stream(rows) == 7
    c = kernel_gaps.analyse_window(rows, ends[2], ends[3], stream=7)
    assert c["idle_ns"] == 50_000 + 10 * 2_000


def test_command_line_skips_and_writes_json(tmp_path):
    trace = str(tmp_path / "trace.csv")
    out = str(tmp_path / "gaps.json")
    write_trace(trace, steps=6, host_gap_ns=80_000)
    printed = subprocess.run([sys.executable, SCRIPT, trace, "--skip", "1", "--json", out],
                             capture_output=True, text=True, check=True).stdout
    summary = json.load(open(out))
    assert summary["steps"] == 4  # 5 windows between 6 ends, the first skipped
    assert abs(summary["idle_ms_median"] - (80_000 + 9 * 2_000) / 1e6) < 1e-9
    assert summary["largest_gaps_in_median_step"][0]["us"] == 80.0
    assert "4 steps" in printed
    assert abs(summary["compute_stream_idle_ms_median"] - (80_000 + 10 * 2_000) / 1e6) < 1e-9


def test_too_few_steps_is_an_error(tmp_path):
    trace = str(tmp_path / "trace.csv")
    write_trace(trace, steps=2, host_gap_ns=10_000)
    r = subprocess.run([sys.executable, SCRIPT, trace], capture_output=True, text=True)
    assert r.returncode != 0
    assert "too few steps" in r.stderr


def test_a_trace_with_dropped_records_is_refused(tmp_path):
    trace = str(tmp_path / "trace.csv")
    write_trace(trace, steps=6, host_gap_ns=10_000)
    with open(trace, "a") as f:
        f.write("D,12,0,7,dropped records\n")
    r = subprocess.run([sys.executable, SCRIPT, trace], capture_output=True, text=True)
    assert r.returncode != 0
    assert "dropped 12 records" in r.stderr
