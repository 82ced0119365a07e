"""Screenshots of a running dashboard in Debian's chromium (through Playwright), for the README.

    .venv/bin/python scripts/screenshot.py http://127.0.0.1:8321 / /alerts --out docs/img --prefix demo
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path

from playwright.sync_api import sync_playwright

CHROMIUM = "/usr/bin/chromium"


def file_name(prefix: str, path: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-") or "home"
    return f"{prefix}-{slug}.png"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base_url")
    parser.add_argument("paths", nargs="+", help="dashboard paths, e.g. / /alerts")
    parser.add_argument("--out", type=Path, default=Path("docs/img"))
    parser.add_argument("--prefix", default="dashboard")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=900)
    parser.add_argument("--full-page", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM)
        page = browser.new_page(viewport={"width": args.width, "height": args.height})
        for path in args.paths:
            response = page.goto(args.base_url.rstrip("/") + path, wait_until="networkidle")
            if response is None or not response.ok:
                raise SystemExit(f"{path}: HTTP {response.status if response else 'no response'}")
            target = args.out / file_name(args.prefix, path)
            page.screenshot(path=str(target), full_page=args.full_page)
            print(target)
        browser.close()


if __name__ == "__main__":
    main()
