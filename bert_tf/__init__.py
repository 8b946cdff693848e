"""bert_tf: BERT pretraining, fine-tuning and serving in TensorFlow 2 / Keras 3."""

from bert_tf.checkpoints import load_encoder, load_pretrainer, save_model_dir
from bert_tf.configs import PRESETS, BertConfig, get_preset
from bert_tf.modeling.encoder import BertEncoder
from bert_tf.modeling.losses import masked_lm_loss, next_sentence_loss, pretraining_loss
from bert_tf.modeling.pretrainer import BertPretrainer

__all__ = [
    "BertConfig", "PRESETS", "get_preset",
    "BertEncoder", "BertPretrainer",
    "masked_lm_loss", "next_sentence_loss", "pretraining_loss",
    "load_encoder", "load_pretrainer", "save_model_dir",
]
