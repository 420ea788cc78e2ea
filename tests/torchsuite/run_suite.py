"""Runs PyTorch's own distributed backend suite (see dist_suite.py) with gloo, the control, and
with chorus, compares them and says whether chorus is a drop-in replacement:

- world size 2: the whole selection (279 tests, most skipped on CPU), each under gloo and
  then, unless gloo skipped it, under chorus;
- world size 3: the tests gloo skips at world size 2 as needing more ranks ("small world
  size"), the same way (--ws3 all: the whole selection at 3 as well).

It prints the counts, each test's time under both backends, and the tests chorus fails with a
one-line reason, and exits 1 when chorus fails a test gloo passes, other than the five
monitored_barrier tests torch 1.13 restricts to the backend named gloo, or when a test takes
more than 3x gloo's time (and over TIME_FLOOR_SEC more: a test's ranks spawn in 2-4 s on
this machine, so smaller differences are noise). A test that looks too slow is run again, both
backends, up to RETIMES times, and each backend's shortest time counts. The last line is "suite: N passed, N failed".

    tests/torchsuite/run_suite.sh [--build DIR] [--out DIR] [--ws3 MODE] [-k pattern ...]
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SUITE = os.path.join(HERE, "dist_suite.py")
PYTHON = "/usr/bin/python3"
TIME_RATIO_LIMIT = 3.0
TIME_FLOOR_SEC = 1.5
RUN_TIMEOUT_SEC = 4 * 3600
RETIMES = 2

# torch 1.13 keeps monitored_barrier for gloo: dist.monitored_barrier raises the first message
# for every backend not named "gloo", and ProcessGroup.monitored_barrier the second (the base
# class's), so no third-party backend can pass these tests.
GLOO_ONLY_PREFIX = "test_monitored_barrier"
GLOO_ONLY_MESSAGES = ("monitored_barrier is only implemented for GLOO backend",
                      "only GLOO supports monitored barrier")
SMALL_WORLD_REASON = "Skipped due to small world size."


def run_world_size(world_size, tests, out_dir, patterns, tag=None):
    """Runs dist_suite.py (gloo, then chorus, test by test) at one world size; returns
    {test: {backend: record}}. tests: the names to run (None: the selection, by patterns)."""
    tag = tag or f"ws{world_size}"
    results = os.path.join(out_dir, f"{tag}.json")
    log = os.path.join(out_dir, f"{tag}.log")
    command = [PYTHON, SUITE, "--results", results]
    if tests is not None:
        if not tests:
            return {}
        command += ["--exact"] + sorted(tests)
    else:
        for pattern in patterns:
            command += ["-k", pattern]
    env = dict(os.environ, WORLD_SIZE=str(world_size))
    count = "selection" if tests is None else f"{len(tests)} tests"
    print(f"-- {tag}: running the {count} (log: {log})", flush=True)
    started = time.monotonic()
    with open(log, "w") as log_file:
        done = subprocess.run(command, env=env, stdout=log_file, stderr=subprocess.STDOUT,
                              timeout=RUN_TIMEOUT_SEC, check=False)
    print(f"-- {tag}: {time.monotonic() - started:.0f} s, exit status {done.returncode}",
          flush=True)
    if not os.path.exists(results):
        raise RuntimeError(f"{tag} wrote no results; see {log}")
    with open(results) as stream:
        return json.load(stream)["tests"]


def load_or_run(world_size, tests, args):
    """The records of one world size: run (and slow-looking tests retimed), or with
    --report-only read from an earlier run's JSON in --out."""
    if not args.report_only:
        records = run_world_size(world_size, tests, args.out, args.patterns)
        retime(world_size, records, args.out)
        return records
    path = os.path.join(args.out, f"ws{world_size}.json")
    with open(path) as stream:
        records = json.load(stream)["tests"]
    for round_number in range(1, RETIMES + 1):  # fold in the retimes that run made
        retimed = os.path.join(args.out, f"ws{world_size}-retime{round_number}.json")
        if os.path.exists(retimed):
            with open(retimed) as stream:
                fold_in_times(records, json.load(stream)["tests"])
    return records


def by_backend(records, backend):
    return {name: runs[backend] for name, runs in records.items() if backend in runs}


def reason_line(record):
    """The most telling line of a failure: the child's exception, else the parent's."""
    text = record.get("reason", "")
    if record["outcome"] == "skip":
        return text
    lines = [line.strip() for line in text.splitlines()]
    errors = [line for line in lines
              if re.match(r"^[A-Za-z_.]*(Error|Exception|Timeout|Interrupt|Exit)\w*: ", line)
              or line.startswith("Timing out")]
    child = [line for line in errors if not line.startswith("RuntimeError: Process ")]
    chosen = (child or errors or lines or ["(no reason recorded)"])[-1]
    return chosen[:300]


def too_slow(mine, control):
    ratio = mine["seconds"] / max(control["seconds"], 0.01)
    return (mine["outcome"] != "skip" and ratio > TIME_RATIO_LIMIT
            and mine["seconds"] - control["seconds"] > TIME_FLOOR_SEC)


def retime(world_size, records, out_dir):
    """Runs the tests chorus passes but that look over the time limit RETIMES more times, both
    backends, and keeps each backend's shortest time: on a shared 2-core machine one run of a
    test can take several times another for reasons of its own."""
    for round_number in range(1, RETIMES + 1):
        slow = {name for name, runs in records.items()
                if "chorus" in runs and runs["chorus"]["outcome"] == "pass"
                and too_slow(runs["chorus"], runs["gloo"])}
        if not slow:
            return
        again = run_world_size(world_size, slow, out_dir, [],
                               tag=f"ws{world_size}-retime{round_number}")
        fold_in_times(records, again)


