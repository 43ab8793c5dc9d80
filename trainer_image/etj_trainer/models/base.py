"""What every architecture's tower shares: its inputs, its weights in one variable, MLPs.

A tower is called as ``tower(embeddings, dense, training) -> logits [batch]``, the
signature a user's own tower will have: ``embeddings`` maps each embedding input's name
to its pooled ``[batch, dimension]`` float32 tensor (and, for wideDeep/deepFM, each
input's first-order table lookup, ``[batch, 1]``, under ``linear_table_name(name)``),
``dense`` is ``[batch, n]`` float32 or ``None``.

All of a tower's weights live in one flat variable (``params``, named ``tower``), sliced
into named pieces per call: under ParameterServerStrategy every variable costs a read and
an update round-trip to its ps each step, so one beats several per layer. Initial values
are stateless-random, seeded by the job's seed and a fixed number per piece, so every
process builds the same tower.

This module builds weights and pure forward math; it owns no tables and reads no data.
"""

from __future__ import annotations

from dataclasses import dataclass

import tensorflow as tf

from etj.api.architectures import linear_table_name


@dataclass(frozen=True)
class TowerInputs:
    """What a tower is fed: embedding inputs (name, dimension) in order, whether each has
    a first-order lookup, and the dense width (0: no dense input)."""

    names: tuple[str, ...]
    dims: tuple[int, ...]
    dense: int
    linear: bool = False

    @property
    def width(self) -> int:
        """Width of all embeddings and dense features concatenated."""
        return sum(self.dims) + self.dense

    def linear_names(self) -> list[str]:
        return [linear_table_name(n) for n in self.names] if self.linear else []


@dataclass(frozen=True)
class Piece:
    """One named weight of a tower and its initial value."""

    name: str
    initial: tf.Tensor

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.initial.shape)


def glorot(shape: tuple[int, int], seed: tuple[int, int]) -> tf.Tensor:
    limit = (6.0 / (shape[0] + shape[1])) ** 0.5
    return tf.random.stateless_uniform(shape, seed=seed, minval=-limit, maxval=limit)


def dense_layers(
    prefix: str, width: int, units: list[int], seed: int, first: int
) -> tuple[list[Piece], int]:
    """Kernel and bias of each layer of an MLP ``width -> units...``, the kernel of layer
    ``i`` seeded ``(seed, first + i)``; the pieces and the output width."""
    pieces = []
    for i, n in enumerate(units):
        pieces.append(Piece(f"{prefix}/{i}/kernel", glorot((width, n), (seed, first + i))))
        pieces.append(Piece(f"{prefix}/{i}/bias", tf.zeros([n])))
        width = n
    return pieces, width


def apply_mlp(
    w: dict[str, tf.Tensor], prefix: str, layers: int, x: tf.Tensor, relu_last: bool
) -> tf.Tensor:
    """The MLP ``prefix`` of ``layers`` layers on ``x``: ReLU between layers (and after
    the last one if ``relu_last``)."""
    for i in range(layers):
        x = tf.matmul(x, w[f"{prefix}/{i}/kernel"]) + w[f"{prefix}/{i}/bias"]
        if i < layers - 1 or relu_last:
            x = tf.nn.relu(x)
    return x


def concat_inputs(
    inputs: TowerInputs, embeddings: dict[str, tf.Tensor], dense: tf.Tensor | None
) -> tf.Tensor:
    """The embeddings in input order, then the dense features, side by side."""
    parts = [embeddings[n] for n in inputs.names]
    if inputs.dense:
        assert dense is not None, "the tower takes dense features"
        parts.append(dense)
    return tf.concat(parts, axis=1)


def first_order(inputs: TowerInputs, embeddings: dict[str, tf.Tensor]) -> tf.Tensor:
    """Sum of the first-order lookups, ``[batch]``."""
    return tf.add_n([embeddings[n][:, 0] for n in inputs.linear_names()])


class FlatTower(tf.Module):
    """A tower whose weights are named slices of one flat variable."""

    def __init__(self, name: str, inputs: TowerInputs, pieces: list[Piece]):
        super().__init__(name=name)
        self.inputs = inputs
        self.shapes = [(p.name, p.shape) for p in pieces]
        self.params = tf.Variable(
            tf.concat([tf.reshape(p.initial, [-1]) for p in pieces], axis=0), name="tower"
        )

    def weights(self, params: tf.Tensor | None = None) -> dict[str, tf.Tensor]:
        """Every piece, sliced out of one read of ``params`` (default: the variable)."""
        flat = tf.convert_to_tensor(self.params if params is None else params)
        out, offset = {}, 0
        for name, shape in self.shapes:
            size = 1
            for d in shape:
                size *= d
            out[name] = tf.reshape(flat[offset : offset + size], shape)
            offset += size
        return out

    def __call__(
        self, embeddings: dict[str, tf.Tensor], dense: tf.Tensor | None, training: bool = False
    ) -> tf.Tensor:
        return self.forward(self.weights(), embeddings, dense, training)

    def forward(
        self,
        w: dict[str, tf.Tensor],
        embeddings: dict[str, tf.Tensor],
        dense: tf.Tensor | None,
        training: bool,
    ) -> tf.Tensor:
        """The logits ``[batch]`` from the weights ``w`` (one dict of named pieces)."""
        raise NotImplementedError
