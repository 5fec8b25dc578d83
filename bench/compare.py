#!/usr/bin/env python3
"""compare.py: the table of bench/collectives.sh, from the raw outputs of its runs (standard library only).

    compare.py --np N --repeats R --max-bytes B --factor F DIR     DIR holds SYSTEM.RUN.out, RUN = 1..R
    compare.py --self-test [--script bench/collectives.sh]

SYSTEM is cohort (cohort-bench through cohortrun: '[0] ' prefixed lines, '#' headers, then
size_bytes count dtype time_us algbw_GBs busbw_GBs) or mpi_tcp, mpi_shm, gloo (the anchors: a header line, then
bytes iters time_us busbw_GBs). busbw is recomputed from bytes and time_us for every system alike, because the
anchors print it with two decimals (gloo's 4 KiB figure would read 0.00). The median is taken over the runs per
size and system; ratios compare cohort's median with the anchor's at the sizes both measured.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

MIB = 1 << 20
BAND = (1 * MIB, 256 * MIB)  # sizes where the busbw targets apply
TARGETS = {"mpi_tcp": 1.2, "gloo": 1.5}  # cohort busbw / anchor busbw, at least
LATENCY_BYTES, LATENCY_TARGET_US = 4096, 40.0
ANCHORS = ("mpi_tcp", "mpi_shm", "gloo")
NAMES = {"cohort": "cohort", "mpi_tcp": "OpenMPI TCP", "mpi_shm": "OpenMPI shm", "gloo": "torch gloo"}


class BenchError(Exception):
    pass


def parse(system, text, where):
    """Returns {bytes: time_us} of one run's output."""
    times = {}
    transport = None
    for line in text.splitlines():
        if system == "cohort":
            if not line.startswith("[0] "):
                continue
            line = line[4:]
            if line.startswith("#"):
                if "transport " in line:
                    transport = line.split("transport ", 1)[1].split(",")[0].strip()
                continue
            fields = line.split()
            if len(fields) != 6:
                raise BenchError(f"{where}: expected 6 columns, got '{line}'")
            size, time_us = fields[0], fields[3]
        else:
            fields = line.split()
            if len(fields) != 4 or fields[0] == "bytes":
                continue
            size, time_us = fields[0], fields[2]
        try:
            times[int(size)] = float(time_us)
        except ValueError:
            raise BenchError(f"{where}: not a number in '{line}'") from None
    if system == "cohort" and transport != "tcp":
        raise BenchError(f"{where}: cohort-bench ran over transport '{transport}', not tcp")
    return times


def expected_sizes(max_bytes, factor):
    sizes, b = [], 4096
    while b <= max_bytes:
        sizes.append(b)
        b *= factor
    return sizes


def busbw(nbytes, time_us, np_):
    return nbytes / (time_us * 1e-6) * 2 * (np_ - 1) / np_ / 1e9


def load(directory, np_, repeats, max_bytes, factor):
    """Returns {system: {bytes: [busbw per run]}} and {system: [4 KiB time_us per run]}."""
    bw, lat = {}, {}
    for system in ("cohort",) + ANCHORS:
        want = expected_sizes(max_bytes, factor if system == "cohort" else 4)
        bw[system], lat[system] = {}, []
        for run in range(1, repeats + 1):
            path = os.path.join(directory, f"{system}.{run}.out")
            try:
                with open(path) as f:
                    times = parse(system, f.read(), path)
            except OSError as e:
                raise BenchError(f"cannot read {path}: {e.strerror}") from None
            for size in want:
                if size not in times:
                    raise BenchError(f"{path}: no line for {size} bytes (the run was cut short?)")
                if times[size] <= 0:
                    raise BenchError(f"{path}: time {times[size]} us at {size} bytes")
                bw[system].setdefault(size, []).append(busbw(size, times[size], np_))
            lat[system].append(times[LATENCY_BYTES])
    return bw, lat


def human(nbytes):
    for unit, scale in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1024)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def fmt_bw(v):
    return "-" if v is None else f"{v:.3f}" if v < 0.995 else f"{v:.2f}"


def judge(size, ratio, target):
    """A ratio cell and whether it counts as a miss (None: no target at this size)."""
    if ratio is None:
        return "-", None
    if BAND[0] <= size <= BAND[1]:
        miss = ratio < target
        return f"{ratio:.2f}x {'MISS' if miss else 'ok'}", miss
    return f"{ratio:.2f}x", None


