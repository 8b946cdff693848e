r"""Builds the README's benchmark table from the bench scripts' JSON files (no hand-typed numbers).

    python bench/results_table.py                     # bench/results/*.json -> README.md
    python bench/results_table.py --print_only

Each bench script writes its figures with `--output_json`; `bench/run_all.sh`
writes them to bench/results/. This script renders the headline figures of
each file found, with the machine, the versions and the date, between the
README's `<!-- bench:start -->` and `<!-- bench:end -->` markers.
"""

from __future__ import annotations

import glob
import json
import os

from absl import app, flags

import bench_util
from bert_tf.configs import get_preset

flags.DEFINE_string("results_dir", os.path.join(os.path.dirname(__file__), "results"), "Where the JSON files are.")
flags.DEFINE_string("readme", os.path.join(os.path.dirname(__file__), "..", "README.md"), "File to update.")
flags.DEFINE_bool("print_only", False, "Print the table instead of updating the README.")
FLAGS = flags.FLAGS

START, END = "<!-- bench:start -->", "<!-- bench:end -->"
# The README's pretraining-demo row, from bench/results/demo_time_to_quality.json.
DEMO_START, DEMO_END = "<!-- pretraining-demo:start -->", "<!-- pretraining-demo:end -->"
DEMO_ROW = (
    "| demo | command | result | measured on |\n|---|---|---|---|\n"
    "| pretraining, People's Daily (an article a document), {model_text} from scratch, {steps:,} steps at length "
    "{recipe_max_seq_length}, batch {recipe_train_batch_size}, learning rate {recipe_learning_rate} with "
    "{recipe_num_warmup_steps} warmup steps, AdamW without bias correction (the original's), `--balanced_nsp` "
    "| `python run_pretraining.py --flagfile=flags/pretrain_demo.flags` | held-out MLM loss {last_mlm_loss:.2f} "
    "against the unigram entropy of the masked tokens {unigram_entropy:.2f}, below it after "
    "{mlm_below_unigram_text}; held-out NSP accuracy {last_nsp_accuracy:.1%} (balanced pairs), 70% after "
    "{nsp70_text}; NSP by step: {nsp_curve_text}; the whole run (vocab, records, training, the flagfile's "
    "evaluations) {demo_wall_minutes:.1f} min | {machine_cpu}, {machine_cpu_count} cores, nothing else "
    "running; {date}{quick_text} |\n")

# script -> [(what, template)]; templates format the script's JSON record.
ROWS = {
    "pretrain_throughput": [
        ("pretraining step, {preset} seq {seq} batch {batch}: bert_tf / keras-hub, default settings "
         "({default_setting_bert_tf} vs {default_setting_keras_hub})", "{ratio_default_vs_keras_hub:.2f}x"),
        ("pretraining step: bert_tf / keras-hub, each at its best ({best_setting_bert_tf} vs "
         "{best_setting_keras_hub})", "{ratio_best_vs_keras_hub:.2f}x"),
        ("pretraining step time / the time of its own matmuls alone (median of the rounds' paired "
         "ratios), default settings: bert_tf (keras-hub)", "{floor_ratio:.2f}x ({keras_hub_floor_ratio:.2f}x)"),
        ("pretraining step: bert_tf MFU at its best setting (of the matmul peak at that precision)",
         "{mfu:.0%}"),
        ("pretraining step: bert_tf float32 + XLA / float32", "{bert_tf_float32_xla_vs_float32:.2f}x"),
        ("pretraining step: bert_tf mixed_bfloat16 / float32", "{bert_tf_mixed_bfloat16_vs_float32:.2f}x"),
        ("pretraining step: bert_tf mixed_bfloat16 + XLA / float32",
         "{bert_tf_mixed_bfloat16_xla_vs_float32:.2f}x"),
    ],
    "profile_step": [
        ("pretraining step {preset} seq {seq} batch {batch}, {precision}, profiled: its three largest "
         "groups of kernels, share of the step", "{group_1} {group_1_share:.0%}; {group_2} {group_2_share:.0%}; "
         "{group_3} {group_3_share:.0%}"),
    ],
    "demo_time_to_quality": [
        ("README pretraining demo to held-out NSP 70%, as the README command runs (from a new output dir)",
         "{nsp70_text}"),
        ("README pretraining demo to held-out MLM loss below the masked tokens' unigram entropy",
         "{mlm_below_unigram_text}"),
        ("README pretraining demo: the whole run as the README command runs", "{demo_wall_seconds:.0f} s, {steps} steps"),
    ],
    "input_pipeline": [
        ("tokenize + pack: bert_tf tf.data / Hugging Face BertTokenizerFast",
         "{ratio_tokenize_pack_vs_hugging_face:.2f}x"),
        ("dynamic pretraining pipeline (tokenize, pack, mask) / {consumer_preset} step consumption",
         "{ratio_pipeline_vs_consumption:.0f}x"),
    ],
    "serving_latency": [
        ("serving p50, batch 1: keras-hub preprocessor + backbone (eager) / bert_tf SavedModel",
         "{ratio_b1_p50:.2f}x"),
        ("serving p50, batch 1: keras-hub in one tf.function / bert_tf SavedModel", "{ratio_b1_p50_best:.2f}x"),
        ("serving p50, batch 32: keras-hub in one tf.function / bert_tf SavedModel", "{ratio_b32_p50_best:.2f}x"),
    ],
    "finetune_padding": [
        ("fine-tuning on tweets (length {max_seq_length}): dynamic padding / fixed padding",
         "{ratio_dynamic_vs_fixed:.2f}x"),
        ("fine-tuning on tweets: --length_bucketing / fixed padding",
         "{ratio_bucketed_vs_fixed:.2f}x"),
    ],
    "onednn_cpu": [
        ("pretraining step {preset} seq {seq} batch {batch}, {precision}: oneDNN kernels on (bert_tf's "
         "setting) / off, on a CPU where TensorFlow on its own turns them {tensorflow_default_onednn_text}",
         "{ratio_speed_on_vs_off:.2f}x"),
    ],
    "activation_memory": [
        ("pretraining step {preset} seq {seq} batch {batch}, recompute_activations / keeping them: "
         "peak memory, speed", "{ratio_memory_recompute_vs_keep:.2f}x, {ratio_speed_recompute_vs_keep:.2f}x"),
    ],
    "gpu_check": [
        ("BERT-Large seq 128, bf16 + XLA on {gpu}: sequences/s, MFU",
         "{large_seq128_seq_per_s:.0f}, {large_seq128_mfu:.0%}"),
        ("BERT-Large seq 512, bf16 + XLA on {gpu}: sequences/s, MFU",
         "{large_seq512_seq_per_s:.0f}, {large_seq512_mfu:.0%}"),
        ("BERT-Large seq 512 on {gpu}: largest batch without / with activation recomputation",
         "{large_seq512_largest_batch_keep} / {large_seq512_largest_batch_recompute}"),
    ],
}


