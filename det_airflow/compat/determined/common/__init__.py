"""``determined.common``: the utilities Determined training code imports from it."""

from . import util as util

__all__ = ["util"]
