#!/usr/bin/env python3
"""Self cost by crate and by function, from the callgrind dumps bench/instructions.sh keeps.

    bench/callgrind-self.py REQUESTS DUMP...      e.g. (after INSTRUCTIONS_KEEP=/tmp/ik
                                                  bench/instructions.sh pass, which prints the
                                                  request count) bench/callgrind-self.py 20041
                                                  /tmp/ik/pass/cg.out.*

Each function's own instructions (its cost lines, not those of the calls it makes), summed
over the dumps (one per thread), grouped by the crate its name starts with, then the top
functions; both as a share and per request. callgrind_annotate 3.19 shows only `clone` for
these per-thread dumps, hence this reading of the format itself: `fn=(id) name` starts a
function (the name is given once, at the id's first use), `calls=` is followed by the line
holding the call's inclusive cost, which is the callee's, not this function's.
"""

import collections
import re
import sys

COPIES = ("memcpy", "memmove", "memset")  # libc's, found anywhere in the name
GROUPS = [  # by the start of the name
    ("allocator", ("mi_", "_mi_")),
    ("hyper, httparse", ("hyper::", "<hyper::", "httparse", "hyper_util", "<hyper_util")),
    ("http (HeaderMap, Uri)", ("http::", "<http::")),
    ("tokio", ("tokio::", "<tokio::")),
    ("idemproxy", ("idemproxy::", "<idemproxy::")),
]
NAME = re.compile(r"(c?)fn=\((\d+)\)(?: (.*))?")


def self_costs(paths):
    names, cost = {}, collections.Counter()
    for path in paths:
        current, after_call = None, False
        with open(path, errors="replace") as dump:
            for line in dump:
                named = NAME.match(line)
                if named:
                    callee, ident, name = named.groups()
                    if name:
                        names[ident] = name.strip()
                    if not callee:
                        current = ident
                    continue
                if line.startswith("calls="):
                    after_call = True
                    continue
                if line[:1].isdigit() or line[:1] in "+-*":
                    if after_call:
                        after_call = False
                        continue
                    fields = line.split()
                    if current is not None and len(fields) >= 2 and fields[1].isdigit():
                        cost[current] += int(fields[1])
    return {names.get(ident, ident): value for ident, value in cost.items()}


def group_of(name):
    if any(copy in name for copy in COPIES):
        return "memory copies"
    for group, starts in GROUPS:
        if name.startswith(starts):
            return group
    return "other (std, futures, ...)"


def main():
    if len(sys.argv) < 3 or not sys.argv[1].isdigit():
        sys.exit(__doc__)
    requests, costs = int(sys.argv[1]), self_costs(sys.argv[2:])
    total = sum(costs.values())
    if total == 0 or requests == 0:
        sys.exit("callgrind-self: no costs in those dumps")
    groups = collections.Counter()
    for name, value in costs.items():
        groups[group_of(name)] += value
    print(f"{total / requests:,.0f} instructions per request")
    print("| group | share | per request |\n|---|---:|---:|")
    for group, value in groups.most_common():
        print(f"| {group} | {value * 100 / total:.1f}% | {value / requests:,.0f} |")
    print("\ntop functions (self):")
    for name, value in collections.Counter(costs).most_common(25):
        print(f"{value * 100 / total:5.1f}% {value / requests:8,.0f}  {name[:140]}")


if __name__ == "__main__":
    main()