def table(bw, lat):
    med = {s: {size: statistics.median(v) for size, v in d.items()} for s, d in bw.items()}
    out = ["| size | cohort busbw GB/s | OpenMPI TCP | cohort / OpenMPI TCP (>= 1.2x) | torch gloo | "
           "cohort / gloo (>= 1.5x) | OpenMPI shm (info) |",
           "| --- | ---: | ---: | --- | ---: | --- | ---: |"]
    checked, misses = 0, []
    for size in sorted(med["cohort"]):
        c = med["cohort"][size]
        cells = [human(size), fmt_bw(c)]
        for anchor in ("mpi_tcp", "gloo"):
            a = med[anchor].get(size)
            cell, miss = judge(size, c / a if a else None, TARGETS[anchor])
            cells += [fmt_bw(a), cell]
            if miss is not None:
                checked += 1
                if miss:
                    misses.append(f"{human(size)} vs {NAMES[anchor]} {c / a:.2f}x < {TARGETS[anchor]}x")
        cells.append(fmt_bw(med["mpi_shm"].get(size)))
        out.append("| " + " | ".join(cells) + " |")
    lat_med = {s: statistics.median(v) for s, v in lat.items()}
    lat_miss = lat_med["cohort"] > LATENCY_TARGET_US
    checked += 1
    if lat_miss:
        misses.append(f"4 KiB latency {lat_med['cohort']:.1f} us > {LATENCY_TARGET_US:.0f} us")
    out += ["",
            "| 4 KiB allreduce latency, us | cohort (<= 40) | OpenMPI TCP | torch gloo | OpenMPI shm (info) |",
            "| --- | --- | ---: | ---: | ---: |",
            f"| median | {lat_med['cohort']:.1f} {'MISS' if lat_miss else 'ok'} | {lat_med['mpi_tcp']:.1f} | "
            f"{lat_med['gloo']:.1f} | {lat_med['mpi_shm']:.1f} |",
            "",
            f"targets met: {checked - len(misses)} of {checked}" + (f"; MISS: {'; '.join(misses)}" if misses else "")]
    return "\n".join(out), checked, misses


