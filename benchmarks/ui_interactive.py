"""UI in a browser: how long the experiment page of 1,000 trials × 1,000 reports takes in headless
Chromium, downsampled as served against every point.

The experiment is built as ``ui_data.py`` builds it, in a fresh SQLite database. The master's real
app serves it (and the built bundle of ``plugins/webui/static``) on 127.0.0.1 through uvicorn, as
Airflow mounts it at ``/det``; only the login is replaced (everyone is the admin). Debian's
``chromium``, driven by Playwright, then, each ``--repeat`` times, in a fresh page:

- open: from ``goto`` of the experiment page to its trials table showing every trial;
- curves: from the click on the Curves tab to the chart holding every trial's series;
- log scale: from the click on "log y" to the chart redrawn (input to paint, the page's
  responsiveness once loaded);

and the size of the curves answer.

Baseline: the same pages with the curves request asking for every point (``points=5000``: nothing
downsampled). Times include the server's work for each request. Medians and ranges are printed.

    .venv/bin/python benchmarks/ui_interactive.py [--trials 1000] [--reports 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(REPO), str(BENCH)]
CHROMIUM = "/usr/bin/chromium"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve(folder: Path, trials: int, reports: int, port: int) -> tuple[int, Any]:
    """Builds the experiment and starts the master on ``port``; answers (experiment id, server)."""
    os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{folder / 'airflow.db'}"
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(folder / "dags")
    os.environ["AIRFLOW__API__BASE_URL"] = f"http://127.0.0.1:{port}"
    import uvicorn
    from airflow.api_fastapi.app import create_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi import FastAPI
    from ui_data import build

    from det_airflow.master.app import create_app
    from det_airflow.master.db import get_database
    from det_airflow.webui import pages

    db = get_database()
    db.migrate()
    started = time.perf_counter()
    experiment_id = build(db, trials, reports)
    print(f"built {trials} trials x {reports} reports in {time.perf_counter() - started:.0f} s")
    create_auth_manager()
    master = create_app()
    master.include_router(pages.router())

    async def admin() -> SimpleAuthManagerUser:
        return SimpleAuthManagerUser(username="admin", role="admin")

    master.dependency_overrides[get_user] = admin
    root = FastAPI()
    root.mount("/det", master)
    server = uvicorn.Server(uvicorn.Config(root, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return experiment_id, server


def measure(browser: Any, url: str, trials: int, every_point: bool) -> dict[str, float]:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    if every_point:
        page.route("**/curves?*", lambda route: route.continue_(url=route.request.url + "&points=5000"))
    sizes: list[int] = []
    # The header, not the body: Chromium drops a large body from its cache once the page moves on.
    page.on(
        "response",
        lambda response: (
            sizes.append(int(response.headers.get("content-length", 0)))
            if "/curves?" in response.url
            else None
        ),
    )
    timeout = 120_000
    started = time.perf_counter()
    page.goto(url)
    rows = page.get_by_test_id("trials-table").get_by_test_id("trial-row")
    rows.nth(trials - 1).wait_for(state="attached", timeout=timeout)
    opened = time.perf_counter() - started

    started = time.perf_counter()
    page.get_by_role("tab", name="Curves").click()
    page.wait_for_selector(f"[data-testid=curves][data-series='{trials}'] canvas", timeout=timeout)
    page.evaluate("() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")
    curves = time.perf_counter() - started

    started = time.perf_counter()
    page.get_by_test_id("log-y").click()
    page.evaluate("() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")
    log_scale = time.perf_counter() - started
    page.close()
    return {"open": opened, "curves": curves, "log scale": log_scale, "answer MB": sum(sizes) / 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--reports", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if not (REPO / "plugins" / "webui" / "static" / "index.html").is_file():
        raise SystemExit("the web UI is not built: run `make ui` first")
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="det-ui-bench-") as tmp:
        port = free_port()
        experiment_id, server = serve(Path(tmp), args.trials, args.reports, port)
        url = f"http://127.0.0.1:{port}/det/ui/#/experiments/{experiment_id}"
        runs: dict[str, list[dict[str, float]]] = {"downsampled": [], "every point": []}
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
            measure(browser, url, args.trials, every_point=False)  # warm-up: caches, JIT
            for _ in range(args.repeat):
                for name in runs:
                    runs[name].append(measure(browser, url, args.trials, every_point=name == "every point"))
            browser.close()
        server.should_exit = True
    print(
        f"{args.trials} trials x {args.reports} reports, medians of {args.repeat} (min-max), "
        f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs"
    )
    for step in ("open", "curves", "log scale"):
        cells = []
        for name, results in runs.items():
            values = [r[step] for r in results]
            cells.append(f"{name} {statistics.median(values):6.2f} s ({min(values):.2f}-{max(values):.2f})")
        print(f"{step:10} " + "   ".join(cells))
    for name, results in runs.items():
        total = statistics.median(r["open"] + r["curves"] for r in results)
        size = statistics.median(r["answer MB"] for r in results)
        print(f"{name}: curves answer {size:.1f} MB; open + curves {total:.2f} s")


if __name__ == "__main__":
    main()
