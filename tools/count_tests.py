#!/usr/bin/env python3
"""Counts test cases from Bazel's JUnit XML logs and prints 'N passed, N failed, N skipped'.

Bazel's own summary counts targets, and shows a skipped GoogleTest as passed; this
counts each test case, skips apart. A target that failed without a parseable log
(a crash, a timeout) counts as one failed case, so nothing is hidden.
"""
import argparse
import os
import sys
import xml.etree.ElementTree as ET


def count(testlogs, labels):
    passed = failed = skipped = 0
    failures = []
    for label in labels:
        target = label.lstrip("/").replace(":", "/")
        root = os.path.join(testlogs, target)
        if not os.path.exists(os.path.join(root, "test.xml")):
            failed += 1
            failures.append(label + " (no test log: not built or not run)")
            continue
        try:
            tree = ET.parse(os.path.join(root, "test.xml"))
        except ET.ParseError:
            failed += 1
            failures.append(target + " (unreadable test.xml)")
            continue
        cases = list(tree.iter("testcase"))
        for case in cases:
            name = target + ":" + case.get("classname", "") + "." + case.get("name", "")
            if case.find("failure") is not None or case.find("error") is not None:
                failed += 1
                failures.append(name)
            elif case.get("result") == "skipped" or case.find("skipped") is not None:
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("testlogs")
    ap.add_argument("--bazel-exit", type=int, default=0)
    ap.add_argument("--labels", required=True, help="file with the test targets of this run, one label a line")
    args = ap.parse_args()
    passed, failed, skipped, failures = count(args.testlogs, [l.strip() for l in open(args.labels) if l.strip()])
    if args.bazel_exit not in (0, 4) and failed == 0:
        # Bazel failed (build error, crash) without a failed case to show for it.
        failed = 1
        failures.append("bazel test exited with code %d (see its output above)" % args.bazel_exit)
    for f in failures:
        print("FAILED: " + f)
    print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
