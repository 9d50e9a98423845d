#!/usr/bin/env python3
"""Counts test cases from Bazel's JUnit XML logs and prints 'N passed, N failed, N skipped'.

Bazel's own summary counts targets, and shows a skipped GoogleTest as passed; this
counts each test case, skips apart. A target that failed without a parseable log
(a crash, a timeout) counts as one failed case, so nothing is hidden. A lane (--lane: the
same tests built another way, e.g. under a sanitizer) adds its own cases, named apart.
"""
import argparse
import os
import re
import sys
import xml.etree.ElementTree as ET


SANITIZER_REPORT = re.compile(r"SUMMARY: (Address|Thread|Leak|UndefinedBehavior)Sanitizer")


def xml_logs(root):
    """The JUnit logs of one target: test.xml, or one per shard / run / attempt.

    An output base that ran the target before with another shard_count (or
    runs_per_test) still holds the old shard_K_of_M folders beside the new ones: only
    the layout written last counts, or those cases would be counted twice.
    """
    layouts = {}  # the (shard_of, run_of) totals in a path -> its logs
    for dirpath, _, files in os.walk(root):
        if "test.xml" in files:
            path = os.path.join(dirpath, "test.xml")
            key = tuple(re.findall(r"(shard|run)_\d+_of_(\d+)", os.path.relpath(dirpath, root)))
            layouts.setdefault(key, []).append(path)
    if not layouts:
        return []
    newest = max(layouts.values(), key=lambda paths: max(os.path.getmtime(p) for p in paths))
    return sorted(newest)


def count_xml_dir(xml_dir, lane="rdma_vm"):
    """JUnit XML files written outside Bazel (the RDMA lane, the lint lane), one per binary."""
    passed = failed = skipped = 0
    failures = []
    for name in sorted(os.listdir(xml_dir)):
        if not name.endswith(".xml"):
            continue
        path = os.path.join(xml_dir, name)
        target = lane + "/" + name[:-4]
        try:
            cases = list(ET.parse(path).iter("testcase"))
        except ET.ParseError:
            failed += 1
            failures.append(target + " (unreadable " + path + ")")
            continue
        for case in cases:
            label = target + ":" + case.get("classname", "") + "." + case.get("name", "")
            if case.find("failure") is not None or case.find("error") is not None:
                failed += 1
                failures.append(label)
            elif case.get("result") == "skipped" or case.find("skipped") is not None:
                skipped += 1
            else:
                passed += 1
    return passed, failed, skipped, failures


def count(testlogs, labels):
    passed = failed = skipped = 0
    failures = []
    for label in labels:
        target = label.lstrip("/").replace(":", "/")
        root = os.path.join(testlogs, target)
        logs = xml_logs(root) if os.path.isdir(root) else []
        if not logs:
            failed += 1
            failures.append(label + " (no test log: not built or not run)")
            continue
        for log in logs:
            try:
                tree = ET.parse(log)
            except ET.ParseError:
                failed += 1
                failures.append(target + " (unreadable " + os.path.relpath(log, testlogs) + ")")
                continue
            cases = list(tree.iter("testcase"))
            text_log = os.path.join(os.path.dirname(log), "test.log")
            lines = []
            if os.path.exists(text_log):
                with open(text_log, errors="replace") as f:
                    lines = f.readlines()
            # A shell test that could not run here says "SKIPPED: reason" and passes.
            shell_skip = len(cases) == 1 and any(line.startswith("SKIPPED:") for line in lines)
            # A sanitizer's report after every case passed (a leak at exit) fails the target.
            report = next((line.strip() for line in lines if SANITIZER_REPORT.match(line)), None)
            if report and not any(c.find("failure") is not None or c.find("error") is not None for c in cases):
                failed += 1
                failures.append(target + " (" + report + ")")
            for case in cases:
                name = target + ":" + case.get("classname", "") + "." + case.get("name", "")
                if case.find("failure") is not None or case.find("error") is not None:
                    failed += 1
                    failures.append(name)
                elif shell_skip or case.get("result") == "skipped" or case.find("skipped") is not None:
                    skipped += 1
                else:
                    passed += 1
            if not cases:
                # No test cases (e.g. a timeout's synthetic log): trust the suite's counts.
                for suite in tree.iter("testsuite"):
                    if int(suite.get("failures", 0)) + int(suite.get("errors", 0)) > 0:
                        failed += 1
                        failures.append(target)
    return passed, failed, skipped, failures


def bazel_run(testlogs, labels_file, bazel_exit, prefix=""):
    """The cases of one bazel test run; a run that failed (build error, crash) without a
    failed case to show for it counts as one failure."""
    labels = [l.strip() for l in open(labels_file) if l.strip()]
    passed, failed, skipped, failures = count(testlogs, labels)
    if bazel_exit not in (0, 4) and failed == 0:
        failed = 1
        failures.append("bazel test exited with code %d (see its output above)" % bazel_exit)
    return passed, failed, skipped, [prefix + f for f in failures]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("testlogs")
    ap.add_argument("--bazel-exit", type=int, default=0)
    ap.add_argument("--labels", required=True, help="file with the test targets of this run, one label a line")
    ap.add_argument("--xml-dir", action="append", default=[], metavar="[LANE=]DIR",
                    help="also count the JUnit XML files in DIR, named LANE/FILE (default lane: rdma_vm); repeatable")
    ap.add_argument("--lane", nargs=4, action="append", default=[], metavar=("NAME", "BAZEL_EXIT", "TESTLOGS", "LABELS"),
                    help="also count another bazel test run (e.g. under a sanitizer), its failures named NAME")
    args = ap.parse_args()
    runs = [bazel_run(args.testlogs, args.labels, args.bazel_exit)]
    for spec in args.xml_dir:
        lane, _, xml_dir = spec.rpartition("=")
        runs.append(count_xml_dir(xml_dir, lane or "rdma_vm"))
    for name, bazel_exit, testlogs, labels in args.lane:
        runs.append(bazel_run(testlogs, labels, int(bazel_exit), prefix=name + ": "))
    passed, failed, skipped = (sum(r[i] for r in runs) for i in range(3))
    for r in runs:
        for f in r[3]:
            print("FAILED: " + f)
    print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
