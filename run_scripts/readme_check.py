"""Runs README.md's commands as a new user would, each shortened to seconds.

    python run_scripts/readme_check.py

Takes every command of README.md's ```bash blocks, and the demo commands named in its
tables, in README order. Copies the working tree to a temporary folder, creates a fresh
virtual environment there and runs the commands in the copy with the environment's
`python` and `pip` first on PATH; the first command is the README's install, so every
later one sees exactly what that install gives. Each command runs with the overrides of
the first RULES entry whose pattern it matches (absl: a flag given again wins), or is
skipped with that entry's reason; a command no entry matches fails the check, so a new
README command cannot be left out silently. Optional `[...]` groups and `...` are
dropped, a command seen before is not run again, and every flags/*demo*.flags must be
run by some command. A non-zero exit or a traceback fails the check.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIP = "SKIP: "
# Small enough to take seconds; the records the later pretraining commands read are
# the demo's, at this length.
PRETRAIN = ("--model_preset=tiny_chinese --dupe_factor=1 --max_seq_length=32 --max_predictions_per_seq=5 "
            "--train_batch_size=8 --eval_batch_size=8 --num_train_steps=2 --num_warmup_steps=0 "
            "--eval_every_steps=2 --max_eval_steps=1 --save_checkpoints_steps=2 --log_steps=1")
DEMO_RECORDS = "--input_file=runs/pretrain_demo/data/train_32.tfrecord --vocab_file=runs/pretrain_demo/data/vocab.txt"
FINETUNE = "--num_train_epochs=1 --max_seq_length=32 --train_batch_size=16 --eval_batch_size=256 --log_steps=1"
MODEL_DIR = "--init_checkpoint=runs/pretrain_demo/model"
GLUE = "tests/testdata/glue"
# (pattern searched in the command, overrides appended to it, or SKIP and the reason).
RULES = [
    (r"^pip install -e \.\[demo\]$", ""),
    (r"^bash run_scripts/test\.sh$", SKIP + "CI's test command: .ci/run runs it before this check"),
    (r"^tensorboard ", SKIP + "a server that runs until stopped"),
    (r"^docker run ", SKIP + "needs Docker and the tensorflow/serving image"),
    (r"^curl .*localhost:8501", SKIP + "asks the server of the docker command"),
    (r"^run_scripts/pretrain_two_phase\.sh flags/bert_base_phase1\.flags",
     SKIP + "BERT-Base from Wikipedia-scale records and Google's vocab, which do not ship; shortened, "
     "every line of both flagfiles would be overridden"),
    (r"^pip install -e \.\[demo\] tensorflow\[and-cuda\]", SKIP + "TensorFlow's CUDA libraries: a GPU install"),
    (r"^python -c import tensorflow as tf; print\(tf\.config\.list_physical_devices\('GPU'\)\)$", ""),
    (r"^python run_pretraining\.py --flagfile=flags/pretrain_demo\.flags --output_dir=runs/gpu_demo$",
     SKIP + "the pretraining demo above, on a GPU"),
    (r"^CUDA_VISIBLE_DEVICES=0,1 ", SKIP + "needs two GPUs"),
    (r"^run_scripts/multiworker\.sh 2 --flagfile=flags/bert_base_phase1\.flags$",
     SKIP + "BERT-Base records, as the two-phase command"),
    (r"^bash bench/gpu_check\.sh ", SKIP + "needs a GPU (exits 1 without one)"),
    (r"^run_scripts/multiworker\.sh 2 --flagfile=flags/pretrain_demo\.flags$",
     f"{PRETRAIN} --output_dir=runs/multiworker"),
    (r"^python run_pretraining\.py --flagfile=flags/pretrain_demo\.flags$", PRETRAIN),
    (r"^python run_pretraining\.py --input_text_file=",
     f"{PRETRAIN} --input_text_file=tests/testdata/en_corpus.txt --model_preset=tiny_uncased"),
    (r"^python run_pretraining\.py --input_file=", f"{PRETRAIN} {DEMO_RECORDS}"),
    (r"^python run_(classifier|ner)\.py --flagfile=flags/\w+_demo\.flags$", f"{FINETUNE} --demo_subsample=64"),
    (r"^python run_classifier\.py --task_name=MRPC ", f"{FINETUNE} {MODEL_DIR} --data_dir={GLUE}/MRPC"),
    (r"^python run_classifier\.py --train_file=",
     f"{FINETUNE} {MODEL_DIR} --train_file={GLUE}/SST-2/train.tsv --dev_file={GLUE}/SST-2/dev.tsv "
     f"--test_file={GLUE}/SST-2/test.tsv --text_column=sentence --do_train --do_eval --do_predict --output_dir=runs/csv"),
    (r"^python run_squad\.py ",
     f"{FINETUNE} {MODEL_DIR} --max_seq_length=64 --doc_stride=16 --max_query_length=16 "
     "--train_file=tests/testdata/squad_v2.0.json --predict_file=tests/testdata/squad_v2.0.json"),
    (r"^python run_ner\.py --train_file=",
     f"{FINETUNE} {MODEL_DIR} --train_file=tests/testdata/ner_train.txt --dev_file=tests/testdata/ner_dev.txt "
     "--test_file=tests/testdata/ner_dev.txt"),
    (r"^python bench/finetune_tricks\.py --tasks=", "--quick --variants=baseline --seeds=1"),
    (r"^python bench/finetune_tricks\.py --table_only ", ""),
    (r"^python export_saved_model\.py ", ""),
    (r"^python -m bert_tf\.tools\.saved_model_cli show ", ""),
    (r"^python -m bert_tf\.tools\.convert_checkpoint --input=runs/pretrain_demo/model ", ""),
    (r"^python -m bert_tf\.tools\.convert_checkpoint --input=exports/demo_hf ", ""),
    (r"^python -m bert_tf\.tools\.convert_checkpoint --input_format=tf1 ",
     "--input=runs/pretrain_demo/model/bert_model.ckpt --output_dir=runs/converted_tf1"),
    (r"^python -m bert_tf\.tools\.build_vocab ", "--input_files=tests/testdata/en_corpus.txt"),
    (r"^python create_pretraining_data\.py ", "--input_file=tests/testdata/en_corpus.txt --dupe_factor=1"),
]


def readme_commands(text: str) -> list[list[str]]:
    """The README's commands in order, as argument lists: ```bash lines, then demo commands of its tables."""
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, flags=re.M | re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            while words:
                end = words.index("&&") if "&&" in words else len(words)
                commands.append(words[:end])
                words = words[end + 1:]
    commands += [shlex.split(c) for c in re.findall(r"`(python [^`]*--flagfile=flags/\w*demo\.flags)`", text)]
    return [_without_placeholders(c) for c in commands]


