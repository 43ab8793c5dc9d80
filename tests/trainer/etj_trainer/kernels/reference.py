"""The disk table in NumPy: what its kernels must compute, for the tests that drive them."""

from __future__ import annotations

import numpy as np

from etj_trainer.kernels.disk_table import slot_width

EPS = np.float32(1e-7)
SLOT_INIT = 0.1


class Reference:
    """The table in NumPy float32, updated as the kernel says it updates (one row at a
    time, in order; the row-wise mean of squares summed left to right)."""

    def __init__(self, rows: int, dim: int, optimizer: str) -> None:
        self.optimizer = optimizer
        self.w = np.zeros((rows, dim), np.float32)
        self.s = np.full((rows, slot_width(optimizer, dim)), SLOT_INIT, np.float32)

    def apply(self, ids: np.ndarray, grads: np.ndarray, lr: float) -> None:
        lr32 = np.float32(lr)
        for r, g in zip(ids, grads, strict=True):
            if self.optimizer == "sgd":
                self.w[r] = self.w[r] - g * lr32
            elif self.optimizer == "adagrad":
                self.s[r] = self.s[r] + g * g
                self.w[r] = self.w[r] - lr32 * g / (np.sqrt(self.s[r]) + EPS)
            else:
                total = np.float32(0.0)
                for x in g * g:
                    total = np.float32(total + x)
                self.s[r, 0] = self.s[r, 0] + total / np.float32(len(g))
                self.w[r] = self.w[r] - lr32 * g / (np.sqrt(self.s[r, 0]) + EPS)
