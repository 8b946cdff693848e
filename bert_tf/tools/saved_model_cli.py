"""TensorFlow's saved_model_cli with the tensorflow-text ops registered first.

    python -m bert_tf.tools.saved_model_cli show --dir exports/NAME/1 --all

The exported graphs tokenize with tensorflow-text ops; the stock
`saved_model_cli` does not load them, so `show --all` (which loads the
functions) and `run` fail on our exports without this wrapper.
"""

import tensorflow_text  # noqa: F401  (registers the ops)
from tensorflow.python.tools import saved_model_cli

if __name__ == "__main__":
    saved_model_cli.main()
