"""``python -m cli``: the ``qkv`` command (``torchrun --nproc_per_node N -m cli train-encoder
...`` for several GPUs)."""

from cli.app import app

app(prog_name="qkv")