def fold_in_times(records, again):
    """Each backend's shortest time of a test over the runs so far."""
    for name, runs in again.items():
        for backend, record in runs.items():
            kept = records[name][backend]
            kept.setdefault("times", [kept["seconds"]]).append(record["seconds"])
            kept["seconds"] = min(kept["times"])


def compare(world_size, gloo, chorus):
    """(regressions, allowed, slow, lines): chorus failures of tests gloo passes, those of
    them torch keeps for gloo, tests over the time limit, and the report's lines."""
    regressions, allowed, slow, lines = [], [], [], []
    for name in sorted(chorus):
        mine, control = chorus[name], gloo.get(name)
        if control is None:
            continue
        ratio = mine["seconds"] / max(control["seconds"], 0.01)
        mark = ""
        if mine["outcome"] in ("fail", "error") and control["outcome"] == "pass":
            if name.startswith(GLOO_ONLY_PREFIX) and any(
                    message in mine["reason"] for message in GLOO_ONLY_MESSAGES):
                mark = "allowed (gloo only by name)"
                allowed.append(name)
            else:
                mark = "REGRESSION"
                regressions.append(name)
        if too_slow(mine, control):
            slow.append(name)
            mark = (mark + " " if mark else "") + f"SLOW ({ratio:.1f}x gloo)"
        lines.append(f"  ws{world_size} {name:<64} gloo {control['outcome']:<5} "
                     f"{control['seconds']:6.1f} s  chorus {mine['outcome']:<5} "
                     f"{mine['seconds']:6.1f} s  {mark}")
    return regressions, allowed, slow, lines


def counts(records):
    tally = {"pass": 0, "fail": 0, "error": 0, "skip": 0}
    for record in records.values():
        tally[record["outcome"]] += 1
    ran = tally["pass"] + tally["fail"] + tally["error"]
    return (f"{len(records)} tests: {ran} ran, {tally['pass']} passed, "
            f"{tally['fail'] + tally['error']} failed, {tally['skip']} skipped")


def report_failures(tag, records):
    failed = {name: r for name, r in records.items() if r["outcome"] in ("fail", "error")}
    if failed:
        print(f"{tag}: {len(failed)} failing", flush=True)
        for name in sorted(failed):
            print(f"  {name}: {reason_line(failed[name])}", flush=True)


def not_skipped(records):
    return {name for name, record in records.items() if record["outcome"] != "skip"}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.getcwd(), "torchsuite-results"),
                        help="directory for the logs and per-test JSON records")
    parser.add_argument("--ws3", choices=("needing3", "all", "none"), default="needing3",
                        help="which tests run at world size 3 (default: those needing 3 ranks)")
    parser.add_argument("--report-only", action="store_true",
                        help="report on the JSON records an earlier run left in --out")
    parser.add_argument("-k", dest="patterns", action="append", default=[],
                        help="only tests whose name contains this (repeatable)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    started = time.monotonic()

    plans = []  # (world size, gloo records, chorus records)
    records2 = load_or_run(2, None, args)
    gloo2 = by_backend(records2, "gloo")
    plans.append((2, gloo2, by_backend(records2, "chorus")))
    if args.ws3 != "none":
        wanted = None
        if args.ws3 == "needing3":
            wanted = {name for name, record in gloo2.items()
                      if record["outcome"] == "skip" and record["reason"] == SMALL_WORLD_REASON}
        records3 = load_or_run(3, wanted, args)
        plans.append((3, by_backend(records3, "gloo"), by_backend(records3, "chorus")))

    regressions, allowed, slow, time_lines = [], [], [], []
    print("\n== per-test times (tests chorus ran) ==", flush=True)
    for world_size, gloo, chorus in plans:
        found, excused, too_slow, lines = compare(world_size, gloo, chorus)
        regressions += [f"ws{world_size} {name}" for name in found]
        allowed += [f"ws{world_size} {name}" for name in excused]
        slow += [f"ws{world_size} {name}" for name in too_slow]
        time_lines += lines
    print("\n".join(time_lines), flush=True)

    print("\n== counts ==", flush=True)
    for world_size, gloo, chorus in plans:
        print(f"ws{world_size} gloo:   {counts(gloo)}", flush=True)
        print(f"ws{world_size} chorus: {counts(chorus)} (the tests gloo did not skip)",
              flush=True)
    print("\n== failures ==", flush=True)
    for world_size, gloo, chorus in plans:
        report_failures(f"ws{world_size} gloo", gloo)
        report_failures(f"ws{world_size} chorus", chorus)

    print(f"\nchorus fails {len(regressions)} test(s) gloo passes, besides {len(allowed)} "
          f"monitored_barrier test(s) torch keeps for gloo; {len(slow)} test(s) over "
          f"{TIME_RATIO_LIMIT:g}x gloo's time; {time.monotonic() - started:.0f} s in all",
          flush=True)
    for name in regressions + slow:
        print(f"  {name}", flush=True)
    bad = set(regressions) | set(slow)
    passed = sum(1 for world_size, _, chorus in plans for name, record in chorus.items()
                 if record["outcome"] == "pass" and f"ws{world_size} {name}" not in bad)
    print(f"suite: {passed} passed, {len(bad)} failed", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
