#!/usr/bin/env python3
"""include_graph.py - the include graph of one directory of C sources, by module.

Reads the `#include "..."` lines of DIR's .c and .h files (not its subdirectories) and builds
the graph of modules: x.c and x.h are one module, x, and x -> y when a file of x includes a
file of y. An include that names no file of DIR (a system or library header, a file of another
directory) is no edge. Reports every include circle (a strongly connected component of two
modules or more, with one loop through it, file by file), and with --floor A,B,C checks that
the named ground-floor modules include nothing outside the floor.

    python3 test/lib/include_graph.py DIR [--floor A,B,C] [--edges] [--levels]

Exit status: 0 when the graph has no circle and the floor (if named) holds, 1 when it has a
circle or a floor module includes a module above the floor, 2 on a usage error (DIR missing,
a floor module that DIR does not have).
"""
import argparse
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def module_of(name):
    """The module a file name belongs to: its base name without .c or .h (None otherwise)."""
    base = os.path.basename(name)
    if base.endswith(".c") or base.endswith(".h"):
        return base[:-2]
    return None


def read_graph(directory):
    """Modules of DIRECTORY and their edges: {module: {included module: [(file, line, text)]}}."""
    files = sorted(f for f in os.listdir(directory)
                   if (f.endswith(".c") or f.endswith(".h"))
                   and os.path.isfile(os.path.join(directory, f)))
    present = set(files)
    modules = {module_of(f) for f in files}
    edges = {m: {} for m in modules}
    real_dir = os.path.realpath(directory)
    for f in files:
        src = module_of(f)
        with open(os.path.join(directory, f), encoding="utf-8", errors="replace") as fh:
            for number, line in enumerate(fh, 1):
                match = INCLUDE.match(line)
                if not match:
                    continue
                target = match.group(1)
                # a quoted include is looked for beside the including file first
                path = os.path.realpath(os.path.join(directory, target))
                if os.path.dirname(path) != real_dir or os.path.basename(path) not in present:
                    continue
                dst = module_of(path)
                if dst and dst != src:
                    edges[src].setdefault(dst, []).append((f, number, target))
    return modules, edges


def circles(modules, edges):
    """Strongly connected components of two modules or more (Tarjan's, iterative), sorted."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = [0]
    for root in sorted(modules):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def loop_in(component, edges):
    """One loop through a circle, from its first module back to it (breadth-first)."""
    members = set(component)
    start = component[0]
    previous = {start: None}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for child in sorted(edges[node]):
            if child not in members:
                continue
            if child == start:
                path = [node]
                while previous[path[-1]] is not None:
                    path.append(previous[path[-1]])
                return [start] + path[::-1][1:] + [start] if len(path) > 1 else [start, node, start]
            if child not in previous:
                previous[child] = node
                queue.append(child)
    return [start]


def levels(modules, edges):
    """Floor of each module of an acyclic graph: 1 for one that includes none, else one above
    the highest it includes."""
    floor = {}

    def of(module, seen=()):
        if module in floor:
            return floor[module]
        if module in seen:
            return 0
        below = [of(child, seen + (module,)) for child in edges[module]]
        floor[module] = 1 + max(below, default=0)
        return floor[module]

    for module in modules:
        of(module)
    return floor


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory")
    parser.add_argument("--floor", help="comma-separated ground-floor modules (x for x.c/x.h)")
    parser.add_argument("--edges", action="store_true", help="print every edge with its files")
    parser.add_argument("--levels", action="store_true", help="print each module's floor")
    args = parser.parse_args()

    if not os.path.isdir(args.directory):
        print(f"error: {args.directory} is not a directory", file=sys.stderr)
        return 2
    modules, edges = read_graph(args.directory)
    print(f"modules: {len(modules)}, edges: {sum(len(e) for e in edges.values())}")
    if args.edges:
        for src in sorted(edges):
            for dst in sorted(edges[src]):
                where = ", ".join(f"{f}:{n}" for f, n, _ in edges[src][dst])
                print(f"edge: {src} -> {dst} ({where})")
    failed = False

    found = circles(modules, edges)
    for component in found:
        failed = True
        loop = loop_in(component, edges)
        steps = []
        for a, b in zip(loop, loop[1:]):
            f, n, target = edges[a][b][0]
            steps.append(f'{f}:{n} #include "{target}"')
        print(f"circle: {len(component)} modules: {' '.join(component)}")
        print(f"  loop: {' -> '.join(loop)}  ({'; '.join(steps)})")
    if not found:
        print("circles: none")

    if args.floor is not None:
        floor = [m.strip() for m in args.floor.split(",") if m.strip()]
        missing = [m for m in floor if m not in modules]
        if missing:
            print(f"error: no such module in {args.directory}: {', '.join(missing)}",
                  file=sys.stderr)
            return 2
        violations = 0
        for src in floor:
            for dst in sorted(edges[src]):
                if dst not in floor:
                    violations += 1
                    f, n, target = edges[src][dst][0]
                    print(f'floor: {src} includes {dst}, above the floor ({f}:{n} #include "{target}")')
        failed = failed or violations > 0
        if not violations:
            print(f"floor: holds ({', '.join(floor)})")

    if args.levels and not found:
        floor_of = levels(modules, edges)
        for module in sorted(modules, key=lambda m: (-floor_of[m], m)):
            print(f"level {floor_of[module]}: {module}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
