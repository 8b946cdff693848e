"""SavedModel export for TensorFlow Serving: raw text in, task predictions out.

`export_saved_model` turns any model directory the project writes (pretraining
output or converted checkpoint, classifier, tagger, SQuAD span model) into
`EXPORT_DIR/NAME/VERSION/`, the layout TF Serving watches. The signatures:

- `serving_default`: tf.string `text` [batch] (and `text_pair` for pair
  classifiers and SQuAD, where it is the context). Tokenization (WordPiece,
  with the vocab as an asset of the SavedModel), truncation and packing run in
  the graph, so clients send text. Outputs by task:
  classifier `probabilities`, `label_id`, `label`; regression `score`;
  tagger `tokens`, `tags` (one per word, "" padding) and the entities
  `entity_types`, `entity_texts`, `entity_starts`, `entity_ends` (character
  offsets into `text`, end exclusive, -1 padding); SQuAD `answer`,
  `answer_start`, `answer_end` (character offsets into `text_pair`, -1 for
  no answer), `answer_score` and for v2.0 `null_odds`, decoded from every
  `doc_stride` window as run_squad.py's evaluation decodes; encoder
  `pooled_output`, `sequence_output`.
- `serve_token_ids`: int32 `input_word_ids`, `input_mask`, `input_type_ids`
  [batch, max_seq_length], for clients that tokenize themselves; returns the
  model's raw outputs.

The export is written to a temporary folder next to the version folder and
renamed into place, so a server never sees half a model. Loading needs the
tensorflow-text ops registered: `load_saved_model` imports them first.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from bert_tf import checkpoints
from bert_tf.configs import INPUT_NAMES
from bert_tf.data import tag_schemes
from bert_tf.data.ner import prediction
from bert_tf.data.packing import pack_segments, trim_padding
from bert_tf.data.squad import alignment as squad_alignment, decoding as squad_decoding
from bert_tf.data.squad import features as squad_features
from bert_tf.data.tokenization import BertTokenizer, split_words_with_offsets

SERVING_DEFAULT = "serving_default"
SERVE_TOKEN_IDS = "serve_token_ids"
WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
# What the warm-up requests send: short, empty and mixed-script text.
WARMUP_TEXTS = ("The quick brown fox jumps over the lazy dog.", "", "北京是中国的首都。")


class ExportError(ValueError):
    """The model directory or the export folder cannot be exported to."""


def load_saved_model(path: str | os.PathLike):
    """`tf.saved_model.load` after registering the tensorflow-text ops the graph uses."""
    import tensorflow_text  # noqa: F401  (registers the ops)

    return tf.saved_model.load(os.fspath(path))


def _valid_utf8(text: tf.Tensor) -> tf.Tensor:
    return tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD)


def _char_offsets(text: tf.Tensor, rows: tf.Tensor, byte_offsets: tf.Tensor) -> tf.Tensor:
    """Character offsets of UTF-8 byte offsets into text[rows], int32."""
    prefixes = tf.strings.substr(tf.gather(text, rows), tf.zeros_like(byte_offsets), byte_offsets)
    return tf.strings.length(prefixes, unit="UTF8_CHAR")


class _Serving(tf.Module):
    """The exported object: the model, its tokenizer and one text signature per task."""

    def __init__(self, model: keras.Model, tokenizer: BertTokenizer, task_info: dict,
                 max_seq_length: int) -> None:
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.task = task_info.get("task", "encoder")
        self.task_info = task_info
        self.max_seq_length = max_seq_length
        # Per-token outputs: computed on the batch's trimmed length, padded back.
        self.per_token = {"encoder": ("sequence_output",), "tagging": ("logits",),
                          "squad": ("start_logits", "end_logits")}.get(self.task, ())
        self.pair = (self.task == "squad"
                     or (self.task == "classification" and bool(task_info.get("text_pair"))))
        text = [tf.TensorSpec([None], tf.string, name="text")]
        if self.pair:
            text.append(tf.TensorSpec([None], tf.string, name="text_pair"))
        serve = {"classification": self._classify, "tagging": self._tag, "squad": self._answer,
                 "encoder": self._encode}[self.task]
        # Bytes that are not UTF-8 become U+FFFD (which tokenization deletes), so
        # any request gets an answer; offsets then index the repaired text.
        self.serve_text = tf.function(lambda *texts: serve(*[_valid_utf8(t) for t in texts]),
                                      input_signature=text)
        ids = [tf.TensorSpec([None, max_seq_length], tf.int32, name=n) for n in INPUT_NAMES]
        self.serve_token_ids = tf.function(self._token_ids, input_signature=ids)

    def signatures(self) -> dict[str, Any]:
        return {SERVING_DEFAULT: self.serve_text.get_concrete_function(),
                SERVE_TOKEN_IDS: self.serve_token_ids.get_concrete_function()}

    # --- helpers

    def _pack(self, segments: list[tf.RaggedTensor]) -> dict[str, tf.Tensor]:
        t = self.tokenizer
        return pack_segments(segments, max_seq_length=self.max_seq_length, cls_id=t.cls_id,
                             sep_id=t.sep_id, pad_id=t.pad_id)

    def _run(self, inputs: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """Runs the model on the batch cut to its longest row (dynamic padding).

        Per-token outputs are padded back to max_seq_length with zeros; the
        other positions' values equal those of a run at full length.
        """
        trimmed = trim_padding({n: inputs[n] for n in INPUT_NAMES}, INPUT_NAMES)
        outputs = self.model(trimmed, training=False)
        missing = self.max_seq_length - tf.shape(trimmed["input_mask"])[1]
        result = {}
        for name, value in outputs.items():
            if name == "encoder_outputs":
                continue
            value = tf.cast(value, tf.float32)
            if name in self.per_token:
                value = tf.pad(value, [[0, 0], [0, missing]] + [[0, 0]] * (value.shape.rank - 2))
            result[name] = value
        return result

    def _words(self, text: tf.Tensor):
        """Words with byte offsets, and their pieces as one ragged row per text.

        Returns (words, begin, end, tokens, first): tokens [batch, (pieces)];
        first: int64 [total words], the index in its row's tokens of each
        word's first piece (meaningless for a word without pieces).
        """
        words, begin, end = split_words_with_offsets(text)
        pieces = self.tokenizer(words.flat_values)  # [total words, (pieces)]
        tokens = words.with_flat_values(pieces).merge_dims(1, 2)
        counts = pieces.row_lengths()
        before = tf.cumsum(counts, exclusive=True)
        first = before - tf.gather(before, tf.gather(words.row_starts(), words.value_rowids()))
        return words, begin, end, tokens, tf.where(counts > 0, first, -1)

    # --- the text signatures

    def _token_ids(self, input_word_ids, input_mask, input_type_ids):
        return self._run({"input_word_ids": input_word_ids, "input_mask": input_mask,
                          "input_type_ids": input_type_ids})

    def _encode(self, text):
        return self._run(self._pack([self.tokenizer(text)]))

    def _classify(self, text, text_pair=None):
        segments = [self.tokenizer(text)] + ([self.tokenizer(text_pair)] if text_pair is not None else [])
        logits = self._run(self._pack(segments))["logits"]
        labels = self.task_info.get("labels")
        if not labels:
            return {"score": logits[:, 0]}
        label_id = tf.argmax(logits, axis=-1, output_type=tf.int32)
        return {"probabilities": tf.nn.softmax(logits), "label_id": label_id,
                "label": tf.gather(tf.constant(labels), label_id)}

    def _tag(self, text):
        words, begin, end, tokens, first = self._words(text)
        # Pieces past max_seq_length - 2 are cut; so are the words they start.
        kept = (first >= 0) & (first < self.max_seq_length - 2)
        first_pieces = words.with_flat_values(tf.where(kept, first + 1, -1))  # +1 for [CLS]
        logits = self._run(self._pack([tokens]))["logits"]
        # The tags and entities run_ner.py predicts and scores: one implementation.
        tags = prediction.word_tags(logits, first_pieces, self.task_info["labels"], self.model.decode)
        found = tag_schemes.entity_spans(tags)
        entity_rows = found.first.value_rowids()
        row_starts = tf.gather(words.row_starts(), entity_rows)
        byte_begin = tf.gather(begin.flat_values, row_starts + found.first.flat_values)
        byte_end = tf.gather(end.flat_values, row_starts + found.last.flat_values)

        def per_text(values, default):
            return found.first.with_flat_values(values).to_tensor(default)

        return {
            "tokens": words.to_tensor(""),
            "tags": tags.to_tensor(""),
            "entity_types": found.types.to_tensor(""),
            "entity_texts": per_text(tf.strings.substr(tf.gather(text, entity_rows), byte_begin,
                                                       byte_end - byte_begin), ""),
            "entity_starts": per_text(_char_offsets(text, entity_rows, byte_begin), -1),
            "entity_ends": per_text(_char_offsets(text, entity_rows, byte_end), -1),
        }

    def _answer(self, text, text_pair):
        # The windows of run_squad.py's evaluation, slid over the context in
        # the graph, and its decoding (bert_tf.data.squad.decoding).
        info = self.task_info
        question = self.tokenizer(text)[:, :info.get("max_query_length", 64)]
        context = squad_alignment.context_pieces(self.tokenizer, text_pair)
        layout = squad_features.window_layout(context.ids.row_lengths(), question.row_lengths(),
                                              max_seq_length=self.max_seq_length,
                                              doc_stride=info.get("doc_stride", 128))
        outputs = self._run(squad_features.pack_windows(question, context.ids, layout,
                                                        max_seq_length=self.max_seq_length,
                                                        tokenizer=self.tokenizer))
        v2 = bool(info.get("version_2_with_negative"))
        decoded = squad_decoding.decode_windows(
            outputs["start_logits"], outputs["end_logits"], layout,
            squad_decoding.Contexts(text_pair, context.begin, context.end),
            n_best_size=info.get("n_best_size", 20), max_answer_length=info.get("max_answer_length", 30),
            version_2_with_negative=v2, null_score_diff_threshold=info.get("null_score_diff_threshold", 0.0))
        result = {"answer": decoded.answer, "answer_start": tf.cast(decoded.answer_begin, tf.int32),
                  "answer_end": tf.cast(decoded.answer_end, tf.int32),
                  "answer_score": tf.cast(decoded.answer_score, tf.float32)}
        if v2:
            result["null_odds"] = tf.cast(decoded.null_odds, tf.float32)
        return result


def _load(model_dir: str) -> tuple[keras.Model, str, dict]:
    """The model of a project model directory (task model or bare encoder), its vocab and task.json."""
    try:
        files = checkpoints.locate(model_dir)
    except (OSError, ValueError) as e:
        raise ExportError(f"{model_dir}: not a model directory ({e})") from None
    if not files.vocab_file or not os.path.exists(files.vocab_file):
        raise ExportError(f"{model_dir}: no vocab.txt; the export carries the vocab for in-graph tokenization")
    if os.path.exists(os.path.join(os.path.dirname(files.config_file), checkpoints.TASK_NAME)):
        model = checkpoints.load_task_model(model_dir)
        return model, files.vocab_file, model.task_info
    return checkpoints.load_encoder(model_dir), files.vocab_file, {"task": "encoder"}


def _next_version(model_root: str) -> int:
    versions = [int(n) for n in os.listdir(model_root) if n.isdigit()] if os.path.isdir(model_root) else []
    return max(versions, default=0) + 1


def write_warmup_requests(path: str, model_name: str, input_names: list[str]) -> None:
    """TF Serving warm-up records: one PredictionLog of `WARMUP_TEXTS` for `serving_default`."""
    from tensorflow_serving.apis import predict_pb2, prediction_log_pb2

    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    request.model_spec.signature_name = SERVING_DEFAULT
    for name in input_names:
        request.inputs[name].CopyFrom(tf.make_tensor_proto(list(WARMUP_TEXTS), dtype=tf.string))
    log = prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as writer:
        writer.write(log.SerializeToString())


def export_saved_model(model_dir: str | os.PathLike, export_dir: str | os.PathLike, model_name: str,
                       version: int | None = None, overwrite: bool = False,
                       max_seq_length: int | None = None) -> str:
    """Writes `export_dir/model_name/version/`, a SavedModel TF Serving loads.

    Args:
      model_dir: a model directory the project writes (with task.json for a
        fine-tuned model; without, the encoder is exported).
      export_dir: the folder TF Serving's --model_base_path points above.
      model_name: the served model's name (a folder name).
      version: the integer version; default one above the highest present.
      overwrite: replace an existing version folder.
      max_seq_length: the fixed packed length; default the task's training
        length, or 128 (at most max_position_embeddings) for an encoder.

    Returns:
      The version folder written.

    Raises:
      ExportError: not a model directory, no vocab, a bad name or length,
        or the version exists and `overwrite` is not set. Nothing is
        written then.
    """
    model_dir, export_dir = os.fspath(model_dir), os.fspath(export_dir)
    if not model_name or model_name in (".", "..") or os.sep in model_name:
        raise ExportError(f"--model_name={model_name!r}: must be a plain folder name")
    if version is not None and version < 0:
        raise ExportError(f"--version={version}: must be a non-negative integer")
    model_root = os.path.join(export_dir, model_name)
    version = _next_version(model_root) if version is None else version
    target = os.path.join(model_root, str(version))
    if os.path.exists(target) and not overwrite:
        raise ExportError(f"{target}: already exists; give another --version or --overwrite")

    policy = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("float32")  # serve in float32 whatever trained it
    try:
        model, vocab_file, task_info = _load(model_dir)
    finally:
        keras.mixed_precision.set_global_policy(policy)
    length = max_seq_length or task_info.get("max_seq_length") or min(128, model.config.max_position_embeddings)
    if not 3 <= length <= model.config.max_position_embeddings:
        raise ExportError(f"--max_seq_length={length}: must be in [3, max_position_embeddings="
                          f"{model.config.max_position_embeddings}]")
    if task_info.get("task") == "squad" and length - task_info.get("max_query_length", 64) - 3 < 1:
        raise ExportError(f"--max_seq_length={length} leaves no room for a context after a question of "
                          f"max_query_length={task_info.get('max_query_length', 64)}, [CLS] and two [SEP]")
    lower_case = task_info.get("do_lower_case", model.config.do_lower_case)
    serving = _Serving(model, BertTokenizer(vocab_file, lower_case=lower_case), task_info, length)

    os.makedirs(model_root, exist_ok=True)
    tmp = os.path.join(model_root, f".tmp-{version}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tf.saved_model.save(serving, tmp, signatures=serving.signatures())
        write_warmup_requests(os.path.join(tmp, WARMUP_FILE), model_name,
                              ["text", "text_pair"] if serving.pair else ["text"])
        with open(os.path.join(tmp, "assets.extra", "bert_tf_export.json"), "w", encoding="utf-8") as f:
            json.dump({"source": os.path.abspath(model_dir), "task": task_info.get("task", "encoder"),
                       "max_seq_length": length, "do_lower_case": lower_case}, f, indent=2)
        checkpoints.move_into_place(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def serve_text(loaded, text: list[str], text_pair: list[str] | None = None) -> dict[str, np.ndarray]:
    """Calls a loaded export's `serving_default` on Python strings; NumPy outputs."""
    inputs = {"text": tf.constant(text, tf.string)}
    if text_pair is not None:
        inputs["text_pair"] = tf.constant(text_pair, tf.string)
    return {k: v.numpy() for k, v in loaded.signatures[SERVING_DEFAULT](**inputs).items()}
