"""The 3D map's projection: a position per memory from its embedding, kept by
curation.

PCA, not UMAP: a linear basis (a mean, three axes, three scales) projects a new memory with three
inner products in the writer's own transaction (projection_repo.project), so a memory has its
position the moment it is written, and retrieval can place one on read with the same formula.
Measured at 10,000 memories on this 2-core box (docs/PERFORMANCE.md, "3D map"): umap-learn fitted
in 10 s warm but 90 s in a fresh process (numba compiles first), and placing 100 new memories with
its transform took 80 s the first time, against 0.26 s for the whole PCA fit; it would also add
numba, llvmlite, pynndescent and scikit-learn to the install, and keep a model with its neighbour
index in curation's memory.

One global basis, not one per scope: a map that shows several scopes at once needs them in one
space, and a basis (a mean and three directions over thousands of vectors) tells nothing about any
one memory. It is refitted when the store grew by HM_VIZ_REFIT_GROWTH since the last fit, after
HM_VIZ_REFIT_HOURS, or when the embedding model changed (a reindex); a refit recomputes every
position in one transaction.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import asyncpg
import numpy as np

from services.curation import projection_repo
from services.curation.projection_repo import Basis, State

__all__ = ["MIN_FIT", "SAMPLE", "Projector", "fit_pca"]

log = logging.getLogger(__name__)

# A basis is fitted on a random sample this large: at 5,000 vectors the axes of a 100k store
# settle (the three leading directions of a sentence-embedding space are broad), and the fit
# (a 384x384 covariance and its eigenvectors) takes well under a second.
SAMPLE = 5_000
# Two vectors make a direction; with fewer the map has nothing to lay out.
MIN_FIT = 2
# Positions written per pass for memories that have none (a bounded pass; the next one goes on).
MISSING_PER_PASS = 20_000
# Coordinates are divided by this quantile of their absolute values in the sample, so most of the
# map falls in [-1, 1] and a few outliers do not squash everything else into the middle.
SCALE_QUANTILE = 0.98
# A pass with no basis yet comes back this soon: a new store gets its map within seconds.
FIRST_FIT_RETRY_S = 2.0
# How often a pass looks for memories with no position and for positions of deleted memories:
# each look reads the whole table. Every write positions its memory in its own transaction and a
# refit recomputes every position, so between looks nothing is expected; the look is a safety net
# (made too by the pass after a refit, and after a look that hit MISSING_PER_PASS).
SWEEP_EVERY_S = 3600.0


def fit_pca(vectors: np.ndarray, model_id: str, fitted_on: int) -> Basis:
    """The three leading principal axes of `vectors` (rows), signed so that each axis's largest
    loading is positive (a refit of a similar store does not mirror the map)."""
    started = time.perf_counter()
    x = vectors.astype(np.float64)
    mean = x.mean(axis=0)
    centred = x - mean
    # Eigenvectors of the covariance (dims x dims) cost less than an SVD of the sample when the
    # sample has more rows than dimensions, the usual case.
    values, vectors_ = np.linalg.eigh(centred.T @ centred)
    axes = vectors_[:, np.argsort(values)[::-1][:3]].T
    for k in range(3):
        if axes[k][np.argmax(np.abs(axes[k]))] < 0:
            axes[k] = -axes[k]
    coords = centred @ axes.T
    scales = np.quantile(np.abs(coords), SCALE_QUANTILE, axis=0) if len(coords) else np.ones(3)
    scales = np.where(scales > 1e-9, scales, 1.0)
    return Basis(
        method="pca",
        model_id=model_id,
        mean=mean.astype(np.float32),
        axes=axes.astype(np.float32),
        scales=scales.astype(np.float32),
        fitted_on=fitted_on,
        sample=len(vectors),
        fit_ms=(time.perf_counter() - started) * 1000,
    )


@dataclass(frozen=True)
class Pass:
    refitted: bool
    projected: int
    dropped: int


class Projector:
    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        refit_growth: float,
        refit_hours: float,
        sweep_every_s: float = SWEEP_EVERY_S,
    ) -> None:
        self.pool = pool
        self.refit_growth = refit_growth
        self.refit_hours = refit_hours
        self.sweep_every_s = sweep_every_s
        # time.monotonic() of the last sweep; None: due now. Not at start: every write path
        # (repo.insert_memories) positions what it writes, and a start must not read the table.
        self._swept_at: float | None = time.monotonic()

    def due(self, s: State, now: datetime) -> bool:
        """Whether the basis must be (re)fitted now."""
        if s.model_id is None or s.vectors < MIN_FIT:
            return False
        if s.basis_id is None or (s.basis_model, s.basis_dims) != (s.model_id, s.dims):
            return True
        if s.vectors >= s.fitted_on * (1 + self.refit_growth):
            return True
        return s.fitted_at is not None and now - s.fitted_at >= timedelta(hours=self.refit_hours)

    async def refit(self, s: State) -> int:
        async with self.pool.acquire() as conn:
            sample = await projection_repo.sample_vectors(conn, SAMPLE)
        assert s.model_id is not None
        basis = await asyncio.to_thread(fit_pca, sample, s.model_id, s.vectors)
        async with self.pool.acquire() as conn:
            basis_id = await projection_repo.insert_basis(conn, basis)
        log.info(
            "3D map: fitted basis %d (PCA) on %d of %d vectors in %.0f ms; every position recomputed",
            basis_id,
            basis.sample,
            s.vectors,
            basis.fit_ms,
        )
        return basis_id

    async def refresh(self) -> Pass:
        """One pass: refit when due, else (at most every `sweep_every_s`) position what has no
        position and drop the positions of deleted memories."""
        async with self.pool.acquire() as conn:
            s = await projection_repo.state(conn)
        refitted = self.due(s, datetime.now(UTC))
        projected = dropped = 0
        if refitted:
            await self.refit(s)
            # A memory written while the refit ran may have been positioned under the old basis
            # (or none): the next pass looks.
            self._swept_at = None
        elif self._swept_at is None or time.monotonic() - self._swept_at >= self.sweep_every_s:
            async with self.pool.acquire() as conn:
                projected = await projection_repo.project_missing(conn, MISSING_PER_PASS)
                dropped = await projection_repo.drop_orphans(conn)
            # A full pass leaves more behind it: the next pass goes on at once.
            self._swept_at = None if projected >= MISSING_PER_PASS else time.monotonic()
        return Pass(refitted, projected, dropped)

    async def run(self, every_s: float) -> None:
        """`refresh` now and every `every_s` seconds (sooner while there is no basis yet); a
        failed pass is logged and retried."""
        while True:
            wait = every_s
            try:
                await self.refresh()
                async with self.pool.acquire() as conn:
                    if (await projection_repo.state(conn)).basis_id is None:
                        wait = min(every_s, FIRST_FIT_RETRY_S)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("3D map projection pass failed; will retry in %.0f s", every_s)
            await asyncio.sleep(wait)
