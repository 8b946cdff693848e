"""Importing bert_tf turns TensorFlow's oneDNN CPU kernels on (x86 Linux); a user's own setting wins."""

import os
import platform
import subprocess
import sys

import pytest

PROBE = "import bert_tf; from tensorflow.python.util import _pywrap_util_port as p; print(p.IsMklEnabled())"


def _onednn_after_import(**env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    result = subprocess.run([sys.executable, "-c", PROBE], env={**environ, **env},
                            capture_output=True, text=True, check=True)
    return result.stdout.split()[-1]


@pytest.mark.skipif(not (sys.platform.startswith("linux") and platform.machine() == "x86_64"),
                    reason="set on x86 Linux only")
def test_importing_bert_tf_turns_onednn_on_where_tensorflow_would_not():
    # TensorFlow alone turns oneDNN on only on CPUs with AVX-512 VNNI/BF16, AVX-VNNI or AMX.
    assert _onednn_after_import() == "True"


def test_a_tf_enable_onednn_opts_the_user_set_wins():
    assert _onednn_after_import(TF_ENABLE_ONEDNN_OPTS="0") == "False"
