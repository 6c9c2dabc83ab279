"""`@` mentions: listing a project of 100,000 files (a .gitignore that ignores a node_modules of 5,000 more) and
searching it fuzzily as a person types, one letter at a time, with the index the terminal session keeps.

Run: `PYTHONPATH=. python benchmarks/mentions.py [--files 100000]` (in a temporary directory).
"""

import argparse
import os
import statistics
import tempfile
import time

from anges.util.file_index import FileIndex, project_files

QUERIES = ("tokenizer", "p37m12f4", "pkg49/mod39/file_49")


def make_project(root: str, files: int) -> None:
    per_folder = 50
    for number in range(files):
        folder = os.path.join(root, f"pkg{number // (per_folder * 40)}", f"mod{number // per_folder % 40}")
        if number % per_folder == 0:
            os.makedirs(folder, exist_ok=True)
        name = "tokenizer.py" if number == files // 2 else f"file_{number % per_folder}.py"
        open(os.path.join(folder, name), "w").close()
    os.makedirs(os.path.join(root, "node_modules", "x"))
    for number in range(5000):
        open(os.path.join(root, "node_modules", "x", f"m{number}.js"), "w").close()
    with open(os.path.join(root, ".gitignore"), "w") as file:
        file.write("node_modules/\n*.pyc\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        make_project(root, args.files)
        listing = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            files = project_files(root)
            listing.append(time.perf_counter() - start)
        print(f"listing {len(files):,} files: median {statistics.median(listing) * 1000:.0f} ms, "
              f"max {max(listing) * 1000:.0f} ms")
        for query in QUERIES:
            keys = []
            for _ in range(args.repeat):
                index = FileIndex(files)
                for end in range(2, len(query) + 1):  # the session searches from the second letter on
                    start = time.perf_counter()
                    found = index.search(query[:end])
                    keys.append(time.perf_counter() - start)
            print(f"typing {query!r}: per key median {statistics.median(keys) * 1000:.1f} ms, "
                  f"max {max(keys) * 1000:.1f} ms; first: {found[0] if found else None}")


if __name__ == "__main__":
    main()
