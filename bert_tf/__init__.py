"""bert_tf: BERT pretraining, fine-tuning and serving in TensorFlow 2 / Keras 3."""

from bert_tf.checkpoints import (load_encoder, load_pretrainer, load_task_model, load_weights,
                                 save_hf_dir, save_keras_hub_preset, save_model_dir)
from bert_tf.configs import PRESETS, BertConfig, get_preset
from bert_tf.data.masking import MaskedLmMasker
from bert_tf.data.packing import BertPacker, pack_segments
from bert_tf.data.tokenization import BertTokenizer
from bert_tf.modeling.crf import CRF
from bert_tf.modeling.encoder import BertEncoder
from bert_tf.modeling.heads import ClassificationHead
from bert_tf.modeling.losses import masked_lm_loss, next_sentence_loss, pretraining_loss
from bert_tf.modeling.pretrainer import BertPretrainer
from bert_tf.modeling.task_models import BertClassifier, BertSpanLabeler, BertTagger

__all__ = [
    "BertConfig", "PRESETS", "get_preset",
    "BertEncoder", "BertPretrainer", "BertClassifier", "BertTagger", "BertSpanLabeler",
    "ClassificationHead", "CRF",
    "BertTokenizer", "BertPacker", "pack_segments", "MaskedLmMasker",
    "masked_lm_loss", "next_sentence_loss", "pretraining_loss",
    "load_encoder", "load_pretrainer", "load_task_model", "load_weights", "save_model_dir",
    "save_hf_dir", "save_keras_hub_preset",
]
