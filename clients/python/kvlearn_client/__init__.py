"""kvlearn_client: the Python retention client of the kvlearn sidecar (a
deadline on every call, a local LRU when the sidecar is slow or down).

Needs the stubs generated from proto/kvlearn/v1/retention.proto (CMake target
`kvlearn_python_stubs`, into build/clients/python) on PYTHONPATH; see
docs/clients.md.
"""

from .client import (AdmitResult, Block, RankResult, RetentionClient,
                     RetentionClientStats)
from .fallback_lru import FallbackBlock, FallbackLru, FallbackVictim

__all__ = ["AdmitResult", "Block", "FallbackBlock", "FallbackLru", "FallbackVictim", "RankResult",
           "RetentionClient", "RetentionClientStats"]
