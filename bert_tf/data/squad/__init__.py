"""SQuAD v1.1 / v2.0, one concern a module.

- `reading`: JSON files -> questions, contexts split into words, gold answers.
- `alignment`: word pieces of contexts with their character spans (graph).
- `features`: windows, max-context flags, model inputs, training positions.
- `decoding`: the post-processor shared by evaluation and the exported model (graph).
- `predictions`: evaluation's windows through it, and the prediction files.
- `metrics`: the official exact match and F1.
"""
