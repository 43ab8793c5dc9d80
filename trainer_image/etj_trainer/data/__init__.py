"""Input: from files (or the synthetic generator) to batches of model input.

One module per input format (``delimited``, ``tfrecord``, ``parquet``), what the formats
share (``records``: finding files, numbering records, ``DataError``), the feature code
every format uses (``features``: hashing ids to table rows, dense transforms), the
``tf.data`` pipelines (``pipeline``: synthetic data, the formats, sharding per worker,
validation data), and the writers of files to try a job on (``datagen``, ``clicklogs``;
``daily``: days of one world, for a daily chain).

The bottom layer of the trainer (the import-linter contract in pyproject.toml): it must
not import the model code (``etj_trainer.models``) or the task code (``etj_trainer.task``),
and knows nothing of strategies beyond reading its own share of the files. Importing the
package itself loads no TensorFlow (``clicklogs`` runs without it).
"""
