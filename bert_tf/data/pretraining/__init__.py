"""Pretraining data, one concern a module.

  documents  corpora read into documents of tokenized sentences (word starts for whole-word masking)
  instances  the original's NSP pair recipe (its random draws)
  records    the TFRecord feature spec with the original names, write and parse
  dataset    the tf.data pipelines that feed `BertPretrainer` (static, dynamic, text, text pairs)
  writer     corpora to TFRecords (`create_pretraining_data.py`)

Packing (`bert_tf.data.packing`) and masking (`bert_tf.data.masking`) serve both
the writer and the tf.data pipelines.
"""