def self_test(script):
    """Checks parsing, medians, ratios and flags on made-up outputs, then the script's one-line refusals."""
    failures = []

    def expect(cond, what):
        if not cond:
            failures.append(what)

    def anchor_text(times):
        return "       bytes    iters    time_us  busbw_GBs\n" + "".join(
            f"{b:12d} {10:8d} {t:10.4f} {0:10.2f}\n" for b, t in sorted(times.items()))

    def cohort_text(times, transport="tcp"):
        rows = "".join(f"[0] {b:12d} {b // 4:12d}   f32 {t:12.4f} {0:10.3f} {0:10.3f}\n"
                       for b, t in sorted(times.items()))
        return (f"[0] # cohort-bench allreduce: 2 ranks, transport {transport}, dtype f32, op sum, x\n"
                "[0] # size_bytes count dtype time_us algbw_GBs busbw_GBs\n" + rows)

    sizes = expected_sizes(4 * MIB, 4)  # 4K 16K 64K 256K 1M 4M
    # time = bytes / (busbw GB/s * 1e3) us for 2 ranks, where busbw = algbw.
    def times_for(gbs, lat):
        return {b: (lat if b == 4096 else b / (gbs * 1e3)) for b in sizes}

    with tempfile.TemporaryDirectory() as d:
        runs = {  # system: per run (busbw GB/s, 4 KiB time_us); the medians are 3.0, 2.0, 1.0, 9.0 and 30, 20, 900, 2
            "cohort": [(3.0, 30.0), (2.9, 50.0), (3.1, 10.0)],
            "mpi_tcp": [(2.0, 20.0), (2.0, 25.0), (1.0, 15.0)],
            "gloo": [(1.0, 900.0), (2.5, 800.0), (0.5, 1000.0)],
            "mpi_shm": [(9.0, 2.0), (9.0, 2.0), (9.0, 2.0)],
        }
        for system, per_run in runs.items():
            for i, (gbs, lat) in enumerate(per_run, 1):
                t = times_for(gbs, lat)
                with open(os.path.join(d, f"{system}.{i}.out"), "w") as f:
                    f.write(cohort_text(t) if system == "cohort" else anchor_text(t))
        bw, lat = load(d, 2, 3, 4 * MIB, 4)
        text, checked, misses = table(bw, lat)
        expect(abs(statistics.median(bw["cohort"][MIB]) - 3.0) < 1e-3, "cohort median busbw at 1 MiB is not 3.0")
        expect("| 1 MiB | 3.00 | 2.00 | 1.50x ok | 1.00 | 3.00x ok | 9.00 |" in text, "1 MiB row:\n" + text)
        expect(checked == 5 and not misses, f"checked {checked} misses {misses}")
        expect("| median | 30.0 ok | 20.0 | 900.0 | 2.0 |" in text, "latency row:\n" + text)
        expect("| 256 KiB | 3.00 | 2.00 | 1.50x | 1.00 | 3.00x | 9.00 |" in text, "no flag below 1 MiB:\n" + text)

        # cohort slower at 4 MiB and at 4 KiB: three misses, flagged and counted.
        with open(os.path.join(d, "cohort.2.out"), "w") as f:
            t = times_for(1.1, 60.0)
            f.write(cohort_text(t))
        with open(os.path.join(d, "cohort.1.out"), "w") as f:
            t = times_for(1.1, 45.0)
            t[4096] = 45.0
            t[MIB] = MIB / 3e3
            f.write(cohort_text(t))
        bw, lat = load(d, 2, 3, 4 * MIB, 4)
        text, checked, misses = table(bw, lat)
        expect("| 4 MiB | 1.10 | 2.00 | 0.55x MISS | 1.00 | 1.10x MISS | 9.00 |" in text, "4 MiB row:\n" + text)
        expect("| median | 45.0 MISS |" in text, "latency miss:\n" + text)
        expect(len(misses) == 3 and "targets met: 2 of 5" in text, f"misses {misses}\n{text}")

        # factor 2 for cohort: rows at sizes the anchors lack carry no ratio.
        for i in (1, 2, 3):
            with open(os.path.join(d, f"cohort.{i}.out"), "w") as f:
                f.write(cohort_text({b: b / 3e3 for b in expected_sizes(4 * MIB, 2)}))
        bw, lat = load(d, 2, 3, 4 * MIB, 2)
        text, checked, misses = table(bw, lat)
        expect("| 2 MiB | 3.00 | - | - | - | - | - |" in text, "2 MiB row without anchors:\n" + text)
        expect(checked == 5, f"factor 2 checked {checked}")

        # Refusals: a cut-short run, the wrong transport.
        with open(os.path.join(d, "gloo.2.out"), "w") as f:
            f.write(anchor_text({b: 1.0 for b in sizes[:-1]}))
        try:
            load(d, 2, 3, 4 * MIB, 2)
            expect(False, "a gloo run without its 4 MiB line was accepted")
        except BenchError as e:
            expect("gloo.2.out: no line for 4194304 bytes" in str(e), f"cut-short message: {e}")
        with open(os.path.join(d, "cohort.1.out"), "w") as f:
            f.write(cohort_text({b: 1.0 for b in sizes}, transport="inproc"))
        try:
            load(d, 2, 3, 4 * MIB, 4)
            expect(False, "a cohort run over inproc was accepted")
        except BenchError as e:
            expect("transport 'inproc', not tcp" in str(e), f"transport message: {e}")

    # The script refuses at once, in one line naming the package, when a tool is missing.
    if script:
        # The tools checked before the missing one are stood in for by 'true', so that the check does not
        # depend on what this machine has installed.
        checks = (("MPICC", "libopenmpi-dev"), ("MPIRUN", "openmpi-bin"), ("PYTHON", "python3-torch"))
        for i, (var, package) in enumerate(checks):
            env = dict(os.environ, **{v: "true" for v, _ in checks[:i]}, **{var: "/nonexistent/tool"})
            p = subprocess.run(["bash", script, "--max", "1M"], env=env, capture_output=True, text=True, timeout=60)
            lines = p.stderr.strip().splitlines()
            expect(p.returncode == 2 and len(lines) == 1 and package in p.stderr and not p.stdout,
                   f"{var} missing: exit {p.returncode}, stderr {p.stderr!r}, stdout {p.stdout!r}")
        p = subprocess.run(["bash", script, "--max", "3K"], capture_output=True, text=True, timeout=60)
        expect(p.returncode == 2 and "whole number of MiB" in p.stderr, f"--max 3K: {p.returncode} {p.stderr!r}")
    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    print(f"compare.py self-test: {'FAILED' if failures else 'passed'}", file=sys.stderr)
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", nargs="?")
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--max-bytes", type=int, default=256 * MIB)
    ap.add_argument("--factor", type=int, default=4, choices=(2, 4))
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--script", help="with --self-test: also check this collectives.sh's refusals")
    a = ap.parse_args()
    if a.self_test:
        return self_test(a.script)
    if not a.dir:
        ap.error("the directory of raw outputs is missing")
    try:
        bw, lat = load(a.dir, a.np, a.repeats, a.max_bytes, a.factor)
    except BenchError as e:
        print(f"compare.py: {e}", file=sys.stderr)
        return 1
    print(table(bw, lat)[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
