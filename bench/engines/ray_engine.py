"""Ray as an engine of scaldiag.engines' shape, for the benchmark only: measured against Dask and
not
kept in scaldiag (docs/engines.md says why). It was scaldiag/engines.py's Ray engine before that
choice; its error path is kept so the comparison is of equals.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any


class RayEngine:
    """Ray tasks of one CPU each."""

    name = "ray"

    def __init__(self, ray):
        self.ray = ray
        self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))

    def map(self, fn: Callable[[Any], Any], items: list) -> list:
        ray = self.ray
        task = ray.remote(num_cpus=1, max_retries=0)(fn)
        refs = [task.remote(item) for item in items]
        try:
            pending = list(refs)
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                ray.get(done)  # raises the item's error as soon as it is known
            return ray.get(refs)
        except BaseException as error:
            for ref in refs:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
            cause = getattr(error, "cause", None)  # RayTaskError wraps the item's own exception
            if isinstance(error, ray.exceptions.RayTaskError) and isinstance(cause, BaseException):
                raise cause from error
            raise


@contextlib.contextmanager
def open_ray(workers: int) -> Iterator[RayEngine]:
    """A local Ray of ``workers`` CPUs, started here and shut down on exit."""
    import ray

    ray.init(
        num_cpus=workers, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False
    )
    try:
        yield RayEngine(ray)
    finally:
        ray.shutdown()
