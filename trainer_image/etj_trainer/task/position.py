"""A following job's position in its input, as model state (DESIGN.md, the production
loop): the last file trained whole (a Kafka job: the next offset of every partition) and
the records trained, saved in the same checkpoint as the tables and restored with them,
never committed anywhere first (a Kafka consumer group's commits are never used).

``last_file`` is a name, not an index: files the location's retention deletes do not move
it. It lives where the loop that decides the next file runs (the chief, or the one
process). ``records`` counts every record a training step took, where the steps run (a ps
under ParameterServer): after a restore it is the records the restored tables have
learned from, which is what a test compares with the records written.

State only: it lists no files and decides nothing.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

# The checkpoint key of the position (``tf.train.Checkpoint(input=...)``).
CHECKPOINT_KEY = "input"


class InputPosition(tf.Module):
    """``last_file`` (a string, on the loop's device) and ``records`` (int64, where the
    steps run: create it under the strategy's scope); a Kafka job's ``offsets`` (a string
    on the loop's device: ``etj_trainer.data.kafka.encode_offsets``)."""

    def __init__(self, records: tf.Variable, kafka: bool = False):
        super().__init__(name=CHECKPOINT_KEY)
        with tf.init_scope():
            self.last_file = tf.Variable("", dtype=tf.string, trainable=False, name="last_file")
            self.offsets = (
                tf.Variable("{}", dtype=tf.string, trainable=False, name="offsets")
                if kafka
                else None
            )
        self.records = records

    @staticmethod
    def records_variable() -> tf.Variable:
        return tf.Variable(0, dtype=tf.int64, trainable=False, name="records")

    def variables_by_key(self) -> dict[str, list[Any]]:
        """The saved variables by checkpoint key (``restore_components``' form)."""
        out = {
            f"{CHECKPOINT_KEY}/last_file": [self.last_file],
            f"{CHECKPOINT_KEY}/records": [self.records],
        }
        if self.offsets is not None:
            out[f"{CHECKPOINT_KEY}/offsets"] = [self.offsets]
        return out

    def last(self) -> str:
        return bytes(self.last_file.numpy()).decode()

    def saved_offsets(self) -> str:
        """A Kafka job's offsets as saved (JSON text; "{}" before the first message)."""
        assert self.offsets is not None
        return bytes(self.offsets.numpy()).decode()

    def trained(self) -> int:
        return int(self.records.numpy())
