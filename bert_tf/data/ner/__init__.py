"""Token tagging data (NER, slot filling), one concern a module.

  - `conll`: CoNLL files, read (errors name the file and line) and written;
    the tag list of a training set.
  - `features`: word pieces of tagged sentences, labelled on first pieces.
  - `prediction`: from logits to one tag per word, shared by evaluation and
    the exported SavedModel.
  - `scoring`: entity-level precision, recall and F1.
  - `dictionary`: the dictionary baseline.
  - `people_daily`: the People's Daily 1998 demo corpus.

The tagging schemes and the entity chunk rules are `bert_tf.data.tag_schemes`.
"""
