#!/usr/bin/env python3
"""`check-layers.py [--write]`: fails when a dependency or an import crosses a layer the wrong way.

The layers are listed below, lowest first. A target may depend only on targets of lower layers, and
each source file may import only the package modules its target declares in Package.swift (SwiftPM
lets a file import a module that is merely built beside it; this check does not). The graph as
Package.swift declares it is drawn into docs/architecture.md between the `layers:begin` and
`layers:end` markers; the check fails when the drawing there is not the declared one, and
`--write` redraws it. Run by `make test` (scripts/test.sh) before anything is built.
"""
import json
import os
import re
import subprocess
import sys

# Lowest first. Each entry: (layer, what it is for, targets).
LAYERS = [
    ("C libraries", "system-library module maps, each wrapped once above", ["CLinuxShims", "COpenSSL", "CLibPQ", "CCurl", "CMicroHTTPD"]),
    ("leaves", "vocabulary, the SIP message model, metrics, crypto", ["RouseVocabulary", "SIPMessage", "Metrics", "Crypto"]),
    ("services below the SIP and HTTP cores", "logging, transactions, transport, DNS, the generic HTTP server", ["RouseLog", "SIPTransaction", "SIPDifferential", "SIPTransport", "SIPDNS", "HTTPServer"]),
    ("proxy", "RFC 3261 §16", ["SIPProxy"]),
    ("registrar", "REGISTER, digest, bindings", ["Registrar"]),
    ("push", "push apps and providers", ["Push"]),
    ("calls", "the wake-then-ring call core", ["CallRouting"]),
    ("SIP service", "sockets → transactions → registrar, calls and proxy steps", ["SIPService"]),
    ("storage", "PostgreSQL", ["Storage"]),
    ("HTTP endpoints", "the route table, its middleware and handlers", ["HTTPAPI"]),
    ("composition root", "configuration, wiring, the command line", ["RouseServer"]),
    ("test support", "clients, certificates and databases for tests and benchmarks", ["RouseTestSupport"]),
    ("executables", "the server, the benchmark, the fuzz harnesses", ["rouse", "RouseBench", "SIPParserFuzz", "SIPDifferentialFuzz", "DigestFuzz", "PushParametersFuzz", "HTTPBodyFuzz"]),
]
# Test targets sit above everything and may depend on any target.
TEST_LAYER = len(LAYERS)
# Imports of modules that are not package targets (the toolchain's) are not checked.
IMPORT = re.compile(r"^\s*(?:@testable\s+|@_implementationOnly\s+|@preconcurrency\s+)*(?:(?:public|package|internal|fileprivate|private)\s+)?import\s+(?:(?:struct|class|enum|protocol|func|var|let|typealias)\s+)?([A-Za-z_][A-Za-z0-9_]*)", re.MULTILINE)
BEGIN, END = "<!-- layers:begin -->", "<!-- layers:end -->"


def package(root):
    env = dict(os.environ, ROUSE_FUZZ="1")  # the fuzz harnesses are targets too
    out = subprocess.run(["swift", "package", "dump-package"], cwd=root, env=env, check=True, capture_output=True, text=True).stdout
    targets = {}
    for target in json.loads(out)["targets"]:
        deps = []
        for dependency in target["dependencies"]:
            kind = next(iter(dependency))
            deps.append(dependency[kind][0])
        path = target.get("path") or os.path.join("Tests" if target["type"] == "test" else "Sources", target["name"])
        targets[target["name"]] = {"type": target["type"], "deps": deps, "path": path}
    return targets


def rank_of(name, targets):
    if targets[name]["type"] == "test":
        return TEST_LAYER
    for rank, (_, _, names) in enumerate(LAYERS):
        if name in names:
            return rank
    return None


def drawing(targets):
    lines = ["| layer | targets | each may import |", "| --- | --- | --- |"]
    for layer, purpose, names in LAYERS:
        present = [n for n in names if n in targets]
        if not present:
            continue
        cells = []
        for name in present:
            deps = targets[name]["deps"]
            cells.append(f"`{name}`: " + (", ".join(deps) if deps else "—"))
        label = f"{layer} ({purpose})" if purpose else layer
        lines.append(f"| {label} | {', '.join('`' + n + '`' for n in present)} | {'; '.join(cells)} |")
    lines.append("| tests | every `…Tests` target | anything above |")
    return "\n".join(lines)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    targets = package(root)
    problems = []
    for name, target in sorted(targets.items()):
        rank = rank_of(name, targets)
        if rank is None:
            problems.append(f"{name}: has no layer in scripts/check-layers.py")
            continue
        for dep in target["deps"]:
            dep_rank = rank_of(dep, targets) if dep in targets else None
            if dep_rank is not None and dep_rank >= rank:
                problems.append(f"{name} (layer {rank}) depends on {dep} (layer {dep_rank}): dependencies point down only")
        if target["type"] == "system":
            continue
        declared = set(target["deps"])
        for folder, _, files in os.walk(os.path.join(root, target["path"])):
            for file in sorted(files):
                if not file.endswith(".swift"):
                    continue
                path = os.path.join(folder, file)
                with open(path, encoding="utf-8") as handle:
                    text = handle.read()
                for module in IMPORT.findall(text):
                    if module in targets and module != name and module not in declared:
                        problems.append(f"{os.path.relpath(path, root)} imports {module}, which {name} does not declare")
    doc_path = os.path.join(root, "docs", "architecture.md")
    with open(doc_path, encoding="utf-8") as handle:
        doc = handle.read()
    if BEGIN not in doc or END not in doc:
        problems.append(f"docs/architecture.md has no {BEGIN} … {END} section")
    else:
        head, rest = doc.split(BEGIN, 1)
        drawn, tail = rest.split(END, 1)
        wanted = "\n" + drawing(targets) + "\n"
        if drawn != wanted:
            if "--write" in sys.argv:
                with open(doc_path, "w", encoding="utf-8") as handle:
                    handle.write(head + BEGIN + wanted + END + tail)
            else:
                problems.append("docs/architecture.md's layer table is not the graph Package.swift declares (scripts/check-layers.py --write redraws it)")
    for problem in problems:
        print("check-layers: " + problem, file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"check-layers: {len(targets)} targets, every dependency and import points down")


if __name__ == "__main__":
    main()
