"""UI in a browser: how long the Compare page of 10 experiments × 100 trials × 10,000 reports takes
to become interactive in headless Chromium.

Each experiment's trials and their packed metric numbers (``det_metric_chunks``, what the curves
route reads) are written straight into a fresh SQLite master database; the per-report metric rows,
which the Compare page never reads, are left out to keep the build short. The master's real app
serves them (and the built bundle of ``plugins/webui/static``) on 127.0.0.1 through uvicorn, as
Airflow mounts it at ``/det``; only the login is replaced (everyone is the admin). Debian's
``chromium``, driven by Playwright, then, each ``--repeat`` times, in a fresh page:

- open: from ``goto`` of ``#/compare?experiments=...`` (the link a person shares) to the chart
  holding every trial's series of every experiment, painted (each experiment's curves are one
  request, all sent at once);
- log scale: from the click on "Log scale" to the chart redrawn;

and the size of the curves answers. Medians and ranges are printed; the target is under 2 s.

    .venv/bin/python benchmarks/ui_compare.py [--experiments 10] [--trials 100] [--reports 10000]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(REPO), str(BENCH)]

from ui_interactive import CHROMIUM, free_port  # noqa: E402

START = datetime(2026, 1, 1, tzinfo=UTC)
PAINTED = "() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))"


def build(db: Any, experiments: int, trials: int, reports: int) -> list[int]:
    """``experiments`` finished random searches of ``trials`` trials, each reporting ``loss`` and
    ``accuracy`` ``reports`` times; the experiments differ in their batch size."""
    from det_airflow.master import metric_points, schema

    rng = random.Random(1)
    ids = []
    for e in range(experiments):
        config = {
            "name": f"compare-bench-{e}",
            "entrypoint": "python3 train.py",
            "hyperparameters": {
                "lr": {"type": "log", "base": 10, "minval": -4, "maxval": -1},
                "layers": {"type": "int", "minval": 1, "maxval": 4},
                "global_batch_size": 32 * (e + 1),
            },
            "searcher": {
                "name": "random",
                "metric": "loss",
                "max_trials": trials,
                "max_length": {"batches": reports * 10},
            },
        }
        with db.begin() as conn:
            experiment_id = int(
                conn.execute(
                    schema.experiments.insert().values(
                        name=config["name"],
                        owner="admin",
                        labels=[],
                        state="COMPLETED",
                        config=config,
                        config_yaml="",
                        resource_pool="default_pool",
                        searcher_name="random",
                        search_done=True,
                        progress=1.0,
                        start_time=START,
                        archived=False,
                        dag_id=f"det_exp_compare_{e}",
                    )
                ).inserted_primary_key[0]
            )
            for i in range(trials):
                final = 0.05 + rng.random()
                trial_id = int(
                    conn.execute(
                        schema.trials.insert().values(
                            experiment_id=experiment_id,
                            request_id=i,
                            slot=i,
                            state="COMPLETED",
                            hparams={
                                "lr": 10 ** rng.uniform(-4, -1),
                                "layers": rng.randint(1, 4),
                                "global_batch_size": 32 * (e + 1),
                            },
                            trial_seed=i,
                            start_time=START,
                            best_validation=final,
                            best_validation_steps=reports * 10,
                            summary={
                                "validation": {
                                    "steps_completed": reports * 10,
                                    "loss": final,
                                    "accuracy": 0.9,
                                }
                            },
                        )
                    ).inserted_primary_key[0]
                )
                metric_points.store(
                    conn,
                    trial_id,
                    (
                        {
                            "group": "validation",
                            "steps_completed": (k + 1) * 10,
                            "metrics": {
                                "loss": final + math.exp(-k / 1500) + rng.gauss(0, 0.02),
                                "accuracy": 0.9,
                            },
                            "report_time": START + timedelta(seconds=k * 3),
                        }
                        for k in range(reports)
                    ),
                )
        ids.append(experiment_id)
    return ids


def serve(folder: Path, port: int, experiments: int, trials: int, reports: int) -> tuple[list[int], Any]:
    """Builds the experiments and starts the master on ``port``; answers (experiment ids, server)."""
    os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{folder / 'airflow.db'}"
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(folder / "dags")
    os.environ["AIRFLOW__API__BASE_URL"] = f"http://127.0.0.1:{port}"
    import uvicorn
    from airflow.api_fastapi.app import create_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi import FastAPI

    from det_airflow.master.app import create_app
    from det_airflow.master.db import get_database
    from det_airflow.webui import pages

    db = get_database()
    db.migrate()
    started = time.perf_counter()
    ids = build(db, experiments, trials, reports)
    print(
        f"built {experiments} x {trials} trials x {reports} reports in {time.perf_counter() - started:.0f} s"
    )
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
    return ids, server


def measure(browser: Any, url: str, series: int) -> dict[str, float]:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    sizes: list[int] = []
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
    page.wait_for_selector(f"[data-testid=compare-curves][data-series='{series}'] canvas", timeout=timeout)
    page.evaluate(PAINTED)
    opened = time.perf_counter() - started

    started = time.perf_counter()
    page.get_by_test_id("log-y").click()
    page.evaluate(PAINTED)
    log_scale = time.perf_counter() - started
    page.close()
    return {"open": opened, "log scale": log_scale, "answer MB": sum(sizes) / 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=10)
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--reports", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if not (REPO / "plugins" / "webui" / "static" / "index.html").is_file():
        raise SystemExit("the web UI is not built: run `make ui` first")
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="det-ui-compare-") as tmp:
        port = free_port()
        ids, server = serve(Path(tmp), port, args.experiments, args.trials, args.reports)
        url = f"http://127.0.0.1:{port}/det/ui/#/compare?experiments={','.join(map(str, ids))}"
        series = args.experiments * args.trials
        runs = []
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
            first = measure(browser, url, series)  # the server's first answers: nothing cached yet
            for _ in range(args.repeat):
                runs.append(measure(browser, url, series))
            browser.close()
        server.should_exit = True
    print(
        f"{args.experiments} experiments x {args.trials} trials x {args.reports} reports, "
        f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs"
    )
    print(f"first open (server cache cold) {first['open']:.2f} s")
    for step in ("open", "log scale"):
        values = [r[step] for r in runs]
        print(
            f"{step:10} median of {args.repeat} {statistics.median(values):6.2f} s "
            f"({min(values):.2f}-{max(values):.2f})"
        )
    print(f"curves answers {statistics.median(r['answer MB'] for r in runs):.1f} MB in all")


if __name__ == "__main__":
    main()
