"""The loop's schedule: when pretraining and fine-tuning log, evaluate and save."""

from bert_tf.training.loop import Schedule


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