def _without_placeholders(words: list[str]) -> list[str]:
    kept, optional = [], False
    for word in words:
        optional |= word.startswith("[")
        if not optional and word != "...":
            kept.append(word)
        optional &= not word.endswith("]")
    return kept


def rule(command: str) -> str:
    for pattern, action in RULES:
        if re.search(pattern, command):
            return action
    raise SystemExit(f"readme_check: no rule for the README command {command!r}: add one to RULES")


def run(command: list[str], cwd: str, env: dict, log: str) -> bool:
    with open(log, "w+") as f:
        code = subprocess.run(command, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
        f.seek(0)
        output = f.read()
    if code == 0 and "Traceback (most recent call last)" not in output:
        return True
    print("\n".join(output.splitlines()[-40:]), f"\nFAILED (exit code {code}): {shlex.join(command)}")
    return False


def main() -> None:
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        commands = readme_commands(f.read())
    planned, seen = [], set()
    for command in commands:
        line = " ".join(command)
        action = rule(line)
        if line not in seen:
            seen.add(line)
            planned.append((command, action))
    demos = {os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "flags", "*demo*.flags"))}
    missing = sorted(demos - {w.removeprefix("--flagfile=") for c, a in planned if not a.startswith(SKIP) for w in c})
    if missing:
        raise SystemExit(f"readme_check: no README command runs {', '.join(missing)}")

    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="readme_check.") as temp:
        work = os.path.join(temp, "repo")
        files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                               cwd=REPO, check=True, capture_output=True, text=True).stdout.split("\0")
        for name in filter(None, files):
            if os.path.isfile(os.path.join(REPO, name)):
                os.makedirs(os.path.dirname(os.path.join(work, name)), exist_ok=True)
                shutil.copy2(os.path.join(REPO, name), os.path.join(work, name))
        venv = os.path.join(temp, "venv")
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        env = {**os.environ, "VIRTUAL_ENV": venv, "PATH": os.path.join(venv, "bin") + os.pathsep + os.environ["PATH"],
               "BERT_TF_CACHE": os.path.join(temp, "cache"), "TF_CPP_MIN_LOG_LEVEL": "2",
               "CUDA_VISIBLE_DEVICES": ""}
        env.pop("PYTHONPATH", None)
        for i, (command, action) in enumerate(planned):
            if action.startswith(SKIP):
                print(f"skipped        {shlex.join(command)}  ({action[len(SKIP):]})", flush=True)
                continue
            command = command + shlex.split(action)
            began = time.monotonic()
            if not run(command, work, env, os.path.join(temp, f"{i}.log")):
                sys.exit(1)
            print(f"ok {time.monotonic() - began:6.1f}s    {shlex.join(command)}", flush=True)
    print(f"readme_check: all README commands ran in {time.monotonic() - start:.0f}s")


if __name__ == "__main__":
    main()
