"""Bad input across the drivers: exit code 2, one line naming the file (and line) or flag,
no traceback, nothing half-written.

The cases run as concurrent subprocesses (one TensorFlow start each), then each
is checked on its own.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import subprocess
import sys

import pytest

from bert_tf import checkpoints
from bert_tf.configs import BertConfig
from bert_tf.modeling.pretrainer import BertPretrainer
from tests import driver_runs
from tests.conftest import own_stderr_lines
from tests.finetuning_helpers import ENV, ROOT, TESTDATA

TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=64)


def _write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return str(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory, minilm_dir):
    """Every bad file the cases use, and a good tiny model directory."""
    d = tmp_path_factory.mktemp("bad")
    vocab = os.path.join(minilm_dir, "vocab.txt")
    model = checkpoints.save_model_dir(BertPretrainer(BertConfig(**TINY)), d / "model", vocab)
    wide = checkpoints.save_model_dir(BertPretrainer(BertConfig(**{**TINY, "hidden_size": 48})),
                                      d / "wide", vocab)
    mismatched = d / "mismatched"
    shutil.copytree(model, mismatched)
    BertConfig(**{**TINY, "intermediate_size": 96}).to_json_file(mismatched / "bert_config.json")
    # A google-research/bert directory: cased by its name, no do_lower_case in its config.
    google_cased = d / "cased_L-2_H-32_A-4"
    shutil.copytree(model, google_cased)
    _write(google_cased / "bert_config.json",
           json.dumps({k: v for k, v in BertConfig(**TINY).to_dict().items() if k != "do_lower_case"}))
    pickled = d / "pickled"
    _write(pickled / "config.json", json.dumps({"model_type": "bert", **TINY, "vocab_size": 30522}))
    _write(pickled / "pytorch_model.bin", b"\x80\x04not really a pickle")
    glue = d / "glue"
    for name in ("MRPC", "SST-2"):
        shutil.copytree(os.path.join(TESTDATA, "glue", name), glue / name)
    short_row = open(os.path.join(TESTDATA, "glue", "MRPC", "train.tsv")).read().splitlines()
    short_row[2] = "1\t2108705\t2108831\tonly one sentence"
    _write(glue / "MRPC_short" / "train.tsv", "\n".join(short_row) + "\n")
    shutil.copy(os.path.join(TESTDATA, "glue", "MRPC", "dev.tsv"), glue / "MRPC_short")
    sst = open(os.path.join(TESTDATA, "glue", "SST-2", "train.tsv")).read().splitlines()
    sst[3] = sst[3].rsplit("\t", 1)[0] + "\t7"
    _write(glue / "SST-2_label" / "train.tsv", "\n".join(sst) + "\n")
    shutil.copy(os.path.join(TESTDATA, "glue", "SST-2", "dev.tsv"), glue / "SST-2_label")
    squad = json.load(open(os.path.join(TESTDATA, "squad_v1.1.json")))
    squad["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] = 5
    return {
        "model": model, "wide": wide, "google_cased": str(google_cased), "mismatched": str(mismatched), "pickled": str(pickled), "vocab": vocab,
        "text": _write(d / "corpus.txt", "One sentence here. Another one.\n\nA second document. With text.\n"),
        "empty": _write(d / "empty.txt", ""),
        "latin1": _write(d / "latin1.txt", "caf\xe9 ok\n\nna\xefve line\n".encode("latin-1")),
        "no_specials": _write(d / "no_specials.txt", "hello\nworld\n##s\n"),
        "bad_json": _write(d / "bad.json", "{\"data\": [ {\"title\": \"x\", "),
        "squad_moved": _write(d / "squad_moved.json", json.dumps(squad)),
        "csv_bytes": _write(d / "train.csv", b"text,label\nfine,1\nbad \xff\xfe bytes,0\n"),
        "csv_no_column": _write(d / "nocol.csv", "sentence,label\nfine,1\n"),
        "ner_bio": _write(d / "ner_bio.txt", "John B-PER\nlives O\nin O\nNew I-LOC\nYork I-LOC\n\n"),
        "ner_one_column": _write(d / "ner_col.txt", "John B-PER\nlives\n\n"),
        "ner_bytes": _write(d / "ner_bytes.txt", b"John B-PER\nM\xfcller I-PER\n\n"),
        "records": _write(d / "corrupt.tfrecord", b"\x00" * 64),
        "file": _write(d / "a_file", "not a directory"),
        "bad_config": _write(d / "bad_config.json", "{\"hidden_size\": 32,"),
        "out": str(d / "out"),
    }


def _pretrain(f, **flags):
    values = {"input_text_file": f["text"], "bert_config_file": os.path.join(f["model"], "bert_config.json"),
              "output_dir": f["out"] + "/pretrain", "max_seq_length": 32, "max_predictions_per_seq": 5,
              "train_batch_size": 8, "eval_batch_size": 8, "num_train_steps": 2, "num_warmup_steps": 1,
              "vocab_size": 200}
    values.update(flags)
    return ["run_pretraining.py", *[f"--{k}={v}" for k, v in values.items() if v is not None]]


def _classify(f, **flags):
    values = {"task_name": "MRPC", "data_dir": os.path.join(os.path.dirname(f["records"]), "glue", "MRPC"),
              "init_checkpoint": f["model"], "output_dir": f["out"] + "/classify", "do_train": "true",
              "max_seq_length": 32, "train_batch_size": 2}
    values.update(flags)
    return ["run_classifier.py", *[f"--{k}={v}" for k, v in values.items() if v is not None]]


def _glue(f, name):
    return os.path.join(os.path.dirname(f["records"]), "glue", name)


def _squad(f, **flags):
    values = {"train_file": f["squad_moved"], "init_checkpoint": f["model"], "output_dir": f["out"] + "/squad",
              "do_train": "true", "max_seq_length": 48, "train_batch_size": 2}
    values.update(flags)
    return ["run_squad.py", *[f"--{k}={v}" for k, v in values.items() if v is not None]]


def _ner(f, **flags):
    values = {"train_file": f["ner_bio"], "init_checkpoint": f["model"], "output_dir": f["out"] + "/ner",
              "do_train": "true", "max_seq_length": 32, "train_batch_size": 2}
    values.update(flags)
    return ["run_ner.py", *[f"--{k}={v}" for k, v in values.items() if v is not None]]


# (id, command builder, what the one line must name)
CASES = [
    # run_pretraining.py
    ("pretrain-glob-matches-nothing", lambda f: _pretrain(f, input_text_file="/nonexistent/*.txt"), "/nonexistent/*.txt"),
    ("pretrain-records-glob-nothing", lambda f: _pretrain(f, input_text_file=None, input_file="/none/*.tfrecord",
                                                          vocab_file=f["vocab"]), "/none/*.tfrecord"),
    ("pretrain-empty-text", lambda f: _pretrain(f, input_text_file=f["empty"]), "empty.txt"),
    ("pretrain-non-utf8", lambda f: _pretrain(f, input_text_file=f["latin1"]), "latin1.txt:1"),
    ("pretrain-vocab-without-specials", lambda f: _pretrain(f, vocab_file=f["no_specials"]), "no_specials.txt"),
    ("pretrain-seq-above-positions", lambda f: _pretrain(f, max_seq_length=128), "max_position_embeddings"),
    ("pretrain-batch-not-divisible", lambda f: _pretrain(f, train_batch_size=6, gradient_accumulation_steps=4),
     "--train_batch_size"),
    ("pretrain-batch-not-divisible-by-replicas", lambda f: _pretrain(f, train_batch_size=7, num_cpu_devices=2,
                                                                     distribution_strategy="mirrored"), "7"),
    ("pretrain-output-dir-is-a-file", lambda f: _pretrain(f, output_dir=f["file"]), "--output_dir"),
    ("pretrain-predictions-above-length", lambda f: _pretrain(f, max_predictions_per_seq=40),
     "--max_predictions_per_seq"),
    ("pretrain-conflicting-inputs", lambda f: _pretrain(f, text_corpus="peoples_daily"), "--text_corpus"),
    ("pretrain-warmup-above-steps", lambda f: _pretrain(f, num_warmup_steps=9), "--num_warmup_steps"),
    ("pretrain-stop-above-steps", lambda f: _pretrain(f, stop_at_step=3), "--stop_at_step=3"),
    ("pretrain-config-not-json", lambda f: _pretrain(f, bert_config_file=f["bad_config"]), "bad_config.json"),
    ("pretrain-init-other-architecture", lambda f: _pretrain(f, init_checkpoint=f["wide"]), "wide"),
    ("pretrain-case-mismatch", lambda f: _pretrain(f, init_checkpoint=f["google_cased"]), "cased_L-2_H-32_A-4"),
    ("pretrain-corrupt-records", lambda f: _pretrain(f, input_text_file=None, input_file=f["records"],
                                                     vocab_file=f["vocab"]), "corrupt.tfrecord"),
    # create_pretraining_data.py
    ("create-data-glob-nothing", lambda f: ["create_pretraining_data.py", "--input_file=/none/*.txt",
                                            f"--output_file={f['out']}/x.tfrecord", f"--vocab_file={f['vocab']}"],
     "/none/*.txt"),
    ("create-data-vocab-without-specials", lambda f: ["create_pretraining_data.py", f"--input_file={f['text']}",
                                                      f"--output_file={f['out']}/x.tfrecord",
                                                      f"--vocab_file={f['no_specials']}"], "no_specials.txt"),
    # run_classifier.py
    ("classify-tsv-row-too-short", lambda f: _classify(f, data_dir=_glue(f, "MRPC_short")), "train.tsv:3"),
    ("classify-unknown-label", lambda f: _classify(f, task_name="SST-2", data_dir=_glue(f, "SST-2_label")),
     "train.tsv:4"),
    ("classify-csv-non-utf8", lambda f: _classify(f, task_name=None, data_dir=None, train_file=f["csv_bytes"]),
     "train.csv:3"),
    ("classify-csv-missing-column", lambda f: _classify(f, task_name=None, data_dir=None,
                                                        train_file=f["csv_no_column"]), "nocol.csv"),
    ("classify-empty-file", lambda f: _classify(f, task_name=None, data_dir=None, train_file=f["empty"]),
     "empty.txt"),
    ("classify-missing-checkpoint", lambda f: _classify(f, init_checkpoint="/nonexistent/model"),
     "/nonexistent/model"),
    ("classify-config-shape-mismatch", lambda f: _classify(f, init_checkpoint=f["mismatched"]), "intermediate"),
    ("classify-pickled-checkpoint", lambda f: _classify(f, init_checkpoint=f["pickled"]), "pytorch_model.bin"),
    ("classify-seq-above-positions", lambda f: _classify(f, max_seq_length=512), "max_position_embeddings"),
    ("classify-output-dir-is-a-file", lambda f: _classify(f, output_dir=f["file"]), "--output_dir"),
    ("classify-case-mismatch", lambda f: _classify(f, do_lower_case="false"), "--do_lower_case=False"),
    ("classify-no-action", lambda f: _classify(f, do_train="false"), "--do_train"),
    ("classify-accumulation-not-divisible", lambda f: _classify(f, train_batch_size=3,
                                                                gradient_accumulation_steps=2), "--train_batch_size"),
    ("classify-reinit-above-layers", lambda f: _classify(f, reinit_top_layers=9), "--reinit_top_layers=9"),
    ("classify-layerwise-decay-with-lamb", lambda f: _classify(f, layerwise_lr_decay=0.9, optimizer="lamb"),
     "--layerwise_lr_decay"),
    ("classify-length-filter-percent-and-bounds", lambda f: _classify(f, length_filter_percent=5, max_seq_tokens=20),
     "--length_filter_percent"),
    # run_squad.py
    ("squad-answer-not-at-start", lambda f: _squad(f), "v1q1"),
    ("squad-not-json", lambda f: _squad(f, train_file=f["bad_json"]), "bad.json"),
    ("squad-non-utf8", lambda f: _squad(f, train_file=f["latin1"]), "latin1.txt"),
    ("squad-case-mismatch-google-name", lambda f: _squad(f, init_checkpoint=f["google_cased"], do_lower_case="true"),
     "cased_L-2_H-32_A-4"),
    # --allow_case_mismatch passes the casing check: the run goes on to the data's own error.
    ("squad-case-mismatch-allowed", lambda f: _squad(f, init_checkpoint=f["google_cased"], do_lower_case="true",
                                                     allow_case_mismatch="true"), "v1q1"),
    # run_ner.py
    ("ner-invalid-bio", lambda f: _ner(f), "ner_bio.txt:4"),
    ("ner-one-column", lambda f: _ner(f, train_file=f["ner_one_column"]), "ner_col.txt:2"),
    ("ner-non-utf8", lambda f: _ner(f, train_file=f["ner_bytes"]), "ner_bytes.txt:2"),
    ("ner-case-mismatch", lambda f: _ner(f, do_lower_case="false"), "--allow_case_mismatch"),
    ("ner-length-filter-percent-50", lambda f: _ner(f, length_filter_percent=50), "--length_filter_percent=50"),
    # export_saved_model.py and the tools
    ("export-not-a-model", lambda f: ["export_saved_model.py", f"--model_dir={f['out']}", "--export_dir=/tmp/x",
                                      "--model_name=m"], "not a model directory"),
    ("convert-pickled", lambda f: ["-m", "bert_tf.tools.convert_checkpoint", "--input_format=hf",
                                   f"--input={f['pickled']}", f"--output_dir={f['out']}/converted"],
     "pytorch_model.bin"),
    ("build-vocab-glob-nothing", lambda f: ["-m", "bert_tf.tools.build_vocab", "--input_files=/none/*.txt",
                                            "--vocab_size=100", f"--output={f['out']}/vocab.txt"], "/none/*.txt"),
]


@pytest.fixture(scope="module")
def results(files):
    def run(case):
        name, build, _ = case
        out = os.path.join(files["out"], name)
        os.makedirs(out)
        command = build({**files, "out": out})
        return name, driver_runs.run(command)

    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        return dict(pool.map(run, CASES))


@pytest.mark.parametrize("name, expected", [(c[0], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_gives_one_line_and_exit_2(results, name, expected):
    result = results[name]
    lines = own_stderr_lines(result.stderr)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert len(lines) == 1 and ": error: " in lines[0] and expected in lines[0], lines


def test_nothing_half_written(results, files):
    """No failed run left a model, an export, a record file, a tool's vocab or a temporary file."""
    assert len(results) == len(CASES) >= 30
    left = []
    for root, dirs, names in os.walk(files["out"]):
        left += [os.path.join(root, n) for n in dirs + names
                 if n in ("model", "best", "x.tfrecord", "converted", "checkpoints") or ".tmp" in n
                 or (n == "vocab.txt" and os.path.basename(root) != "data")]
    assert not left, left


def test_skip_corrupt_records_leaves_the_bad_shard_out(files, tmp_path):
    from bert_tf.data.pretraining.writer import PretrainingDataOptions, create_pretraining_data
    from bert_tf.data.tokenization import BertTokenizer

    good = str(tmp_path / "good.tfrecord")
    create_pretraining_data(PretrainingDataOptions(
        input_files=[files["text"]], output_file=good, vocab_file=files["vocab"], max_seq_length=32,
        max_predictions_per_seq=5, dupe_factor=20), BertTokenizer(files["vocab"]))
    args = _pretrain(files, input_text_file=None, input_file=f"{good},{files['records']}",
                     vocab_file=files["vocab"], output_dir=str(tmp_path / "run"), train_batch_size=2,
                     eval_batch_size=2)
    failed = subprocess.run([sys.executable, *args], cwd=ROOT, env=ENV, capture_output=True, text=True,
                            timeout=600)
    assert failed.returncode == 2 and "corrupt.tfrecord: corrupt TFRecord data" in failed.stderr
    result = subprocess.run([sys.executable, *args, "--skip_corrupt_records"], cwd=ROOT, env=ENV,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "skipped 1 corrupt TFRecord file(s) of 2" in result.stderr
