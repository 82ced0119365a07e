"""Extract per-commit histories from github-action-benchmark `data.js` files into corpus JSON.

    python bench/data/real/extract.py GIT_DIR OWNER/NAME REF PATH LICENCE NAME_REGEX [--limit N] [--min-points M]

GIT_DIR is a clone holding the project's GitHub Pages branch REF. Every benchmark whose name
matches NAME_REGEX and has at least M points becomes one file `<owner>-<name>-<slug>.json`
holding the values in the order the action appended them (commit order on the tracked branch),
the commit ids, and the source (repository, branch, path, the branch commit read). Change
points are annotated afterwards (see README.md); an existing file keeps its annotations.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:80]


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("git_dir", "repo", "ref", "path", "licence", "pattern"):
        parser.add_argument(name)
    parser.add_argument("--limit", type=int, default=50)
    parser.add_argument("--min-points", type=int, default=100)
    args = parser.parse_args()
    git = ["git", "-C", args.git_dir]
    commit = subprocess.run([*git, "rev-parse", args.ref], capture_output=True, text=True, check=True).stdout.strip()
    text = subprocess.run([*git, "show", f"{commit}:{args.path}"], capture_output=True, text=True, check=True).stdout
    data = json.loads(text[text.index("{"):].rstrip().rstrip(";"))
    series: dict[tuple[str, str], dict] = {}
    for suite, entries in data["entries"].items():
        for entry in entries:
            for bench in entry["benches"]:
                try:
                    value = float(bench["value"])
                except (TypeError, ValueError):
                    continue  # a failed run ("null"): the commit has no point in this series
                if value != value:
                    continue
                item = series.setdefault((suite, bench["name"]), {"unit": bench.get("unit", ""), "commits": [],
                                                                   "values": [], "tool": entry.get("tool")})
                item["commits"].append((entry.get("commit") or {}).get("id"))
                item["values"].append(value)
    chosen = [(key, item) for key, item in series.items()
              if re.search(args.pattern, key[1]) and len(item["values"]) >= args.min_points]
    for (suite, name), item in chosen[: args.limit]:
        out = HERE / f"{slug(args.repo)}-{slug(name)}.json"
        old = json.loads(out.read_text()) if out.exists() else {}
        tool = item["tool"] or ""
        lower = "bigger" not in tool.lower() and not any(u in item["unit"] for u in ("/s", "/sec"))
        record = {"id": out.stem, "source": {"repository": args.repo, "branch": args.ref, "path": args.path,
                                              "commit": commit},
                  "licence": args.licence, "suite": suite, "benchmark": name, "unit": item["unit"],
                  "direction": "lower_is_better" if lower else "higher_is_better",
                  "values": item["values"], "commits": item["commits"],
                  "change_points": old.get("change_points", []), "annotated": old.get("annotated", False)}
        out.write_text(json.dumps(record, indent=1) + "\n")
        print(f"{out.name}: {len(item['values'])} points")


if __name__ == "__main__":
    main()
