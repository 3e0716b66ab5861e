#!/usr/bin/env python3
"""include_graph.py - the include graph of one directory of C sources, by module.

Reads the `#include "..."` lines of DIR's .c and .h files (not its subdirectories) and builds
the graph of modules: x.c and x.h are one module, x, and x -> y when a file of x includes a
file of y. An include that names no file of DIR (a system or library header, a file of another
directory) is no edge. Reports every include circle (a strongly connected component of two
modules or more, with one loop through it, file by file), and with --floor A,B,C checks that
the named ground-floor modules include nothing outside the floor.

With --calls, a module also depends on every module whose object file (DIR/y.o, as the build
left it) defines a symbol that its own object file uses (nm: x.o's undefined symbols against
y.o's defined ones): the graph is then of includes and calls together, so a circle of calls
through one shared header is a circle too. With --apart A,B,C, no two of the named modules
may depend on each other, either way. With --only PREFIX, only the modules whose names start
with PREFIX are read (the graph among them).

    python3 test/lib/include_graph.py DIR [--only PREFIX] [--floor A,B,C] [--calls] [--apart A,B,C]
                                          [--edges] [--levels]

Exit status: 0 when the graph has no circle and the floor and apart sets (if named) hold, 1
when it has a circle, a floor module includes a module above the floor or two apart modules
depend on each other, 2 on a usage error (DIR missing, a named module that DIR does not have,
an object file --calls cannot read).
"""
import argparse
import os
import re
import subprocess
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


def object_symbols(path):
    """(defined, undefined) external symbols of one object file, by nm; None if unreadable."""
    try:
        out = subprocess.run(["nm", "-g", path], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "U":
            undefined.add(parts[1])
        elif len(parts) == 3 and parts[1] in "TDBRVWGS":
            defined.add(parts[2])
    return defined, undefined


def add_call_edges(directory, modules, edges):
    """x -> y for each symbol x.o uses that y.o defines (modules with a .c); an error text or
    None."""
    symbols = {}
    for module in sorted(modules):
        if not os.path.isfile(os.path.join(directory, module + ".c")):
            continue
        found = object_symbols(os.path.join(directory, module + ".o"))
        if found is None:
            return f"cannot read {os.path.join(directory, module + '.o')} (build first)"
        symbols[module] = found
    owner = {}
    for module, (defined, _) in symbols.items():
        for name in defined:
            owner[name] = module
    for module, (_, undefined) in symbols.items():
        for name in sorted(undefined):
            dst = owner.get(name)
            if dst and dst != module and dst in edges:
                edges[module].setdefault(dst, []).append((module + ".o", 0, name))
    return None


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
    parser.add_argument("--only", help="read only the modules whose names start with this")
    parser.add_argument("--calls", action="store_true",
                        help="also an edge for each symbol one module's object file uses of another's")
    parser.add_argument("--apart", help="comma-separated modules none of which may depend on another")
    parser.add_argument("--edges", action="store_true", help="print every edge with its files")
    parser.add_argument("--levels", action="store_true", help="print each module's floor")
    args = parser.parse_args()

    if not os.path.isdir(args.directory):
        print(f"error: {args.directory} is not a directory", file=sys.stderr)
        return 2
    modules, edges = read_graph(args.directory)
    if args.only:
        modules = {m for m in modules if m.startswith(args.only)}
        edges = {m: {d: w for d, w in edges[m].items() if d in modules} for m in modules}
    if args.calls:
        problem = add_call_edges(args.directory, modules, edges)
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            return 2
    print(f"modules: {len(modules)}, edges: {sum(len(e) for e in edges.values())}")
    if args.edges:
        for src in sorted(edges):
            for dst in sorted(edges[src]):
                where = ", ".join(f"{f} uses {t}" if n == 0 else f"{f}:{n}"
                                  for f, n, t in edges[src][dst])
                print(f"edge: {src} -> {dst} ({where})")
    failed = False

    found = circles(modules, edges)
    for component in found:
        failed = True
        loop = loop_in(component, edges)
        steps = []
        for a, b in zip(loop, loop[1:]):
            f, n, target = edges[a][b][0]
            steps.append(f"{f} uses {target}" if n == 0 else f'{f}:{n} #include "{target}"')
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

    if args.apart is not None:
        apart = [m.strip() for m in args.apart.split(",") if m.strip()]
        missing = [m for m in apart if m not in modules]
        if missing:
            print(f"error: no such module in {args.directory}: {', '.join(missing)}",
                  file=sys.stderr)
            return 2
        ties = 0
        for src in apart:
            for dst in sorted(edges[src]):
                if dst in apart:
                    ties += 1
                    f, n, target = edges[src][dst][0]
                    how = f"uses {target}" if n == 0 else f'{f}:{n} #include "{target}"'
                    print(f"apart: {src} depends on {dst} ({how})")
        failed = failed or ties > 0
        if not ties:
            print(f"apart: holds ({', '.join(apart)})")

    if args.levels and not found:
        floor_of = levels(modules, edges)
        for module in sorted(modules, key=lambda m: (-floor_of[m], m)):
            print(f"level {floor_of[module]}: {module}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
