"""A synthetic multi-fidelity problem for searcher benchmarks (ours; no data set, no downloads).

Six hyperparameters of a made-up training run map to a point ``x`` in ``[0, 1]^6``:

- the loss a trial converges to is the Hartmann-6 function at ``x``, rescaled to ``[0.05, ~1.05]``
  (global minimum 0.05 at Hartmann's optimum; many local minima),
- it gets there along a power-law learning curve ``f(u) = f_inf + gap * (1 + u/tau)**-alpha``
  whose speed ``alpha`` grows with the learning rate and falls with dropout, and whose initial
  ``gap`` grows with the width, so curves cross: a fast starter is not always the best finisher,
- each report adds Gaussian noise that shrinks with training, seeded by the trial and the units, so
  a run is reproducible.

    >>> problem = MultiFidelityProblem(length=243)
    >>> round(problem.final_loss(problem.optimum_hparams()), 3)
    0.05
"""

from __future__ import annotations

import math
import random
from typing import Any

from det_airflow.config._types import CategoricalHP, DoubleHP, HParamGroup, IntHP, LogHP

# Hartmann-6 (Surjanovic & Bingham's test-function library): minimum -3.32237.
_ALPHA = (1.0, 1.2, 3.0, 3.2)
_A = (
    (10, 3, 17, 3.5, 1.7, 8),
    (0.05, 10, 17, 0.1, 8, 14),
    (3, 3.5, 1.7, 10, 17, 8),
    (17, 8, 0.05, 10, 0.1, 14),
)
_P = (
    (0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886),
    (0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991),
    (0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650),
    (0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381),
)
_HARTMANN_MIN = -3.32237
_HARTMANN_ARGMIN = (0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573)


def hartmann6(x: tuple[float, ...]) -> float:
    return -sum(
        a * math.exp(-sum(aij * (xj - pij) ** 2 for aij, xj, pij in zip(ai, x, pi, strict=True)))
        for a, ai, pi in zip(_ALPHA, _A, _P, strict=True)
    )


#: The search space, as an experiment config would write it.
HPARAMS: HParamGroup = {
    "optimizer": {
        "lr": LogHP(-4.0, -1.0),
        "momentum": DoubleHP(0.5, 0.99),
        "weight_decay": LogHP(-6.0, -2.0),
    },
    "model": {"width": IntHP(16, 512), "dropout": DoubleHP(0.0, 0.5)},
    "warmup": IntHP(0, 100),
    "batch_size": CategoricalHP((32,)),
}


class MultiFidelityProblem:
    """Learning curves over ``length`` training units; lower loss is better."""

    def __init__(self, *, length: int, noise: float = 0.01) -> None:
        self.length = length
        self.noise = noise
        self.tau = length / 500

    @staticmethod
    def point(hparams: dict[str, Any]) -> tuple[float, ...]:
        """The hyperparameters as a point of the unit cube (log ones by exponent)."""
        opt, model = hparams["optimizer"], hparams["model"]
        return (
            (math.log10(opt["lr"]) + 4.0) / 3.0,
            (opt["momentum"] - 0.5) / 0.49,
            (model["width"] - 16) / 496,
            model["dropout"] / 0.5,
            (math.log10(opt["weight_decay"]) + 6.0) / 4.0,
            hparams["warmup"] / 100,
        )

    def final_loss(self, hparams: dict[str, Any]) -> float:
        """The loss the trial converges to (noiseless)."""
        return 0.05 + (hartmann6(self.point(hparams)) - _HARTMANN_MIN) / -_HARTMANN_MIN

    def loss(self, hparams: dict[str, Any], units: int, seed: int = 0) -> float:
        """The loss reported after ``units`` of training, with seeded noise."""
        x = self.point(hparams)
        final = self.final_loss(hparams)
        gap = 0.5 + 1.0 * x[2]
        speed = 0.35 + 1.0 * x[0] - 0.3 * x[3]
        clean = final + gap * (1 + units / self.tau) ** -speed
        sd = self.noise * (1 + 3 / math.sqrt(1 + units))
        return clean + random.Random(f"{seed}/{units}").gauss(0, sd)

    def optimum_hparams(self) -> dict[str, Any]:
        x = _HARTMANN_ARGMIN
        return {
            "optimizer": {
                "lr": 10 ** (x[0] * 3 - 4),
                "momentum": 0.5 + 0.49 * x[1],
                "weight_decay": 10 ** (x[4] * 4 - 6),
            },
            "model": {"width": 16 + 496 * x[2], "dropout": 0.5 * x[3]},
            "warmup": 100 * x[5],
            "batch_size": 32,
        }
