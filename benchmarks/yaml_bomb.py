"""What refusing a YAML alias bomb costs: CPU time and peak memory of ``parse_config`` on
"billion laughs" documents, against reading an ordinary experiment config in the same process.

Each bomb is N levels of N aliases to the level below (N**N strings once expanded). What the API
server does with a ``POST /experiments`` body is this same call.

    .venv/bin/python benchmarks/yaml_bomb.py [--repeat 20]
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from det_airflow.config import parse_config  # noqa: E402
from det_airflow.errors import ConfigError  # noqa: E402


def bomb(levels: int) -> str:
    lines = ["l0: &l0 [" + ",".join(['"lol"'] * levels) + "]"]
    for level in range(1, levels):
        lines.append(f"l{level}: &l{level} [" + ",".join([f"*l{level - 1}"] * levels) + "]")
    return "\n".join(lines) + "\n"


def measure(text: str, repeat: int) -> tuple[float, float, str]:
    """Best CPU seconds, peak MB, and the outcome."""
    best, outcome = float("inf"), ""
    for _ in range(repeat):
        start = time.process_time()
        try:
            parse_config(text)
            outcome = "accepted"
        except ConfigError as exc:
            outcome = str(exc)
        best = min(best, time.process_time() - start)
    tracemalloc.start()
    try:
        parse_config(text)
    except ConfigError:
        pass
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    return best, peak, outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()

    ordinary = (REPO / "examples" / "mnist_pytorch" / "adaptive.yaml").read_text()
    base_s, base_mb, _ = measure(ordinary, args.repeat)
    print(f"parse_config, best CPU time of {args.repeat}; peak memory traced by tracemalloc")
    print(f"{'input':<34} {'bytes':>6} {'CPU ms':>8} {'vs config':>9} {'peak MB':>8}  outcome")
    print(
        f"{'examples/mnist_pytorch/adaptive.yaml':<34} {len(ordinary):>6} {1000 * base_s:>8.2f} {1.0:>9.1f} {base_mb:>8.2f}  accepted"
    )
    for levels in (9, 12, 16):
        text = bomb(levels)
        cpu_s, peak_mb, outcome = measure(text, args.repeat)
        label = f"bomb {levels}x{levels} ({levels}**{levels} values)"
        print(
            f"{label:<34} {len(text):>6} {1000 * cpu_s:>8.2f} {cpu_s / base_s:>9.1f} {peak_mb:>8.2f}  {outcome}"
        )


if __name__ == "__main__":
    main()
