"""bert_tf: BERT pretraining, fine-tuning and serving in TensorFlow 2 / Keras 3."""

import os as _os
import platform as _platform
import sys as _sys

# oneDNN's CPU kernels: on Linux, TensorFlow switches them on by itself only on x86 CPUs with
# AVX-512 VNNI/BF16, AVX-VNNI or AMX, and runs Eigen's elsewhere. On an AVX2-only CPU (AMD EPYC
# Zen 3, 2 cores) oneDNN ran BERT-Mini's float32 pretraining step 1.2x faster (bench/onednn_cpu.py).
# TensorFlow reads the switch once, when it loads: it is set here, before the imports below load
# it, unless TensorFlow is already loaded; a TF_ENABLE_ONEDNN_OPTS the user set wins.
if (_sys.platform.startswith("linux") and _platform.machine() == "x86_64"
        and "tensorflow" not in _sys.modules):
    _os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

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
