#!/usr/bin/env python3
"""Self instruction counts of a callgrind output file, summed by object (ELF file),
and per operation: callgrind-objects.py CALLGRIND_OUT [OPS].

Groups: xfer (the measured program: xfer is linked into it), rdma-core (libibverbs and its providers, e.g.
librxe), libc, other. Reads the raw file (name compression, call costs skipped), so it
needs no callgrind_annotate threshold and sees every function."""
import re
import sys


def main():
    path = sys.argv[1]
    ops = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    names = {}
    obj = None
    skip_next = False
    by_obj = {}
    events = None
    program = None
    for line in open(path, errors="replace"):
        line = line.rstrip("\n")
        if line.startswith("cmd:"):
            program = line.split()[1] if len(line.split()) > 1 else None
            continue
        if line.startswith("events:"):
            events = line.split()[1:]
            continue
        m = re.match(r"^(ob|cob)=(?:\((\d+)\))?\s*(.*)$", line)
        if m:
            kind, num, name = m.groups()
            if num is not None and name:
                names[num] = name
            resolved = name if name else names.get(num, "?")
            if kind == "ob":
                obj = resolved
            continue
        if line.startswith("calls="):
            skip_next = True
            continue
        if line and (line[0].isdigit() or line[0] in "+-*"):
            if skip_next:
                skip_next = False
                continue
            parts = line.split()
            cost = int(parts[1]) if len(parts) > 1 else 0
            by_obj[obj] = by_obj.get(obj, 0) + cost
    total = sum(by_obj.values())

    def group(o):
        o = o or "?"
        if "ibverbs" in o or "rxe" in o or "rdmav" in o or "librdmacm" in o:
            return "rdma-core"
        if "/libc." in o or "libc-" in o or "ld-linux" in o:
            return "libc"
        if o == program or "/target/" in o:
            return "xfer"
        return "other"

    groups = {}
    for o, c in by_obj.items():
        groups[group(o)] = groups.get(group(o), 0) + c
    print(f"{path}: {total:,} instructions ({events}), {ops} operations: {total / ops:,.1f} each")
    for g, c in sorted(groups.items(), key=lambda kv: -kv[1]):
        print(f"  {g:10} {c / ops:10,.1f} per op  ({100 * c / max(total, 1):5.1f} %)")
    for o, c in sorted(by_obj.items(), key=lambda kv: -kv[1]):
        if c:
            print(f"    {c / ops:10,.1f}  {o}")


if __name__ == "__main__":
    main()
