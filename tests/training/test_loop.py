"""The loop's schedule (when pretraining and fine-tuning log, evaluate and save) and its settings' checks."""

import os
import re

import pytest

from bert_tf.training.finetuning import JobOptions
from bert_tf.training.loop import Schedule, TrainingConfig
from bert_tf.training.optimization import OptimizerConfig
from bert_tf.training.pretraining_job import PretrainingConfig


def _steps(schedule, when):
    return [s for s in range(1, schedule.total_steps + 1) if getattr(schedule, when)(s)]


def test_every_event_comes_at_its_period_and_at_the_last_step():
    pretraining = Schedule(total_steps=10, log_every=4, eval_every=6, save_every=3)
    assert _steps(pretraining, "logs_at") == [4, 8, 10]
    assert _steps(pretraining, "evaluates_at") == [6, 10]
    assert _steps(pretraining, "saves_at") == [3, 6, 9, 10]


def test_fine_tuning_also_logs_at_each_epoch_end():
    finetuning = Schedule(total_steps=8, log_every=5, eval_every=3, save_every=3, epoch_steps=3)
    assert _steps(finetuning, "logs_at") == [3, 5, 6, 8]
    assert _steps(finetuning, "evaluates_at") == _steps(finetuning, "saves_at") == [3, 6, 8]


@pytest.mark.parametrize("build, message", [
    (lambda tmp: TrainingConfig(output_dir=tmp, train_batch_size=6, gradient_accumulation_steps=4),
     "--train_batch_size=6 is not divisible by --gradient_accumulation_steps=4"),
    (lambda tmp: TrainingConfig(output_dir=os.path.join(tmp, "file")), "is an existing file, not a directory"),
    (lambda tmp: PretrainingConfig(output_dir=tmp, max_seq_length=16, max_predictions_per_seq=20),
     "--max_predictions_per_seq=20 exceeds --max_seq_length=16"),
    (lambda tmp: OptimizerConfig(num_train_steps=5, num_warmup_steps=6), "--num_warmup_steps=6 exceeds --num_train_steps=5"),
    (lambda tmp: JobOptions(init_checkpoint=None, do_train=True), "--init_checkpoint is required"),
    (lambda tmp: JobOptions(init_checkpoint=tmp), "at least one of --do_train, --do_eval and --do_predict"),
])
def test_settings_are_checked_where_they_are_defined(tmp_path, build, message):
    # The drivers' flags only parse; these checks are what turns bad flags into one-line errors.
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match=re.escape(message)):
        build(str(tmp_path))
