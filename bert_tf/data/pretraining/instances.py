"""Pretraining instances, the google-research/bert `create_pretraining_data` recipe.

Each document yields sequences filled up to a target length from consecutive
sentences (shorter targets with `short_seq_prob`), split at a random sentence
boundary into segments A and B; B is the true continuation
(next_sentence_label 0) or, half the time and always for a one-sentence
chunk, a run of sentences from another document (label 1), the unused
sentences being put back.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Callable, Iterator, Sequence

from bert_tf.data.pretraining.documents import Document, Sentence


@dataclasses.dataclass
class Instance:
    """One unpacked sentence pair.

    Unmasked, unless the writer masked it as it was drawn (`--original_rng`):
    then A and B hold the replacements, and the targets are set, as positions
    in the packed [CLS] A [SEP] B [SEP] and the original ids there.
    """

    tokens_a: list[int]
    tokens_b: list[int]
    word_starts_a: list[bool]
    word_starts_b: list[bool]
    is_random_next: bool
    masked_lm_positions: list[int] | None = None
    masked_lm_ids: list[int] | None = None



def create_instances(documents: Sequence[Document], *, max_seq_length: int, short_seq_prob: float,
                     dupe_factor: int, rng: random.Random, balanced_nsp: bool = False,
                     each: Callable[[Instance], Instance] | None = None) -> list[Instance]:
    """All instances of `dupe_factor` passes over the documents, shuffled.

    As in the original: the documents are shuffled once, then each pass makes
    the instances of every document in turn, and the whole list is shuffled.

    Args:
      documents: tokenized documents.
      max_seq_length: packed length; A and B together get 3 tokens fewer
        ([CLS], [SEP], [SEP]).
      short_seq_prob: probability of a random target length in
        [2, max_seq_length - 3] instead of the full length, so that the model
        also sees short sequences.
      dupe_factor: passes over the corpus, each with different choices.
      rng: the one random source, for reproducible output.
      balanced_nsp: see `instances_from_document`.
      each: applied to every instance as soon as it is made, before the next
        one is drawn (the original masks there, with the same `rng`).
    """
    documents = list(documents)
    rng.shuffle(documents)
    instances = []
    for _ in range(dupe_factor):
        for index in range(len(documents)):
            for instance in instances_from_document(
                    documents, index, max_seq_length=max_seq_length,
                    short_seq_prob=short_seq_prob, rng=rng, balanced_nsp=balanced_nsp):
                instances.append(each(instance) if each else instance)
    rng.shuffle(instances)
    return instances


def instances_from_document(documents: Sequence[Document], index: int, *, max_seq_length: int,
                            short_seq_prob: float, rng: random.Random,
                            balanced_nsp: bool = False) -> Iterator[Instance]:
    """Yields the instances of `documents[index]`, drawing as the original does.

    Consecutive sentences fill a chunk up to the target length; A is its first
    `a_end` sentences (`a_end` drawn first), and B is the rest or, when the
    chunk holds one sentence or a coin says so, sentences from a random point
    of another document (the chunk's unused sentences go back for later).

    The original's one-sentence rule makes B random more often than half the
    time: 56-57% on corpora of long documents, 64% on tweets 5 a document, 66%
    on People's Daily at length 64 and 73% on the tweets one a document.
    `balanced_nsp` tosses the coin first instead, and a one-sentence chunk that
    draws a true next takes the document's next sentence (at the end of the
    document, its previous one); a one-sentence document is cut at a random
    word start into A and B. Only a one-word document still forces a random B,
    so the random share is 50%.
    """
    document = documents[index]
    max_num_tokens = max_seq_length - 3
    target_length = max_num_tokens
    if rng.random() < short_seq_prob:
        target_length = rng.randint(2, max_num_tokens)

    chunk: list[Sentence] = []
    chunk_length = 0
    i = 0
    while i < len(document):
        chunk.append(document[i])
        chunk_length += len(document[i])
        if i == len(document) - 1 or chunk_length >= target_length:
            if balanced_nsp:
                is_random_next = rng.random() < 0.5
                if not is_random_next and len(chunk) == 1:
                    if i + 1 < len(document):
                        i += 1
                        chunk.append(document[i])
                    elif i > 0:
                        chunk.insert(0, document[i - 1])
                    else:
                        chunk = _split_at_a_word(chunk[0], rng)
                        is_random_next = len(chunk) == 1
                a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            else:
                a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
                is_random_next = len(chunk) == 1 or rng.random() < 0.5
            a = _concat(chunk[:a_end])
            if is_random_next:
                b = _random_continuation(documents, index, target_length - len(a.ids), rng)
                # The sentences of the chunk not used as B go back for later.
                i -= len(chunk) - a_end
            else:
                b = _concat(chunk[a_end:])
            _truncate_pair(a, b, max_num_tokens, rng)
            yield Instance(a.ids, b.ids, a.word_starts, b.word_starts, is_random_next)
            chunk = []
            chunk_length = 0
        i += 1


def _split_at_a_word(sentence: Sentence, rng: random.Random) -> list[Sentence]:
    """The sentence cut in two at a random word start; unchanged if it is one word."""
    cuts = [k for k in range(1, len(sentence)) if sentence.word_starts[k]]
    if not cuts:
        return [sentence]
    k = rng.choice(cuts)
    return [Sentence(sentence.ids[:k], sentence.word_starts[:k]),
            Sentence(sentence.ids[k:], sentence.word_starts[k:])]


def _concat(sentences: Sequence[Sentence]) -> Sentence:
    out = Sentence([], [])
    for s in sentences:
        out.ids.extend(s.ids)
        out.word_starts.extend(s.word_starts)
    return out


def _random_continuation(documents: Sequence[Document], index: int, target_length: int,
                         rng: random.Random) -> Sentence:
    """Sentences from a random start in another document, up to target_length tokens."""
    # Ten tries at another document; a one-document corpus falls back to itself.
    for _ in range(10):
        other = rng.randint(0, len(documents) - 1)
        if other != index:
            break
    document = documents[other]
    out = Sentence([], [])
    for sentence in document[rng.randint(0, len(document) - 1):]:
        out.ids.extend(sentence.ids)
        out.word_starts.extend(sentence.word_starts)
        if len(out.ids) >= target_length:
            break
    return out


def _truncate_pair(a: Sentence, b: Sentence, max_num_tokens: int, rng: random.Random) -> None:
    """Shortens the longer segment one token at a time, from the front or the back at random.

    The lengths left are those of round-robin trimming; taking from either
    end, as the original does, avoids always cutting the ends of documents.
    """
    while len(a.ids) + len(b.ids) > max_num_tokens:
        longer = a if len(a.ids) > len(b.ids) else b
        at = 0 if rng.random() < 0.5 else -1
        del longer.ids[at]
        del longer.word_starts[at]
