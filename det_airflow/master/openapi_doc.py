"""The master's OpenAPI document as a file in the repository: the contract that the web UI's
TypeScript types are generated from (``plugins/webui/ui/src/generated/``).

    python -m det_airflow.master.openapi_doc           # rewrite the committed document
    python -m det_airflow.master.openapi_doc --check   # exit 1 when it differs from the routes

``make api-types`` runs the first and then the UI's ``npm run gen:api``. Building the app reads no
database and needs no running Airflow.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from det_airflow.master.app import create_app

# det_airflow/master/ lies two folders below the repository root.
DOCUMENT_PATH = Path(__file__).resolve().parents[2] / "plugins/webui/ui/src/generated/openapi.json"
REGENERATE_COMMAND = "make api-types"


def document() -> dict[str, Any]:
    """The OpenAPI document of every route the master serves."""
    return create_app().openapi()


def render(doc: dict[str, Any]) -> str:
    """The document as the committed file holds it: sorted keys and a fixed indent, so the same
    routes always give the same bytes and a change shows as a readable diff."""
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the det master's OpenAPI document.")
    parser.add_argument("--output", type=Path, default=DOCUMENT_PATH, help="default: %(default)s")
    parser.add_argument("--check", action="store_true", help="only say whether the file is up to date")
    args = parser.parse_args(argv)
    text = render(document())
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else None
        if current != text:
            print(
                f"{args.output} differs from the master's routes: run {REGENERATE_COMMAND}", file=sys.stderr
            )
            return 1
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
