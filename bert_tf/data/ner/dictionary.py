"""The dictionary baseline of NER: tag every string that was an entity in training."""

from __future__ import annotations

import collections
from typing import Sequence

from bert_tf.data import tag_schemes
from bert_tf.data.ner.conll import TaggedSentence


def dictionary_tags(train: Sequence[TaggedSentence], sentences: Sequence[Sequence[str]],
                    scheme: str = "BIO") -> list[list[str]]:
    """The dictionary baseline: tags every string that was an entity in training.

    The dictionary maps each entity's word sequence to its most frequent type
    in `train` (ties: the type first in alphabetical order). Sentences are
    scanned left to right; at each word the longest dictionary entry that
    starts there is tagged, and the scan continues after it.

    Args:
      train: the training sentences.
      sentences: the word sequences to tag.
      scheme: the scheme of the output tags.

    Returns:
      One list of tags per sentence.
    """
    counts: dict[tuple[str, ...], collections.Counter] = collections.defaultdict(collections.Counter)
    for sentence, found in zip(train, tag_schemes.entities([s.tags for s in train])):
        for entity_type, start, end in found:
            counts[sentence.words[start:end + 1]][entity_type] += 1
    dictionary = {words: min(c, key=lambda t: (-c[t], t)) for words, c in counts.items()}
    longest = max(map(len, dictionary), default=0)
    result = []
    for words in sentences:
        words, found, i = tuple(words), [], 0
        while i < len(words):
            for length in range(min(longest, len(words) - i), 0, -1):
                entity_type = dictionary.get(words[i:i + length])
                if entity_type is not None:
                    found.append((entity_type, i, i + length - 1))
                    i += length
                    break
            else:
                i += 1
        result.append(tag_schemes.entity_tags(len(words), found, scheme))
    return result