def _with_ratios(record: dict) -> dict:
    """Adds each bert_tf pretraining setting's speed over float32 without XLA, and words for flags."""
    if record["script"] == "pretrain_throughput":
        base = record["bert_tf_float32_seq_per_s"]
        for setting in ("float32_xla", "mixed_bfloat16", "mixed_bfloat16_xla"):
            if f"bert_tf_{setting}_seq_per_s" in record:  # --quick runs fewer settings
                record[f"bert_tf_{setting}_vs_float32"] = record[f"bert_tf_{setting}_seq_per_s"] / base
    if record["script"] == "onednn_cpu":
        record["tensorflow_default_onednn_text"] = "on" if record["tensorflow_default_onednn"] else "off"
    return record


def table(records: list[dict]) -> str:
    lines = ["| figure | value | script |", "|---|---|---|"]
    notes = []
    for record in sorted(records, key=lambda r: list(ROWS).index(r["script"])):
        record = _with_ratios(record)
        for what, value in ROWS[record["script"]]:
            try:
                lines.append(f"| {what.format(**record)} | {value.format(**record)} | {record['script']} |")
            except KeyError:  # a figure this run did not measure
                continue
        isa = f" ({record['machine_cpu_isa']})" if record.get("machine_cpu_isa") else ""
        notes.append(f"- {record['script']}: {record['machine_gpu'] or record['machine_cpu'] + isa}, "
                     f"{record['machine_cpu_count']} CPU cores; TensorFlow {record['version_tensorflow']}, "
                     f"Keras {record['version_keras']}, keras-hub {record['version_keras_hub']}, "
                     f"tokenizers {record['version_tokenizers']}; {record['date']}"
                     f"{' (--quick: not meaningful)' if record.get('quick') else ''}")
    return "\n".join(lines + [""] + notes)


def demo_row(record: dict) -> str:
    """The README's pretraining-demo table from a demo_time_to_quality record."""
    preset = record["recipe_model_preset"]
    config = get_preset(preset)
    model_text = (f"BERT-{preset.split('_')[0].capitalize()} ({config.num_hidden_layers} layers, "
                  f"hidden {config.hidden_size})")
    return DEMO_ROW.format(**record, model_text=model_text, demo_wall_minutes=record["demo_wall_seconds"] / 60,
                           quick_text=" (--quick: not meaningful)" if record.get("quick") else "")


def main(argv: list[str]) -> None:
    del argv
    records = []
    for path in sorted(glob.glob(os.path.join(FLAGS.results_dir, "*.json"))):
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
        if record.get("script") in ROWS:
            records.append(record)
    text = table(records)
    if FLAGS.print_only:
        print(text)
        return
    bench_util.write_between_markers(FLAGS.readme, START, END, f"{text}\n")
    print(f"{FLAGS.readme}: table of {len(records)} benchmark file(s)")
    demo = [r for r in records if r["script"] == "demo_time_to_quality"]
    if demo:
        bench_util.write_between_markers(FLAGS.readme, DEMO_START, DEMO_END, demo_row(demo[0]))
        print(f"{FLAGS.readme}: pretraining demo row")


if __name__ == "__main__":
    app.run(main)
