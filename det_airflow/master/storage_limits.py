"""How large a file a trial stores through the master may be (master/routes_storage.py), and which
requests carry one: the body limit lets them past its usual size, as they go to disk as they arrive."""

from __future__ import annotations

import re

# The largest file a trial may store through the master, and the disk the master keeps free beside
# the files it is receiving (each is written to a temporary file, then sent to the store).
FILE_LIMIT = 32 * 1024**3
SPOOL_RESERVE = 1024**3
# PUT .../runtime/trials/<id>/storage/{checkpoints/<uuid>,tensorboard}/files/<path>
_UPLOAD = re.compile(r"/runtime/trials/\d+/storage/(?:checkpoints/[^/]+|tensorboard)/files/")


def is_upload(method: str, path: str) -> bool:
    """Whether a request stores a trial's file."""
    return method == "PUT" and _UPLOAD.search(path) is not None
