"""Writes BERT pretraining TFRecords from plain-text corpora.

Same flags and record format as google-research/bert's tool, e.g.

  python create_pretraining_data.py --input_file=corpus.txt --output_file=train.tfrecord \
    --vocab_file=vocab.txt --do_lower_case=true --max_seq_length=128 \
    --max_predictions_per_seq=20 --masked_lm_prob=0.15 --dupe_factor=5 --random_seed=12345
"""

from absl import app, flags, logging

from bert_tf import flags as bert_flags
from bert_tf.configs import BertConfig
from bert_tf.data.pretraining.writer import PretrainingDataOptions, create_pretraining_data

bert_flags.define_pretraining_data_flags()
FLAGS = flags.FLAGS


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        bert_flags.exit_with_error(f"unexpected arguments: {' '.join(argv[1:])}")
    try:
        max_position_embeddings = None
        if FLAGS.bert_config_file:
            max_position_embeddings = BertConfig.from_json_file(
                FLAGS.bert_config_file).max_position_embeddings
        options = PretrainingDataOptions(
            input_files=FLAGS.input_file, output_file=FLAGS.output_file,
            vocab_file=FLAGS.vocab_file, input_format=FLAGS.input_format,
            do_lower_case=FLAGS.do_lower_case,
            max_seq_length=FLAGS.max_seq_length,
            max_predictions_per_seq=FLAGS.max_predictions_per_seq,
            masked_lm_prob=FLAGS.masked_lm_prob, dupe_factor=FLAGS.dupe_factor,
            random_seed=FLAGS.random_seed, short_seq_prob=FLAGS.short_seq_prob,
            do_whole_word_mask=FLAGS.do_whole_word_mask, word_boundaries=FLAGS.word_boundaries,
            static_masking=FLAGS.static_masking, num_shards=FLAGS.num_shards,
            shard_index=FLAGS.shard_index, min_tokens=FLAGS.min_tokens,
            max_tokens=FLAGS.max_tokens, original_rng=FLAGS.original_rng,
            balanced_nsp=FLAGS.balanced_nsp, max_position_embeddings=max_position_embeddings)
        stats = create_pretraining_data(options)
    except (FileNotFoundError, ValueError) as e:
        bert_flags.exit_with_error(e)
    logging.info("%d documents (%d dropped short, %d dropped long), %d examples -> %s",
                 stats.corpus.documents, stats.corpus.dropped_short, stats.corpus.dropped_long,
                 stats.examples, stats.output_file)


if __name__ == "__main__":
    app.run(main, flags_parser=bert_flags.parse_flags_or_exit)
