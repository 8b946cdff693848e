"""bert_tf: BERT pretraining, fine-tuning and serving in TensorFlow 2 / Keras 3."""

from bert_tf.configs import BertConfig, PRESETS, get_preset

__all__ = ["BertConfig", "PRESETS", "get_preset"]
